"""CPU measurements: the numpy engine (``cpu.CpuEngine``, float32, the trainer's own steps) and
PyTorch on the CPU (benchmarks/torch_ref.py), SeedNet training steps (Adam, NLL) on the same
cores, in the same run."""

from __future__ import annotations

import asyncio
import os
import time

from native import REPO, _data


def numpy_seednet(batch: int, steps: int, warmup: int = 1) -> dict:
    """ms per training step of the numpy engine at ``batch`` (mean of ``steps`` after
    ``warmup``)."""
    return asyncio.run(_numpy_seednet(batch, steps, warmup))


async def _numpy_seednet(batch, steps, warmup):
    import numpy as np
    from webgpu_trainer import onnx_io
    from webgpu_trainer.cpu.cpu_engine import CpuEngine
    from webgpu_trainer.engine.train.loop import Trainer
    split, source = _data(max(4 * batch, 8192))
    graph, weights = onnx_io.load_bundle(REPO / "models" / "seednet.onnx")
    cfg = {"optimizer": "adam", "lr": 1e-3, "batch_size": batch, "seed": 0,
           "init": "scratch", "eval_images": batch, "val_images": 0}
    tr = Trainer(CpuEngine(), graph, weights, cfg, split, split)
    await tr.setup()
    tr.engine.set_order(list(range(split.count)))

    async def one():
        tr.step = t = tr.step + 1
        await tr.engine.step(t, ((t - 1) % tr.per_epoch) * batch, 1e-3)
    for _ in range(warmup):
        await one()
    t0 = time.perf_counter()
    for _ in range(steps):
        await one()
    ms = 1000 * (time.perf_counter() - t0) / steps
    return {"batch": batch, "steps": steps, "ms": ms, "images_per_s": 1000 * batch / ms,
            "data": source, "numpy": np.__version__, "threads": os.cpu_count(),
            "blas_threads": blas_threads()}


def blas_threads():
    """The thread count of numpy's bundled OpenBLAS (scipy-openblas), None where another BLAS
    is linked."""
    import ctypes
    import glob
    import numpy as np
    for lib in glob.glob(os.path.join(os.path.dirname(np.__file__) + ".libs", "*openblas*")):
        for name in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
                     "openblas_get_num_threads64_", "openblas_get_num_threads"):
            fn = getattr(ctypes.CDLL(lib), name, None)
            if fn is not None:
                return int(fn())
    return None


def best_of_threads(batch: int, steps: int, threads=(1, 2)) -> dict:
    """``numpy_seednet`` in a fresh process per OpenBLAS thread count (OPENBLAS_NUM_THREADS is
    read at load): the fastest, with every count's ms in ``by_threads``. On a loaded machine
    a second BLAS thread that has to wait for a core costs more than it brings."""
    import json
    import subprocess
    import sys
    runs = {}
    for n in threads:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": str(n), "OMP_NUM_THREADS": str(n)}
        out = subprocess.run([sys.executable, __file__, str(batch), str(steps)], env=env,
                             capture_output=True, text=True, check=True).stdout
        runs[n] = json.loads(out.strip().splitlines()[-1])
    best = min(runs, key=lambda n: runs[n]["ms"])
    return {**runs[best], "threads": best, "by_threads": {n: r["ms"] for n, r in runs.items()}}


def torch_best_of_threads(batch: int, steps: int, threads=(1, 2)) -> dict:
    """benchmarks/torch_ref.seednet on the CPU with each thread count: the fastest."""
    import torch
    import torch_ref
    runs = {}
    for n in threads:
        torch.set_num_threads(n)
        runs[n] = torch_ref.seednet(batch, steps, warmup=2, graphs=False)
    best = min(runs, key=lambda n: runs[n]["ms"])
    return {**runs[best], "threads": best, "by_threads": {n: r["ms"] for n, r in runs.items()},
            "torch": torch.__version__}


if __name__ == "__main__":  # one numpy measurement: BATCH STEPS -> a JSON line
    import json
    import sys
    sys.path.insert(0, str(REPO / "py"))
    print(json.dumps(numpy_seednet(int(sys.argv[1]), int(sys.argv[2]))))

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
    from webgpu_trainer.engine.train import Trainer
    split, source = _data(max(4 * batch, 8192))
    graph, weights = onnx_io.load_bundle(REPO / "models" / "seednet.onnx")
    cfg = {"optimizer": "adam", "lr": 1e-3, "batch_size": batch, "seed": 0,
           "init": "scratch", "eval_images": batch}
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
            "data": source, "numpy": np.__version__, "threads": os.cpu_count()}

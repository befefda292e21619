#!/usr/bin/env python3
"""The embedding table gradient's cost natively (wgpu-py; lavapipe on a machine without a GPU):
ms per Adam training step of Embedding(V, 16) -> mean over T tokens -> Linear(16, 4) at batch
N with T token ids per sample (N*T = 64*256 = 16384 by default), ids drawn uniformly from V
(V = 20000: mostly distinct, the case where scanning for equal ids costs most).

    .venv/bin/python benchmarks/embed_grad.py [--batch 64] [--length 256] [--vocab 20000]
    PYTHONPATH=/other/checkout/py .venv/bin/python benchmarks/embed_grad.py   # another engine

Prints setup seconds, ms per step (median of ``--repeats`` runs of ``--steps`` back-to-back
steps after one warm-up step) and the number of dispatches of a step.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "scripts"))


def _model(vocab: int, length: int, path: Path) -> None:
    import torch
    torch.manual_seed(0)
    emb, fc = torch.nn.Embedding(vocab, 16), torch.nn.Linear(16, 4)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.fc = emb, fc

        def forward(self, x):
            return self.fc(self.emb(x).mean(1))
    torch.onnx.export(Net(), (torch.zeros(2, length, dtype=torch.int64),), str(path),
                      dynamo=False, opset_version=17, input_names=["tokens"],
                      output_names=["scores"],
                      dynamic_axes={"tokens": {0: "N"}, "scores": {0: "N"}})


async def time_steps(dev, graph, blob, split, batch: int, steps: int, repeats: int) -> dict:
    """Setup seconds, median ms per training step (Adam, the trainer's own step: gather ->
    forward -> loss -> backward -> Adam) over ``repeats`` runs of ``steps`` back-to-back
    steps, and the dispatches of one step."""
    from webgpu_trainer.engine.train.gpu_engine import GpuEngine
    from webgpu_trainer.engine.train.loop import Trainer
    cfg = {"optimizer": "adam", "lr": 1e-3, "batch_size": batch, "seed": 0,
           "init": "finetune", "eval_images": batch, "val_images": 0}
    tr = Trainer(GpuEngine(dev), graph, blob, cfg, split, split)
    t0 = time.perf_counter()
    await tr.setup()
    setup_s = time.perf_counter() - t0
    eng = tr.engine
    per_epoch = max(1, split.count // batch)
    eng.set_order(list(range(split.count)))

    async def one():
        tr.step += 1
        await eng.step(tr.step, ((tr.step - 1) % per_epoch) * batch, 1e-3)

    await one()
    await dev.sync()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            await one()
        await dev.sync()
        runs.append(1000 * (time.perf_counter() - t0) / steps)
    return {"setup_s": setup_s, "ms_per_step": statistics.median(runs),
            "dispatches": len(eng.train_program)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=20000)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    from webgpu_trainer.engine.train.data import DataSpec, Split
    from webgpu_trainer.onnx_io import load_bundle
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "embed.onnx"
        _model(a.vocab, a.length, path)
        graph, blob = load_bundle(path)
    rng = np.random.default_rng(0)
    count = 2 * a.batch
    x = rng.integers(0, a.vocab, (count, a.length)).astype(np.uint16)
    y = rng.integers(0, 4, count).astype(np.uint8)
    spec = DataSpec("ids", "ids", "tokens", [a.length], list("abcd"), dtype="uint16",
                    vocab_size=a.vocab)
    split = Split(x.tobytes(), y.tobytes(), count, y.tobytes(), spec)
    from webgpu_trainer.engine.backends.wgpu_native import Device
    dev = Device(backend="vulkan")  # lavapipe on a machine without a GPU
    out = asyncio.run(time_steps(dev, graph, blob, split, a.batch, a.steps, a.repeats))
    print(f"embedding V={a.vocab} N*T={a.batch}*{a.length}={a.batch * a.length} on "
          f"vulkan: "
          f"setup {out['setup_s']:.1f} s, {out['ms_per_step']:.1f} ms/step, "
          f"{out['dispatches']} dispatches")
    return 0


if __name__ == "__main__":
    sys.exit(main())

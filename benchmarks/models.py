#!/usr/bin/env python3
"""Benchmark (not a test): training speed of the imported fixture models natively (wgpu-py):
ms per training step (data gather, forward, loss, backward, Adam update) and images/s, per model
and batch size, with the adapter used. Data: real MNIST from its cache when present, else
random MNIST-shaped bytes (speed does not depend on the pixels).

    python benchmarks/models.py                           # the opset-17 fixtures, batch 64
    python benchmarks/models.py --batch 64 1000 --steps 50 --pattern '*-dynamo18.onnx'
    python benchmarks/models.py --profile 25 [--model M.onnx] # one model's slowest dispatches

``--profile N``: every dispatch of one training step timed on its own (submit + wait, so small
kernels read high: compare rows, not sums), the N slowest with phase (data, forward, loss,
backward, optimizer) and grid size (``Trainer.profile``).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "py") not in sys.path:
    sys.path.insert(0, str(REPO / "py"))


def _splits(count: int):
    from webgpu_trainer.engine.train.data import Split
    from webgpu_trainer.host import data
    cache = data.default_cache_dir()
    if (cache / "manifest.json").is_file():
        out = []
        for name in ("train", "test"):
            images, labels = data.load(cache, name)
            out.append(Split(images.tobytes(), labels.tobytes(), len(labels), labels.tobytes()))
        return out + ["MNIST"]
    rng = random.Random(0)
    images = bytes(rng.getrandbits(8) for _ in range(count * 784))
    labels = bytes(rng.randrange(10) for _ in range(count))
    split = Split(images, labels, count, labels)
    return [split, split, "random bytes"]


async def bench(paths, batches, steps, warmup):
    from webgpu_trainer import onnx_io
    from webgpu_trainer.engine.tools import summary
    from webgpu_trainer.engine.backends.wgpu_native import Device
    from webgpu_trainer.engine.train.gpu_engine import GpuEngine
    from webgpu_trainer.engine.train.loop import Trainer
    dev = Device()
    info = dev.info
    print(f"adapter: {info.get('device') or info.get('description')} "
          f"({info.get('backend_type', '?')})", flush=True)
    train, test, source = _splits(max(batches) * (steps + warmup + 1))
    print(f"data: {source}\n")
    print("| model | params | mult-adds/image | batch | ms/step | images/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for path in paths:
        graph, weights = onnx_io.load_bundle(path)
        totals = summary.summarize(graph)["totals"]
        for batch in batches:
            cfg = {"optimizer": "adam", "lr": 1e-3, "batch_size": batch, "seed": 0,
                   "init": "scratch", "eval_images": batch, "val_images": 0}
            tr = Trainer(GpuEngine(dev), graph, weights, cfg, train, test)
            await tr.setup()
            per_epoch = train.count // batch
            perm = list(range(train.count))
            random.Random(0).shuffle(perm)
            tr.engine.set_order(perm)

            async def one_step(tr=tr, per_epoch=per_epoch, batch=batch):
                tr.step = t = tr.step + 1
                await tr.engine.step(t, ((t - 1) % per_epoch) * batch, tr.lr_at(t))
            for _ in range(warmup):
                await one_step()
            await dev.sync()
            t0 = time.perf_counter()
            for _ in range(steps):
                await one_step()
            await dev.sync()
            dt = time.perf_counter() - t0
            print(f"| {path.stem} | {totals['params']:,} | {totals['macs']:,} | {batch} | "
                  f"{1000 * dt / steps:.2f} | {steps * batch / dt:,.0f} |", flush=True)


async def profile(path: Path, batch: int, top: int):
    """Print the ``top`` slowest dispatches of one training step of ``path`` at ``batch``."""
    from webgpu_trainer import onnx_io
    from webgpu_trainer.engine.backends.wgpu_native import Device
    from webgpu_trainer.engine.train.gpu_engine import GpuEngine
    from webgpu_trainer.engine.train.loop import Trainer
    train, test, _ = _splits(4 * batch)
    graph, weights = onnx_io.load_bundle(path)
    tr = Trainer(GpuEngine(Device()), graph, weights,
                 {"batch_size": batch, "eval_images": batch, "val_images": 0}, train, test)
    await tr.setup()
    rows = await tr.profile(repeats=5)
    total = sum(r[3] for r in rows)
    print(f"{path.name}, batch {batch}, {len(rows)} dispatches, sum {total:.2f} ms "
          f"(each dispatch timed alone)")
    for phase, key, grid, ms in sorted(rows, key=lambda r: -r[3])[:top]:
        print(f"{ms:8.3f} ms  {phase:9s} {key:40s} {grid}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pattern", default="*-ts17.onnx", help="fixture file glob")
    p.add_argument("--batch", type=int, nargs="+", default=[64])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="instead: the N slowest dispatches of one step of --model")
    p.add_argument("--model", type=Path, default=REPO / "models" / "seednet.onnx",
                   help="the model --profile looks at (default models/seednet.onnx)")
    args = p.parse_args(argv)
    if args.profile:
        asyncio.run(profile(args.model, args.batch[0], args.profile))
        return 0
    paths = sorted((REPO / "tests" / "fixtures" / "models").glob(args.pattern))
    paths = [REPO / "models" / "seednet.onnx"] + paths
    asyncio.run(bench(paths, args.batch, args.steps, args.warmup))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Profile (not a test): the time of every dispatch of one training step of a model, natively
(wgpu-py), sorted, with the phase (data, forward, loss, backward, optimizer) and grid size.
Each dispatch runs alone (submit + wait), so small kernels read high; compare rows, not sums.

    python scripts/profile_step.py [MODEL.onnx] [--batch 64] [--top 25]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "py") not in sys.path:
    sys.path.insert(0, str(REPO / "py"))


async def profile(path: Path, batch: int, top: int):
    from webgpu_trainer import onnx_io
    from webgpu_trainer.engine.backends.wgpu_native import Device
    from webgpu_trainer.engine.train import Split, Trainer
    rng = random.Random(0)
    n = 4 * batch
    images = bytes(rng.getrandbits(8) for _ in range(n * 784))
    labels = bytes(rng.randrange(10) for _ in range(n))
    split = Split(images, labels, n, labels)
    graph, weights = onnx_io.load_bundle(path)
    dev = Device()
    tr = Trainer(dev, graph, weights, {"batch_size": batch, "eval_images": batch, "val_images": 0}, split, split)
    await tr.setup()
    rows = await tr.profile(repeats=5)
    total = sum(r[3] for r in rows)
    print(f"{path.name}, batch {batch}, {len(rows)} dispatches, sum {total:.2f} ms "
          f"(each dispatch timed alone)")
    for phase, key, grid, ms in sorted(rows, key=lambda r: -r[3])[:top]:
        print(f"{ms:8.3f} ms  {phase:9s} {key:40s} {grid}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", type=Path, default=REPO / "models" / "seednet.onnx")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    asyncio.run(profile(args.model, args.batch, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())

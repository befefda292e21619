#!/usr/bin/env python3
"""Kernel profile of the zoo (not a test): every dispatch of one engine training step of each
zoo model (benchmarks/zoo.py), each timed alone by timestamp queries (median of 5), summed per
kernel (shader entry point) and listed largest first; JSON with every dispatch.

    python benchmarks/zoo_profile.py --models resnet8 encoder --batch 1000 --json prof.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


async def profile(dev, path: Path, batch: int, shape=(1, 28, 28)) -> dict:
    """{"dispatches": [(phase, kernel, workgroups, ms)], "by_kernel": {kernel: ms}, "ms"}."""
    import native
    import zoo
    from gpu_timer import Timer
    tr, _ = await zoo.trainer(dev, path, batch, shape)
    eng = tr.engine
    for s in range(1, 4):
        await eng.step(s, 0, 1e-3)
    await dev.sync()
    eng._write_step(4, 0, 1e-3, eng.opt.scalars(4, 1e-3))
    rows = native._profile(eng, Timer(dev))
    by = {}
    for phase, key, _, ms in rows:
        name = f"{phase}:" + ":".join(str(key).split(":")[:2])
        by[name] = by.get(name, 0.0) + ms
    return {"dispatches": [[p, str(k), w, ms] for p, k, w, ms in rows],
            "by_kernel": dict(sorted(by.items(), key=lambda kv: -kv[1])),
            "ms": sum(r[3] for r in rows)}


def main(argv=None) -> int:
    import zoo
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(zoo.ZOO), choices=zoo.ZOO)
    p.add_argument("--batch", type=int, nargs="+", default=[64, 1000])
    p.add_argument("--engine", type=Path, default=HERE.parent / "py")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--shape", type=int, nargs=3, default=[1, 28, 28], metavar=("C", "H", "W"),
                   help="the input shape of zoo.py's own models (make_zoo's have theirs)")
    p.add_argument("--builder", default="", metavar="NAME=VALUE,...",
                   help="set plan.Builder class attributes meanwhile (zoo.py --builder)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    sys.path.insert(0, str(args.engine.resolve()))
    import gpu_timer
    dev = gpu_timer.open_device()
    folder, res = Path(tempfile.mkdtemp(prefix="zoo-")), []
    for name in args.models:
        shape = zoo.shape_of(name, args.shape)
        path = zoo.export(name, shape, folder)
        for batch in args.batch:
            with zoo.builder(args.builder):
                r = asyncio.run(profile(dev, path, batch, shape))
            res.append({"model": name, "batch": batch, **r})
            print(f"== {name} batch {batch}: {r['ms']:.3f} ms summed, "
                  f"{len(r['dispatches'])} dispatches", flush=True)
            for k, ms in list(r["by_kernel"].items())[:args.top]:
                print(f"  {ms * 1000:8.1f} us  {k}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Kernel profile of the zoo (not a test): every dispatch of one engine training step of each
zoo model (benchmarks/zoo.py), each timed alone by timestamp queries (median of 5), summed per
kernel (shader entry point) and listed largest first; JSON with every dispatch.

    python benchmarks/zoo_profile.py --models resnet8 encoder --batch 1000 --json prof.json
    python benchmarks/zoo_profile.py --fixtures mobilenetv2 --batch 8   # tests/fixtures/zoo

``--fixtures``: models of the test zoo (tests/fixtures/zoo, scripts/make_zoo.py; the
TorchScript file) instead, on tests/test_zoo.py's data of the model's shape.
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


async def fixture_trainer(dev, name: str, batch: int):
    """A Trainer (Adam lr 1e-3, seed 0) of the test zoo's ``name`` (TorchScript file) on
    tests/test_zoo.py's data for it, set up."""
    sys.path[:0] = [str(HERE.parent / "tests"), str(HERE.parent / "scripts")]
    import test_zoo
    from webgpu_trainer import onnx_io
    from webgpu_trainer.engine.train.gpu_engine import GpuEngine
    from webgpu_trainer.engine.train.loop import Trainer
    split = test_zoo._data(name, 4 * batch, 1)
    graph, weights = onnx_io.load_bundle(test_zoo.ZOO / f"{name}-ts.onnx")
    cfg = {"optimizer": "adam", "lr": 1e-3, "batch_size": batch, "seed": 0,
           "init": "finetune", "eval_images": batch, "val_images": 0}
    tr = Trainer(GpuEngine(dev), graph, weights, cfg, split, split)
    await tr.setup()
    tr.engine.set_order(list(range(split.count)))
    return tr


async def profile(dev, path, batch: int, shape=(1, 28, 28), marginal: bool = False,
                  repeat: int = 0) -> dict:
    """{"dispatches": [(phase, kernel, workgroups, ms)], "by_kernel": {kernel: ms}, "ms"};
    ``path``: an ONNX file of benchmarks/zoo.py, or the name of a test-zoo model.

    ``marginal``: each dispatch's ms is instead what it adds to the step where it stands: the
    GPU time of the step's first i + 1 dispatches in one pass less that of its first i (median
    of 11 each, after 60 warm-up passes), so launch gaps and barriers count and overlap with
    neighbours does not; "ms" is then the whole step's pass (on an H100 its differences were
    noise: single dispatches at -300 us). ``repeat`` R: each dispatch's ms is instead a pass of
    R copies of it back to back over R (median of 5 passes, after the GPU's clocks are up):
    each copy waits for the one before (they write the same buffers), so that is the dispatch
    with its barrier, in the clocks and caches of a busy step; "ms" then adds them up, to set
    beside the whole step's pass (zoo.py's gpu_ms). The state the repeats leave is garbage:
    the trainer is thrown away after."""
    import native
    import zoo
    from gpu_timer import Timer, median
    tr = await (zoo.trainer(dev, path, batch, shape) if isinstance(path, Path)
                else fixture_trainer(dev, path, batch))
    if isinstance(tr, tuple):
        tr = tr[0]
    eng = tr.engine
    for s in range(1, 4):
        await eng.step(s, 0, 1e-3)
    await dev.sync()
    eng._write_step(4, 0, 1e-3, eng.opt.scalars(4, 1e-3))
    rows = native._profile(eng, Timer(dev))
    if marginal:
        timer, prog = Timer(dev), eng.train_program
        for _ in range(3):  # the GPU's clocks up first
            timer.passes([prog] * 20)
        prefix = [0.0] + [median(timer.passes([prog[:i]] * 11))
                          for i in range(1, len(prog) + 1)]
        rows = [(*r[:3], prefix[i + 1] - prefix[i]) for i, r in enumerate(rows)]
    elif repeat:
        timer, prog = Timer(dev), eng.train_program
        for _ in range(3):
            timer.passes([prog] * 20)
        rows = [(*r[:3], median(timer.passes([[d] * repeat] * 5)) / repeat)
                for r, d in zip(rows, prog)]
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
    p.add_argument("--fixtures", nargs="+", default=[], metavar="NAME",
                   help="test-zoo models (tests/fixtures/zoo) instead of --models")
    p.add_argument("--batch", type=int, nargs="+", default=[64, 1000])
    p.add_argument("--engine", type=Path, default=HERE.parent / "py")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--shape", type=int, nargs=3, default=[1, 28, 28], metavar=("C", "H", "W"),
                   help="the input shape of zoo.py's own models (make_zoo's have theirs)")
    p.add_argument("--builder", default="", metavar="NAME=VALUE,...",
                   help="set plan.Builder class attributes meanwhile (zoo.py --builder)")
    p.add_argument("--repeat", type=int, default=0, metavar="R",
                   help="each dispatch as a pass of R copies of it, over R (profile's repeat)")
    p.add_argument("--marginal", action="store_true",
                   help="each dispatch's share of the whole step's pass (profile's marginal)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    sys.path.insert(0, str(args.engine.resolve()))
    import gpu_timer
    dev = gpu_timer.open_device()
    folder, res = Path(tempfile.mkdtemp(prefix="zoo-")), []
    for name in args.fixtures or args.models:
        shape = None if args.fixtures else zoo.shape_of(name, args.shape)
        path = name if args.fixtures else zoo.export(name, shape, folder)
        for batch in args.batch:
            with zoo.builder(args.builder):
                r = asyncio.run(profile(dev, path, batch, shape, args.marginal,
                                        args.repeat))
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

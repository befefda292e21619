#!/usr/bin/env python3
"""GPU memory of a training step per zoo model (not a test): the plan's own allocations,
counted without a GPU (engine/train/memory.py's counting device, the GPU kernels' buffers),
with a buffer per activation gradient and scratch ("own", ``Builder.POOL = False``) and with
them sharing buffers by their live ranges (engine/pool.py, "shared", the default), against a
minimum.

The minimum of a trainer that keeps every activation for the backward pass: parameters, their
gradients, the optimizer's state (Adam: two floats per parameter; the update's mask and the
guard's flags are overhead), the activations and what the
ops keep of the forward for the backward (batch statistics, RNN gates and states), and the most
activation-gradient bytes live at any one dispatch of the step. Scratch (split-K parts, padded
copies, batch statistics) is not in it, so "shared / minimum" also shows what the kernels'
scratch costs; "pool peak" is the most gradient and scratch bytes live at one dispatch (what
the shared buffers could shrink to). Bytes in MB (10^6).

    python benchmarks/memory.py                       # the zoo at batch 64 and 1000
    python benchmarks/memory.py --models resnet18 --batch 64 256 1000 --json out.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "py"))

import zoo  # noqa: E402

SHAPES = {"resnet8": (3, 32, 32), "resnet18": (3, 32, 32)}


def measure(path: Path, batch: int) -> dict:
    """Bytes of the step of the model at ``path`` at ``batch`` (Adam), own and shared."""
    from webgpu_trainer import onnx_io
    from webgpu_trainer.engine.graph import Graph
    from webgpu_trainer.engine.plan import Plan
    from webgpu_trainer.engine.train import memory, optim
    from webgpu_trainer.engine.train.guard import Guard
    desc, _ = onnx_io.load_bundle(path)
    out = {}
    for mode, spec in (("own", "POOL=False"), ("shared", "")):
        dev = memory.CountingDevice()
        with zoo.builder(spec):
            plan = memory._run(Plan.build(dev, Graph(desc), batch))
        guard = memory._run(Guard.build(plan))
        memory._run(optim.make("adam", 1e-3).attach(plan, guard))
        parts = dict.fromkeys(memory.PARTS, 0)
        for b in dev.buffers:
            parts[memory._part(b.label, plan)] += b.size
        out[mode] = {"bytes": dev.allocated, "parts": parts}
        if mode == "shared":
            p = parts
            # parameters, their gradients, Adam's two moments (not the update's mask or the
            # clipping norm's partials)
            out["minimum"] = 4 * plan.wbytes + p["activations"] + p["saved"] \
                + plan.grad_pool["grad_peak"]
            out["pool"] = plan.grad_pool
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(zoo.ZOO))
    ap.add_argument("--batch", nargs="+", type=int, default=[64, 1000])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rows = []
    print("| model | batch | own MB | shared MB | minimum MB | own / min | shared / min |"
          " pool peak MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            shape = zoo.shape_of(name, SHAPES.get(name, (1, 28, 28)))
            path = zoo.export(name, shape, Path(tmp))
            for batch in args.batch:
                m = measure(path, batch)
                own, shared, low = m["own"]["bytes"], m["shared"]["bytes"], m["minimum"]
                rows.append({"model": name, "shape": list(shape), "batch": batch, **m})
                print(f"| {zoo.LABELS[name]} | {batch} | {own / 1e6:,.1f} | {shared / 1e6:,.1f}"
                      f" | {low / 1e6:,.1f} | {own / low:.2f}x | {shared / low:.2f}x | "
                      f"{m['pool']['peak'] / 1e6:,.1f} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "what": "GPU bytes of one Adam training step (counting device, GPU kernels)",
            "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

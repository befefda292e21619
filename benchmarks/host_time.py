#!/usr/bin/env python3
"""Host (CPU) time of one training step natively (wgpu-py), per model (not a test).

A training step on the host is ``GpuEngine.step``: pack the 32-byte Step uniform, then
``Device.run_step``: write it, encode the recorded program (one compute pass, per dispatch: set
pipeline, set bind group, dispatch) and submit it. This measures that call with the GPU idle
(the queue drained before each measured step, as ``benchmarks/native.py``'s host_ms), beside
the same step made the way it was before ``run_step`` (``write`` + ``submit`` through wgpu-py's
``write_buffer`` and its encoder / pass / command-buffer objects), alternated in one run; both
as wall time and as the calling thread's CPU time (``time.thread_time``: the work this thread
does, without the time it waits for the driver's threads or is preempted: on a loaded machine
the robust figure). Then it splits ``run_step``:

- ``write``: ``wgpuQueueWriteBuffer`` of the uniform;
- ``python``: the Python side of the replay (the loop with its C calls replaced by no-ops:
  what Python itself spends per dispatch);
- ``encode``: creating the encoder and the pass, the replay through wgpu-native, ``end`` and
  ``finish`` (wgpu-core records, validates and places barriers for each command here);
- ``submit``: ``wgpuQueueSubmit`` (wgpu-core's per-command resource tracking and the driver's
  submission; on lavapipe / llvmpipe the driver's queue thread runs the step on the CPU, so this
  column's wall time is not host time there).

The host time a step costs the engine is ``write + encode`` (+ wgpu-core's share of
``submit``). Each figure is the median of ``--repeats`` (default 20) in microseconds, after
warm-up; the JSON keeps every run (``runs_us``) and the maxima. The batch (default 16) changes
the GPU's work, not the host's.

What it showed (README, "Host time of a training step"; benchmarks/results/2026-12-02-host-
run-step.json): about 4-7 us of host time a dispatch on a loaded 2-core VM, nine tenths of it
inside wgpu-native's encode + finish, 0.2 us in Python; ``run_step`` saves wgpu-py's per-step
objects (50-150 us a step there). WebGPU re-encodes every dispatch each step (no reusable
compute command buffers or bundles), so host time grows with the dispatch count; the wall-time
tail (milliseconds) is inside ``submit`` while the thread's CPU time stays within 1.5x of its
median: waiting on the driver, not work.

    python benchmarks/host_time.py                      # SeedNet, ResNet-8, ViT at batch 16
    python benchmarks/host_time.py --models ResNet-18n MobileNetV2   # the zoo's most dispatches
    python benchmarks/host_time.py --json out.json --label after
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = {  # name -> (file, sample shape)
    "SeedNet": (REPO / "models" / "seednet.onnx", (1, 28, 28)),
    "ResNet-8": (REPO / "tests" / "fixtures" / "zoo" / "resnet8-ts.onnx", (3, 32, 32)),
    "ViT": (REPO / "tests" / "fixtures" / "zoo" / "vit-ts.onnx", (3, 32, 32)),
    "LSTM": (REPO / "tests" / "fixtures" / "zoo" / "lstm-ts.onnx", (1, 28, 28)),
    # the zoo's most dispatches a step (scripts/make_zoo.py)
    "ResNet-18n": (REPO / "tests" / "fixtures" / "zoo" / "resnet18n-ts.onnx", (3, 32, 32)),
    "MobileNetV2": (REPO / "tests" / "fixtures" / "zoo" / "mobilenetv2-ts.onnx", (3, 32, 32)),
}
DEFAULT = ("SeedNet", "ResNet-8", "ViT")


def _split(shape, count: int):
    from webgpu_trainer.engine.train.data import DataSpec, Split
    spec = DataSpec("bench", "random", "image", shape, [str(i) for i in range(10)],
                    mean=[0.5] * shape[0], std=[0.25] * shape[0])
    rng = random.Random(0)
    labels = bytes(rng.randrange(10) for _ in range(count))
    return Split(rng.randbytes(count * spec.values), labels, count, labels, spec)


def _us(samples) -> float:
    return 1e6 * statistics.median(samples)


async def _trainer(dev, name: str, batch: int):
    from webgpu_trainer import onnx_io
    from webgpu_trainer.engine.train.gpu_engine import GpuEngine
    from webgpu_trainer.engine.train.loop import Trainer
    path, shape = MODELS[name]
    graph, weights = onnx_io.load_bundle(path)
    split = _split(shape, 4 * batch)
    cfg = {"optimizer": "adam", "lr": 1e-3, "batch_size": batch, "seed": 0,
           "init": "scratch", "eval_images": batch, "val_images": 0}
    tr = Trainer(GpuEngine(dev), graph, weights, cfg, split, split)
    await tr.setup()
    tr.engine.set_order(list(range(split.count)))
    return tr


def _python_only(program):
    """The replay loop of ``program`` with its C calls replaced by a no-op: what Python itself
    spends per dispatch."""
    def nothing(*_):
        return None
    null = None
    for pipe, bg, x, y, z in program.raw:
        if pipe is not None:
            nothing(None, pipe)
        if bg is not None:
            nothing(None, 0, bg, 0, null)
        nothing(None, x, y, z)


def _parts(dev, eng, data) -> tuple:
    """``Device.run_step`` (wgpu_native._Step) with a clock between its parts: (write,
    encode, submit) in seconds."""
    from webgpu_trainer.engine.backends import wgpu_native as wn
    c = dev._step
    f, lib = wn._libf, wn._lib
    t0 = time.perf_counter()
    f.wgpuQueueWriteBuffer(c.queue, eng.plan.step._internal, 0, wn._ffi.from_buffer(data),
                           len(data))
    t1 = time.perf_counter()
    enc = f.wgpuDeviceCreateCommandEncoder(c.device, c.enc_desc)
    h = f.wgpuCommandEncoderBeginComputePass(enc, c.pass_desc)
    wn._replay_raw(h, eng.train_program.raw)
    f.wgpuComputePassEncoderEnd(h)
    lib.wgpuComputePassEncoderRelease(h)
    c.cbs[0] = f.wgpuCommandEncoderFinish(enc, c.cb_desc)
    lib.wgpuCommandEncoderRelease(enc)
    t2 = time.perf_counter()
    f.wgpuQueueSubmit(c.queue, 1, c.cbs)
    lib.wgpuCommandBufferRelease(c.cbs[0])
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2


async def measure(dev, name: str, batch: int, repeats: int) -> dict:
    """The host figures of one model (see the module docstring), in microseconds."""
    from webgpu_trainer.engine.plan import pack_step
    tr = await _trainer(dev, name, batch)
    eng = tr.engine
    per_epoch = 4

    async def one_step():
        tr.step += 1
        await eng.step(tr.step, ((tr.step - 1) % per_epoch) * batch, 1e-3)

    def before_step():  # the step as before run_step: wgpu-py's write_buffer and encoder objects
        tr.step += 1
        t = tr.step
        eng._write_step(t, ((t - 1) % per_epoch) * batch, 1e-3, eng.opt.scalars(t, 1e-3))
        dev.submit([eng.train_program])

    for _ in range(5):
        await one_step()
    await dev.sync()
    cols = {k: [] for k in ("step", "before", "step_cpu", "before_cpu", "write", "python",
                            "encode", "submit")}
    clock, cpu = time.perf_counter, time.thread_time
    for _ in range(repeats):  # the two ways alternated, each after the queue drained
        await dev.sync()
        t0, c0 = clock(), cpu()
        await one_step()
        cols["step"].append(clock() - t0)
        cols["step_cpu"].append(cpu() - c0)
        await dev.sync()
        t0, c0 = clock(), cpu()
        before_step()
        cols["before"].append(clock() - t0)
        cols["before_cpu"].append(cpu() - c0)
        await dev.sync()
        tr.step += 1
        data = pack_step(tr.step, 0, eng.seed, 1e-3, eng.opt.scalars(tr.step, 1e-3))
        for k, v in zip(("write", "encode", "submit"), _parts(dev, eng, data)):
            cols[k].append(v)
        t0 = time.perf_counter()
        _python_only(eng.train_program)
        cols["python"].append(time.perf_counter() - t0)
    await dev.sync()
    us = {k: _us(v) for k, v in cols.items()}
    return {"model": name, "batch": batch, "dispatches": len(eng.train_program),
            "step_us": us["step"], "step_us_min": 1e6 * min(cols["step"]),
            "step_us_max": 1e6 * max(cols["step"]), "before_us": us["before"],
            "step_cpu_us": us["step_cpu"], "before_cpu_us": us["before_cpu"],
            "write_us": us["write"], "python_us": us["python"], "encode_us": us["encode"],
            "submit_us": us["submit"], "engine_us": us["write"] + us["encode"],
            "max_us": {k: 1e6 * max(v) for k, v in cols.items()},
            "runs_us": {k: [round(1e6 * x, 1) for x in v] for k, v in cols.items()}}


def table(rows: list) -> str:
    """The rows as a Markdown table."""
    head = ("| model | dispatches/step | step us, before -> after (wall) | the same, thread "
            "CPU | host us/step (write + encode) | us/dispatch | write | Python part of encode "
            "| encode + finish | submit (driver incl.) |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for r in rows:
        lines.append(f"| {r['model']} | {r['dispatches']} | {r['before_us']:.0f} -> "
                     f"{r['step_us']:.0f} | {r['before_cpu_us']:.0f} -> {r['step_cpu_us']:.0f} | "
                     f"{r['engine_us']:.0f} | "
                     f"{r['engine_us'] / r['dispatches']:.2f} | {r['write_us']:.0f} | "
                     f"{r['python_us']:.0f} | {r['encode_us']:.0f} | {r['submit_us']:.0f} |")
    return "\n".join(lines)


async def main(args) -> dict:
    import wgpu

    from webgpu_trainer.engine.backends.wgpu_native import Device
    dev = Device()
    rows = [await measure(dev, m, args.batch, args.repeats) for m in args.models]
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "label": args.label, "adapter": dev.info, "wgpu": wgpu.__version__,
            "python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "load": os.getloadavg(), "rows": rows}


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "py"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(DEFAULT), choices=list(MODELS))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--label", default="")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    out = asyncio.run(main(a))
    print(table(out["rows"]))
    print(f"load {out['load'][0]:.1f} on {out['cores']} cores; {out['adapter']['device']}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")

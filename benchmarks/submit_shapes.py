#!/usr/bin/env python3
"""Where a small step's wall time goes beyond its GPU time (not a test): one zoo model's
training program (benchmarks/zoo.py's set-up) submitted in different shapes, natively.

For ``k`` back-to-back steps of the same recorded program (wgpu-native's C calls, as
``Device.run_step`` makes them), each shape reports ``[wall, host]`` ms a step: wall from the
first call to the queue being idle (``k`` steps and one readback), host the calling thread's
time until its last call returned (median of ``--repeats``):

- ``step``: the engine's shape, a uniform write and a command buffer (one pass) a submit;
- ``no_write``: the same without the uniform write;
- ``four_a_buffer``: 4 steps' passes a command buffer, no writes;
- ``one_buffer``: all ``k`` passes in one command buffer (nothing runs until it is encoded);
- ``one_pass``: all ``k`` steps' dispatches in one pass;
- ``pre_encoded``: command buffers encoded before the clock starts, then a write and a submit
  each: what is left when no encoding is on the calling thread.

``gpu`` is the GPU's own time of one step (timestamps around a pass, 20 passes in one buffer:
zoo.py's ``gpu_ms``).

What it showed (H100, wgpu-py 0.32, ``results/2026-12-07-h100-s41-submit-shapes.json``): at
batch 64 the host's encode is 40-60% of the wall time, yet ``pre_encoded`` (host 0.03-0.06 ms
a step) leaves the wall where ``step`` has it (MLP 0.182 vs 0.180 at k = 100; SeedNet 0.378 vs
0.369; the encoder 0.368 vs 0.361): the GPU's own gaps between submits set the wall, not the
host. One command buffer for 4 steps saves 0-10 us a step; the uniform write 8-13.

    python benchmarks/submit_shapes.py --models mlp:64 seednet:64 --steps 20 100 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _median(v):
    return sorted(v)[len(v) // 2]


async def shapes(dev, name: str, batch: int, ks, repeats: int) -> dict:
    """``{"model", "batch", "dispatches", "gpu", "<shape>_<k>": [wall, host]}`` (ms a step)
    of zoo model ``name`` at ``batch``; the shapes of the module docstring."""
    import zoo
    from gpu_timer import Timer, median
    from webgpu_trainer.engine.backends import wgpu_native as wn
    from webgpu_trainer.engine.plan import pack_step
    shape = zoo.shape_of(name, (1, 28, 28))
    tr, per_epoch = await zoo.trainer(dev, zoo.export(name, shape, Path(tempfile.mkdtemp())),
                                      batch, shape)
    eng = tr.engine
    for t in range(1, 4):  # the program's checked first submit records its raw handles
        await eng.step(t, ((t - 1) % per_epoch) * batch, 1e-3)
    await dev.sync()
    prog, f, lib, ffi = eng.train_program, wn._libf, wn._lib, wn._ffi
    raw, d = prog.raw, dev.device
    q, dh, uniform = d.queue._internal, d._internal, eng.plan.step._internal
    data = pack_step(4, 0, eng.seed, 1e-3, eng.opt.scalars(4, 1e-3))
    ed = ffi.new("WGPUCommandEncoderDescriptor *")
    pd = ffi.new("WGPUComputePassDescriptor *")
    cd = ffi.new("WGPUCommandBufferDescriptor *")
    cbs = ffi.new("WGPUCommandBuffer[1]")

    def write():
        f.wgpuQueueWriteBuffer(q, uniform, 0, ffi.from_buffer(data), len(data))

    def encode(steps: int, one_pass: bool = False):
        enc = f.wgpuDeviceCreateCommandEncoder(dh, ed)
        for _pass in range(1 if one_pass else steps):
            h = f.wgpuCommandEncoderBeginComputePass(enc, pd)
            for _ in range(steps if one_pass else 1):
                wn._replay_raw(h, raw)
            f.wgpuComputePassEncoderEnd(h)
            lib.wgpuComputePassEncoderRelease(h)
        cb = f.wgpuCommandEncoderFinish(enc, cd)
        lib.wgpuCommandEncoderRelease(enc)
        return cb

    def submit(cb):
        cbs[0] = cb
        f.wgpuQueueSubmit(q, 1, cbs)
        lib.wgpuCommandBufferRelease(cb)

    def batched(k: int, per: int, writes: bool = False, one_pass: bool = False):
        for done in range(0, k, per):
            if writes:
                write()
            submit(encode(min(per, k - done), one_pass))

    pre: list = []

    def pre_encoded(k: int):
        for cb in pre:
            write()
            submit(cb)
        pre.clear()

    def sync():
        d.queue.read_buffer(dev._fence(), 0, 4)

    def timed(run, k: int, setup=None):
        walls, hosts = [], []
        for i in range(repeats + 2):
            if setup:
                setup(k)
            sync()
            t0 = time.perf_counter()
            run(k)
            t1 = time.perf_counter()
            sync()
            t2 = time.perf_counter()
            if i >= 2:
                walls.append(1000 * (t2 - t0) / k)
                hosts.append(1000 * (t1 - t0) / k)
        return [round(_median(walls), 4), round(_median(hosts), 4)]

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 2.0:  # the GPU's clocks up first (zoo.WARMUP_S)
        batched(10, 1, writes=True)
        sync()
    row = {"model": name, "batch": batch, "dispatches": len(prog),
           "gpu": round(median(Timer(dev).passes([prog] * 20)), 4)}
    for k in ks:
        row[f"step_{k}"] = timed(lambda k: batched(k, 1, writes=True), k)
        row[f"no_write_{k}"] = timed(lambda k: batched(k, 1), k)
        row[f"four_a_buffer_{k}"] = timed(lambda k: batched(k, 4), k)
        row[f"one_buffer_{k}"] = timed(lambda k: batched(k, k), k)
        row[f"one_pass_{k}"] = timed(lambda k: batched(k, k, one_pass=True), k)
        row[f"pre_encoded_{k}"] = timed(pre_encoded, k,
                                        setup=lambda k: pre.extend(encode(1) for _ in range(k)))
    return row


def main(argv=None) -> int:
    import gpu_timer
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["mlp:64", "seednet:64", "encoder:64"],
                   metavar="NAME:BATCH", help="zoo models (benchmarks/zoo.py) and batches")
    p.add_argument("--steps", type=int, nargs="+", default=[20, 100])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args(argv)
    dev = gpu_timer.open_device()
    rows = []
    for spec in args.models:
        name, batch = spec.split(":")
        rows.append(asyncio.run(shapes(dev, name, int(batch), args.steps, args.repeats)))
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

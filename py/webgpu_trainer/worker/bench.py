"""The worker's ``bench`` message: time SeedNet-style training steps inside the browser
(benchmarks/browser.py sends it; no page control uses it; main.py sets the run up). Standard
library only."""

import struct
import time
from types import SimpleNamespace

from ..engine.ops import gemm as gemm_op
from ..engine.plan import Builder


async def bench(trainer, dev, data: dict) -> dict:
    """Time ``trainer``'s own steps (gather, forward, loss, backward, optimizer; no readback).

    ``data``: ``steps`` timed back to back (default 10), ``warmup`` (default 2), ``host`` steps
    timed alone with the GPU idle (default 5), ``profile`` (bool: also the per-dispatch times),
    ``gemm`` (n: also the engine's n x n GEMM, see ``gemm``), ``in_flight`` (n >= 1: this
    engine's ``GpuEngine.IN_FLIGHT`` for the back-to-back steps, an A/B of the queue's
    depth; ValueError for another value; the ``host`` steps always return without waiting
    for themselves, as with the default 2, so ``host_ms`` stays the host's cost alone).
    Returns ``{batch, steps, wall_ms, host_ms, host_min_ms, host_max_ms, host_runs,
    host_split, dispatches, profile?}``: ``wall_ms`` the mean wall time per step of the
    back-to-back steps (milliseconds), ``host_ms`` the median time of one step's Python +
    bridge calls (``GpuEngine.step``: write the step uniform, submit) with the GPU idle,
    ``host_runs`` all of them; ``host_split`` the medians of ``split``'s parts over as many
    steps, taken alternately with those (the step as three device calls)."""
    eng, batch, per_epoch = trainer.engine, int(trainer.cfg["batch_size"]), trainer.per_epoch
    depth = data.get("in_flight")
    if depth is not None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"bench: in_flight must be an integer >= 1, got {depth!r}")
        eng.IN_FLIGHT = depth
    eng.set_order(list(range(trainer.train_set.count)))

    async def one_step():
        trainer.step = t = trainer.step + 1
        await eng.step(t, ((t - 1) % per_epoch) * batch, trainer.lr_at(t))

    for _ in range(int(data.get("warmup") or 2)):
        await one_step()
    await dev.sync()
    steps = int(data.get("steps") or 10)
    t0 = time.perf_counter()
    for _ in range(steps):
        await one_step()
    await dev.sync()
    wall = 1000 * (time.perf_counter() - t0) / steps
    host, parts = [], []
    eng.IN_FLIGHT = max(2, eng.IN_FLIGHT)  # a host step never waits for its own GPU work
    for _ in range(int(data.get("host") or 5)):
        await dev.sync()
        eng.forget_fences()  # nothing to wait for: the call's own cost only
        t0 = time.perf_counter()
        await one_step()
        host.append(1000 * (time.perf_counter() - t0))
        await dev.sync()
        eng.forget_fences()
        parts.append(await split(trainer, dev))
    await dev.sync()
    host.sort()
    out = {"batch": batch, "steps": steps, "wall_ms": wall, "host_ms": host[len(host) // 2],
           "host_min_ms": host[0], "host_max_ms": host[-1], "adapter": dev.info,
           "host_runs": [round(h, 4) for h in host], "dispatches": eng.train_dispatches,
           "host_split": {k: sorted(p[k] for p in parts)[len(parts) // 2] for k in parts[0]}}
    if data.get("profile"):
        out["profile"] = [list(r) for r in await trainer.profile()]
    if data.get("gemm"):
        out["gemm"] = await gemm(dev, int(data["gemm"]))
    return out


async def split(trainer, dev) -> dict:
    """One training step made of the three device calls ``run_step`` replaces, each timed
    with the GPU idle (milliseconds): ``write`` (pack and write the Step uniform), ``submit``
    (encode the program and submit it: natively through wgpu-py's objects; in Pyodide one JS
    call, the browser's encoder inside it), ``fence`` (the awaitable of the step's end);
    ``sum``: their total, the host time of a step before ``run_step``."""
    eng, batch = trainer.engine, int(trainer.cfg["batch_size"])
    await dev.sync()
    trainer.step = t = trainer.step + 1
    t0 = time.perf_counter()
    lr = trainer.lr_at(t)
    eng._write_step(t, ((t - 1) % trainer.per_epoch) * batch, lr, eng.opt.scalars(t, lr))
    t1 = time.perf_counter()
    dev.submit([eng.train_program])
    t2 = time.perf_counter()
    fence = dev.fence()
    t3 = time.perf_counter()
    await fence
    return {"write": 1000 * (t1 - t0), "submit": 1000 * (t2 - t1), "fence": 1000 * (t3 - t2),
            "sum": 1000 * (t3 - t0)}


async def gemm(dev, n: int, reps: int = 3) -> dict:
    """The engine's Gemm kernel (``ops.gemm.matmul``) on [n, n] x [n, n] float32 filled with
    ones: ``{n, ms, gflops}`` (mean wall time of ``reps`` runs after one warm-up, each ended by
    a queue wait), and ``ok`` (every output element equals n)."""
    ones = struct.pack("<f", 1.0) * (n * n)
    a, bm, out = dev.buffer(4 * n * n, "A"), dev.buffer(4 * n * n, "B"), dev.buffer(4 * n * n, "C")
    dev.write(a, ones)
    dev.write(bm, ones)
    b = Builder(SimpleNamespace(dev=dev, P=None, G=None, step=None))
    await gemm_op.matmul(b, a, (n, 1), bm, (n, 1), out, n, n, n)
    prog = dev.program(b.current)
    dev.submit([prog])
    await dev.sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        dev.submit([prog])
    await dev.sync()
    ms = 1000 * (time.perf_counter() - t0) / reps
    row = struct.unpack(f"<{n}f", await dev.read(out, 0, 4 * n))
    return {"n": n, "ms": ms, "gflops": 2 * n ** 3 / ms / 1e6,
            "ok": all(v == float(n) for v in row),
            "kernels": [d[0][2] for d in b.current]}

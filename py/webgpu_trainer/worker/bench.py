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
    ``gemm`` (n: also the engine's n x n GEMM, see ``gemm``).
    Returns ``{batch, steps, wall_ms, host_ms, host_min_ms, profile?}``: ``wall_ms`` the mean
    wall time per step of the back-to-back steps (milliseconds), ``host_ms`` the median time of
    one step's Python + bridge calls (write the step uniform, submit) with the GPU idle."""
    eng, batch, per_epoch = trainer.engine, int(trainer.cfg["batch_size"]), trainer.per_epoch
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
    host = []
    for _ in range(int(data.get("host") or 5)):
        await dev.sync()
        eng._in_flight = None  # nothing to wait for: the call's own cost only
        t0 = time.perf_counter()
        await one_step()
        host.append(1000 * (time.perf_counter() - t0))
    await dev.sync()
    eng._in_flight = None
    host.sort()
    out = {"batch": batch, "steps": steps, "wall_ms": wall, "host_ms": host[len(host) // 2],
           "host_min_ms": host[0], "adapter": dev.info}
    if data.get("profile"):
        out["profile"] = [list(r) for r in await trainer.profile()]
    if data.get("gemm"):
        out["gemm"] = await gemm(dev, int(data["gemm"]))
    return out


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

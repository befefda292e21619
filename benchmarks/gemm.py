#!/usr/bin/env python3
"""GEMM benchmark (not a test): the engine's Gemm kernels (ops/gemm.matmul) on given shapes,
GPU time by timestamp queries (median of ``--reps`` after a warm-up), TFLOP/s, the error of 64
rows against float64, beside cuBLAS (torch.matmul, TF32 off) on CUDA. Each shape is timed with
the engine's own kernel choice ("auto"), and with ``--force`` the untiled (0) or tiled
kernel (16: 16 x 16 threads; 16x8: 16 along m, 8 along n).

    python benchmarks/gemm.py                                   # 4096^3 and the MLP's products
    python benchmarks/gemm.py --shapes 1000x1024x1024:nt --force 0 16 --engine base/py

A shape is ``MxNxK:XY``: out[M, N] = op(A)[M, K] op(B)[K, N], X / Y "n" (row-major A [M, K],
B [K, N]) or "t" (stored transposed: A [K, M], B [N, K]). The defaults: 4096^3, and the
products of a training step of the MLP 784-1024-1024-10 at batch 1000 (forward, dX, dW).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

SHAPES = ("4096x4096x4096:nn", "1000x1024x784:nt", "1000x1024x1024:nt", "1000x1024x1024:nn",
          "1024x1024x1000:tn", "1024x784x1000:tn")


@contextlib.contextmanager
def constants(spec: str):
    """WGSL override constants ``NAME=VALUE,...`` added to every ``matmul_tiled`` dispatch
    built meanwhile (an A/B of a kernel variant; "" changes nothing)."""
    from webgpu_trainer.engine.plan import Builder
    extra = {k: float(v) for k, v in (kv.split("=") for kv in spec.split(",") if kv)}
    plain = Builder.kernel

    async def kernel(self, shader, entry, groups, *, params, constants=None, **slots):
        if entry == "matmul_tiled" and extra:
            constants = {**(constants or {}), **extra}
        return await plain(self, shader, entry, groups, params=params, constants=constants,
                           **slots)
    Builder.kernel = kernel
    try:
        yield
    finally:
        Builder.kernel = plain


def _tiles(force: str):
    """ops/gemm.tile_shape's answer for a ``--force`` value: "0" the untiled kernel, "16" 16 x
    16 threads, "16x8" 16 along m and 8 along n."""
    if force in ("0", 0):
        return None
    wm, _, wn = str(force).partition("x")
    return (int(wm), int(wn or wm))


def parse(shape: str):
    """(m, n, k, ta, tb) of ``MxNxK:XY``."""
    dims, _, tt = shape.partition(":")
    m, n, k = (int(v) for v in dims.split("x"))
    tt = tt or "nn"
    if len(tt) != 2 or set(tt) - {"n", "t"}:
        raise ValueError(f"shape {shape!r}: expected MxNxK:XY with X, Y in n/t")
    return m, n, k, tt[0] == "t", tt[1] == "t"


async def engine(dev, shape: str, force=None, reps: int = 20) -> dict:
    """GPU ms and TFLOP/s of the engine's matmul on ``shape`` (and each of its dispatches'
    ms, timed alone); ``force`` a tile width."""
    import numpy as np
    from gpu_timer import Timer, median
    from webgpu_trainer.engine.ops import gemm as gemm_op
    from webgpu_trainer.engine.plan import Builder
    m, n, k, ta, tb = parse(shape)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
    ba, bb, bc = dev.buffer(a.nbytes, "A"), dev.buffer(b.nbytes, "B"), dev.buffer(4 * m * n, "C")
    dev.write(ba, a.tobytes())
    dev.write(bb, b.tobytes())
    builder = Builder(types.SimpleNamespace(dev=dev, P=None, G=None, step=None))
    rule = gemm_op.tile_shape
    if force is not None:
        gemm_op.tile_shape = lambda *_: _tiles(force)
    try:
        await gemm_op.matmul(builder, ba, (1, m) if ta else (k, 1), bb,
                             (1, k) if tb else (n, 1), bc, m, n, k)
    finally:
        gemm_op.tile_shape = rule
    prog = dev.program(builder.current)
    timer = Timer(dev)
    timer.passes([prog] * 3)
    ms = median(timer.passes([prog] * reps))
    each = [median(v) for v in zip(*(timer.passes([[d] for d in prog]) for _ in range(5)))]
    rows = min(m, 64)
    got = np.frombuffer(await dev.read(bc, 0, rows * n * 4), np.float32).reshape(rows, n)
    a64 = (a.T if ta else a).astype(np.float64)
    ref = a64[:rows] @ (b.T if tb else b).astype(np.float64)
    return {"shape": shape, "force": force, "ms": ms, "tflops": 2 * m * n * k / ms / 1e9,
            "rel_err": float(np.abs(got - ref).max() / np.abs(ref).max()),
            "kernels": [d[0][2].split(":")[1] for d in builder.current],
            "kernel_ms": each}


def cublas(shape: str, reps: int = 20) -> dict:
    """torch.matmul on CUDA (TF32 off) of ``shape``: median ms by CUDA events, TFLOP/s."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    m, n, k, ta, tb = parse(shape)
    a = torch.randn((k, m) if ta else (m, k), device="cuda")
    b = torch.randn((n, k) if tb else (k, n), device="cuda")
    a, b = (a.t() if ta else a), (b.t() if tb else b)
    for _ in range(3):
        c = a @ b
    times = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        c = a @ b
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1))
    del c
    ms = sorted(times)[reps // 2]
    return {"shape": shape, "ms": ms, "tflops": 2 * m * n * k / ms / 1e9}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=list(SHAPES))
    p.add_argument("--force", nargs="*", default=[],
                   help="also time each shape with this tile width (0: untiled, 16: tiled)")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--const", nargs="+", default=[""], metavar="NAME=VALUE,...",
                   help="time each shape with each of these override sets of matmul_tiled")
    p.add_argument("--builder", nargs="+", default=[""], metavar="NAME=VALUE,...",
                   help="time each shape with each of these Builder flag sets (zoo.py's)")
    p.add_argument("--cublas", action="store_true", help="also torch.matmul on CUDA")
    p.add_argument("--engine", type=Path, default=REPO / "py",
                   help="folder holding the webgpu_trainer package (default: this checkout's)")
    p.add_argument("--label", default="")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    sys.path.insert(0, str(args.engine.resolve()))
    import gpu_timer
    import zoo
    dev = gpu_timer.open_device()
    rows = []
    print(f"| shape | kernel ({args.label or 'engine'}) | ms | TFLOP/s | rel. error |")
    print("|---|---|---:|---:|---:|")
    for shape in args.shapes:
        runs = [(None, c, f) for c in args.const for f in args.builder] + \
            [(f, "", b) for f in args.force for b in args.builder]
        for force, const, flags in runs:
            with constants(const), zoo.builder(flags):
                r = asyncio.run(engine(dev, shape, force, args.reps))
            r["label"], r["const"], r["builder"] = args.label, const, flags
            rows.append(r)
            what = ("auto" if force is None else f"forced {force}") + \
                "".join(f" {v}" for v in (const, flags) if v)
            kernels = " + ".join(f"{k} ({ms:.4f})" for k, ms in zip(r["kernels"], r["kernel_ms"]))
            print(f"| {shape} | {what}: {kernels} | {r['ms']:.4f} | "
                  f"{r['tflops']:.2f} | {r['rel_err']:.1e} |", flush=True)
        if args.cublas:
            r = cublas(shape, args.reps)
            r["label"] = "cuBLAS"
            rows.append(r)
            print(f"| {shape} | cuBLAS | {r['ms']:.4f} | {r['tflops']:.2f} | |", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"adapter": dev.info, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmarks (not tests): the engine natively through wgpu-py beside PyTorch in one run.

    python benchmarks/run.py                  # table + benchmarks/results/<date>.json
    python benchmarks/run.py --quick          # fewer steps, smaller GEMM
    python benchmarks/run.py --json out.json --profile 25 --no-torch

Rows: SeedNet training steps (Adam, NLL) at batch 64 and 1000 (GPU ms/step by timestamp
queries, wall ms/step of back-to-back steps, images/s), host ms/step (Python + wgpu calls of
one step with the GPU idle), peak GPU memory of the model's buffers against params + optimizer
state + activations kept for backward + parameter gradients, and the f32 GEMM at 4096^3
(engine kernel, TFLOP/s) beside PyTorch (CUDA graphs / cuBLAS where CUDA is present, else CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

MB = 1 << 20
VARIANTS = ("gemm_untiled", "conv_fct8", "wgrad_1", "elementwise_1")


def _versions(dev) -> dict:
    import wgpu
    v = {"python": platform.python_version(), "wgpu-py": wgpu.__version__,
         "wgpu-native": ".".join(map(str, wgpu.backends.wgpu_native.version_info)),
         "platform": platform.platform()}
    try:
        import torch_ref
        v.update(torch_ref.versions())
    except Exception as exc:  # no torch: the table says so
        v["torch"] = f"absent ({type(exc).__name__})"
    return v


async def _native(args) -> dict:
    import gpu_timer
    import native
    dev = gpu_timer.open_device()
    out = {"adapter": dev.info, "timestamps": dev.timestamps, "seednet": [], "gemm": [],
           "features": sorted(dev.device.adapter.features) if hasattr(dev.device, "adapter")
           else []}
    for batch in args.batch:
        steps = args.steps if batch >= 512 else 4 * args.steps
        r = await native.seednet(dev, batch, steps, warmup=args.warmup,
                                 profile=bool(args.profile), gpu_reps=args.gpu_reps)
        out["seednet"].append(r)
        print(f"  native seednet batch {batch}: {r['gpu_ms']:.3f} ms GPU, {r['wall_ms']:.3f} "
              f"wall, host {r['host_ms']:.3f} ms", flush=True)
    out["variants"] = []
    for name in args.variant:  # the same steps with one engine choice changed (A/B)
        with native.variant(name):
            for batch in args.batch:
                steps = args.steps if batch >= 512 else 4 * args.steps
                r = await native.seednet(dev, batch, steps, warmup=args.warmup, profile=False,
                                         gpu_reps=args.gpu_reps)
                r["variant"] = name
                out["variants"].append(r)
                print(f"  native seednet [{name}] batch {batch}: {r['gpu_ms']:.3f} ms GPU, "
                      f"{r['wall_ms']:.3f} wall", flush=True)
    variants = [(None, None)] + ([(False, None), (True, 8)] if args.both_gemms else [])
    for tiled, tw in variants:
        g = await native.gemm(dev, args.gemm_n, tiled=tiled, tw=tw)
        out["gemm"].append(g)
        print(f"  native gemm {g['n']}^3 {g['kernels']}: "
              f"{g['tflops']:.2f} TFLOP/s (err {g['rel_err']:.1e})", flush=True)
    return out


def _torch(args) -> dict:
    import torch_ref
    out = {"seednet": [], "gemm": None}
    for batch in args.batch:
        steps = args.steps if batch >= 512 else 4 * args.steps
        r = torch_ref.seednet(batch, steps)
        out["seednet"].append(r)
        print(f"  torch seednet batch {batch}: {r['ms']:.3f} ms", flush=True)
    out["gemm"] = torch_ref.gemm(args.gemm_n)
    print(f"  torch gemm: {out['gemm']['tflops']:.2f} TFLOP/s", flush=True)
    return out


def table(res: dict) -> str:
    nat, tor = res["native"], res.get("torch")
    ad = nat["adapter"]
    name = f"{ad.get('device') or ad.get('description')} ({ad.get('backend_type')})"
    tdev = "PyTorch " + (tor["seednet"][0]["device"].upper() if tor and tor["seednet"] else "-")
    graphs = tor and tor["seednet"] and "graph_ms" in tor["seednet"][0]
    lines = [f"adapter: {name}; {tdev}" + (" (CUDA graphs; eager in brackets)" if graphs else ""),
             "", f"| measure | engine (wgpu-py) | {tdev} |", "|---|---:|---:|"]
    for i, r in enumerate(nat["seednet"]):
        t = tor["seednet"][i] if tor else None
        tt = "-" if not t else (f"{t['ms']:.3f} ({t['eager_ms']:.3f})" if graphs
                                else f"{t['ms']:.3f}")
        lines.append(f"| SeedNet batch {r['batch']}, ms/step (GPU) | {r['gpu_ms']:.3f} | {tt} |")
        lines.append(f"| SeedNet batch {r['batch']}, ms/step (wall, back to back) | "
                     f"{r['wall_ms']:.3f} | |")
        ti = f"{1000 * r['batch'] / t['ms']:,.0f}" if t else "-"
        lines.append(f"| SeedNet batch {r['batch']}, images/s | {r['images_per_s']:,.0f} | {ti} |")
        lines.append(f"| SeedNet batch {r['batch']}, host ms/step ({r['dispatches']} dispatches)"
                     f" | {r['host_ms']:.3f} | |")
    for r in nat["seednet"][-1:]:
        m = r["memory"]
        t = tor["seednet"][-1] if tor else None
        tp = f"{t['peak_bytes'] / MB:.0f}" if t and "peak_bytes" in t else "-"
        lines.append(f"| SeedNet batch {r['batch']}, GPU MiB (model; reference "
                     f"{m['reference_bytes'] / MB:.0f}; +{m['data_bytes'] / MB:.0f} MNIST) | "
                     f"{m['model_bytes'] / MB:.0f} ({m['ratio']:.2f}x) | {tp} |")
    for g in nat["gemm"]:
        tg = tor["gemm"] if tor else None
        lines.append(f"| GEMM f32 {g['n']}^3 TFLOP/s ({g['variant']}) |"
                     f" {g['tflops']:.2f} | " + (f"{tg['tflops']:.2f} ({tg['library']})" if tg
                                                else "-") + " |")
    return "\n".join(lines)


def profile_table(r: dict, top: int) -> str:
    rows = sorted(r["profile"], key=lambda x: -x[3])[:top]
    total = sum(x[3] for x in r["profile"])
    out = [f"batch {r['batch']}: {len(r['profile'])} dispatches, sum {total:.3f} ms GPU"]
    out += [f"{ms * 1000:9.1f} us  {phase:9s} {key[:60]:60s} {grid}"
            for phase, key, grid, ms in rows]
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, nargs="+", default=[64, 1000])
    p.add_argument("--steps", type=int, default=50, help="timed steps at batch >= 512 "
                   "(4x that below)")
    p.add_argument("--warmup", type=int, default=10, help="warm-up steps (default 10)")
    p.add_argument("--gpu-reps", type=int, default=50,
                   help="steps timed by timestamp queries for the GPU ms/step (default 50)")
    p.add_argument("--gemm-n", type=int, default=4096)
    p.add_argument("--both-gemms", action="store_true", help="also the untiled GEMM kernel")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--variant", nargs="*", default=[],
                   help="also time SeedNet with: " + ", ".join(VARIANTS))
    p.add_argument("--profile", type=int, default=20, help="print the N slowest dispatches")
    p.add_argument("--quick", action="store_true", help="10 steps, GEMM 1024")
    p.add_argument("--label", default="", help="recorded in the JSON")
    p.add_argument("--engine", type=Path, default=REPO / "py",
                   help="folder holding the webgpu_trainer package (default: this checkout's)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    sys.path.insert(0, str(args.engine.resolve()))
    if args.quick:
        args.steps, args.gemm_n = min(args.steps, 10), min(args.gemm_n, 1024)
    res = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "label": args.label}
    res["native"] = asyncio.run(_native(args))
    if not args.no_torch:
        try:
            res["torch"] = _torch(args)
        except ImportError as exc:
            print(f"  torch: not available ({exc})")
    res["versions"] = _versions(None)
    res["versions"]["engine"] = str(args.engine.resolve())
    print()
    print(table(res))
    if args.profile:
        for r in res["native"]["seednet"]:
            print()
            print(profile_table(r, args.profile))
    path = args.json or HERE / "results" / f"{res['date'][:19].replace(':', '')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=1))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

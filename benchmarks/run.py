#!/usr/bin/env python3
"""Benchmarks (not tests): SeedNet training steps (Adam, NLL; batch 64 and 1000) and the f32
GEMM, our engine beside its peers, in one run. ``webgpu-trainer bench`` runs this.

    python benchmarks/run.py                         # all parts: table + results/<date>.json
    python benchmarks/run.py --only browser cpu      # leave the native part out
    python benchmarks/run.py --only native --gemm-n 4096   # the device variant (h200.sh)

Parts (``--only``):
- browser: headless Chromium (``--enable-unsafe-webgpu``; SwiftShader on a machine with no GPU):
  our engine through its worker (``bench`` message: wall ms/step of back-to-back steps, host
  ms/step = Python + bridge calls of one step with the GPU idle, per-kernel profile), and
  jax-js and TensorFlow.js (WebGPU backends, benchmarks/peers.js: the same SeedNet) on the same
  adapter (``npm ci --prefix benchmarks`` installs them; the part says so when they are absent);
  GEMM n x n (``--browser-gemm-n``) in each.
- native: the engine through wgpu-py (GPU ms/step by timestamp queries where the adapter has
  them, wall ms/step, host ms/step, peak GPU memory against params + optimizer state +
  activations kept + gradients, the GEMM at ``--gemm-n``) beside PyTorch on CUDA when present.
- cpu: the numpy engine (float32) and PyTorch on the CPU, on the same cores.
Ratios are computed pair by pair (slower / faster time of the same work); the JSON holds the
date, adapters, versions and the machine's load average.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

MB = 1 << 20
VARIANTS = ("gemm_untiled", "conv_fct8", "wgrad_1", "elementwise_1", "conv_row_loads",
            "conv_wide_8")


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


async def _native(args, dev) -> dict:
    import native
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
                     f" {g['tflops']:.4g} | " + (f"{tg['tflops']:.4g} ({tg['library']})" if tg
                                                 else "-") + " |")
    return "\n".join(lines)


def profile_table(r: dict, top: int) -> str:
    rows = sorted(r["profile"], key=lambda x: -x[3])[:top]
    total = sum(x[3] for x in r["profile"])
    out = [f"batch {r['batch']}: {len(r['profile'])} dispatches, sum {total:.3f} ms GPU"]
    out += [f"{ms * 1000:9.1f} us  {phase:9s} {key[:60]:60s} {grid}"
            for phase, key, grid, ms in rows]
    return "\n".join(out)


PARTS = ("browser", "native", "cpu")
PEERS = ("jax-js", "tfjs")


def _browser(args) -> dict:
    """Our engine, jax-js and TF.js in one headless Chromium (benchmarks/browser.py)."""
    import browser
    from playwright.sync_api import sync_playwright
    out = {"engine": [], "peers": [], "errors": [], "versions": _npm_versions()}
    with browser.Server() as server, browser.StaticServer() as static, \
            sync_playwright() as p:
        br = browser.launch(p, args.chromium)
        out["chromium"] = br.version
        try:
            for rep in range(args.repeats):
                _browser_round(args, br, server, static, out, rep)
        finally:
            br.close()
    return out


def _browser_round(args, br, server, static, out: dict, rep: int) -> None:
    """One round of the browser part: the engine at every batch, then each peer's."""
    import browser
    for batch in args.batch:
        big = batch >= 512
        r = browser.engine(br, server.url, batch, args.browser_steps if not big
                           else max(1, args.browser_steps // 2), 1,
                           profile=bool(args.profile) and not big and rep == 0,
                           gemm=args.browser_gemm_n if batch == args.batch[0] else 0)
        r["repeat"] = rep
        out["engine"].append(r)
        print(f"  browser engine batch {batch}: {r['wall_ms']:.0f} ms/step, host "
              f"{r['host_ms']:.2f} ms", flush=True)
    if not out["versions"]:
        return
    for lib in args.peers:
        for batch in args.batch:
            steps = args.browser_steps if batch < 512 else 1
            try:
                r = browser.peer(br, static.url, lib, "seednet", batch, steps, 1)
            except Exception as exc:
                out["errors"].append(str(exc)[:300])
                print(f"  {lib} batch {batch}: FAILED {exc}", flush=True)
                continue
            r["repeat"] = rep
            out["peers"].append(r)
            print(f"  browser {lib} batch {batch}: {r['ms']:.0f} ms/step", flush=True)
        if args.browser_gemm_n:
            r = browser.peer(br, static.url, lib, "gemm", args.browser_gemm_n, 3, 0)
            r["repeat"] = rep
            out["peers"].append(r)
            print(f"  browser {lib} gemm {r['batch']}: {r['gflops']:.2f} GFLOP/s",
                  flush=True)


def _npm_versions() -> dict:
    mods = HERE / "node_modules"
    out = {}
    for lib, pkg in (("jax-js", "@jax-js/jax"), ("tfjs", "@tensorflow/tfjs"),
                     ("tfjs-backend-webgpu", "@tensorflow/tfjs-backend-webgpu")):
        f = mods / pkg / "package.json"
        if f.is_file():
            out[lib] = json.loads(f.read_text())["version"]
    if not out:
        print("  peers: benchmarks/node_modules missing (npm ci --prefix benchmarks): jax-js "
              "and TF.js not measured", flush=True)
    return out


def _cpu(args) -> dict:
    """The numpy engine and PyTorch CPU, each at its fastest of 1 and 2 threads."""
    import cpu
    out = {"numpy": [], "torch": []}
    for batch in args.batch:
        r = cpu.best_of_threads(batch, args.cpu_steps if batch < 512 else 2)
        out["numpy"].append(r)
        print(f"  numpy engine batch {batch}: {r['ms']:.1f} ms/step ({r['threads']} BLAS "
              f"threads; {r['by_threads']})", flush=True)
    try:
        for batch in args.batch:
            r = cpu.torch_best_of_threads(batch, args.cpu_steps if batch < 512 else 3)
            out["torch"].append(r)
            print(f"  torch cpu batch {batch}: {r['ms']:.1f} ms/step ({r['threads']} threads; "
                  f"{r['by_threads']})", flush=True)
    except ImportError as exc:
        out["torch_error"] = f"not installed ({exc})"
        print("  torch: not installed", flush=True)
    return out


def _ratio(a, b) -> str:
    """'a/b' as 'N.NNx' (b faster when > 1), '-' when either is missing."""
    return f"{a / b:.2f}x" if a and b else "-"


def summary(res: dict) -> str:
    """The SeedNet and GEMM table over every part measured, and the ratios pair by pair."""
    br, cp, nat = res.get("browser") or {}, res.get("cpu") or {}, res.get("native")
    batches = res["batches"]
    rows = {}  # name -> {batch: ms}

    def put(name, batch, ms):
        rows.setdefault(name, {})[batch] = ms
    for r in br.get("engine", []):
        put("engine, browser (Chromium WebGPU)", r["batch"], r["wall_ms"])
    for r in br.get("peers", []):
        if r["what"] == "seednet":
            put({"jax-js": "jax-js, browser (webgpu, jit)",
                 "tfjs": "TensorFlow.js, browser (webgpu)"}[r["lib"]], r["batch"], r["ms"])
    if nat:
        for r in nat["seednet"]:
            put("engine, native (wgpu-py)", r["batch"], r["wall_ms"])
    for r in cp.get("numpy", []):
        put("engine, numpy (CPU, best of 1/2 threads)", r["batch"], r["ms"])
    for r in cp.get("torch", []):
        put("PyTorch CPU (eager, best of 1/2 threads)", r["batch"], r["ms"])
    for r in (res.get("torch") or {}).get("seednet", []):
        put(f"PyTorch {r['device'].upper()}", r["batch"], r["ms"])
    lines = ["| SeedNet training step, ms | " + " | ".join(f"batch {b}" for b in batches) +
             " |", "|---|" + "---:|" * len(batches)]
    for name, v in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{v[b]:,.1f}" if b in v else "-"
                                                  for b in batches) + " |")
    pairs = [("engine, browser (Chromium WebGPU)", "jax-js, browser (webgpu, jit)"),
             ("engine, browser (Chromium WebGPU)", "TensorFlow.js, browser (webgpu)"),
             ("engine, numpy (CPU, best of 1/2 threads)",
              "PyTorch CPU (eager, best of 1/2 threads)")]
    pairs += [("engine, native (wgpu-py)", n) for n in rows if n.startswith("PyTorch C")
              and not n.startswith("PyTorch CPU")]
    lines += ["", "| ratio (time of the second / time of the first; > 1: first is faster) | " +
              " | ".join(f"batch {b}" for b in batches) + " |", "|---|" + "---:|" * len(batches)]
    for a, b in pairs:
        if a in rows and b in rows:
            lines.append(f"| {a} vs {b} | " + " | ".join(
                _ratio(rows[b].get(x), rows[a].get(x)) for x in batches) + " |")
    lines += _rounds(br, batches)
    g = [("engine, browser", (br.get("engine") or [{}])[0].get("gemm"))]
    g += [(r["lib"] + ", browser", r) for r in br.get("peers", []) if r["what"] == "gemm"]
    g = [(name, r) for name, r in g if r]
    if g:
        lines += ["", "| GEMM f32 | n | ms | GFLOP/s |", "|---|---:|---:|---:|"]
        lines += [f"| {name} | {r.get('n') or r.get('batch')} | {r['ms']:,.1f} | "
                  f"{r['gflops']:.2f} |" for name, r in g]
    hosts = [(r["batch"], r["host_ms"]) for r in br.get("engine", [])]
    if hosts:
        lines += ["", "host time per step in the browser (Pyodide: Python + bridge calls, GPU "
                  "idle), ms: " + ", ".join(f"batch {b}: {h:.2f}" for b, h in hosts)]
    return "\n".join(lines)


def _rounds(br: dict, batches) -> list:
    """With ``--repeats``: each round's ratio of a peer's step time to the engine's (the rows
    above hold the last round's times)."""
    eng = {(r.get("repeat", 0), r["batch"]): r["wall_ms"] for r in br.get("engine", [])}
    if len({k[0] for k in eng}) < 2:
        return []
    lines = ["", "| round: peer's ms / engine's ms | " + " | ".join(f"batch {b}" for b in batches)
             + " |", "|---|" + "---:|" * len(batches)]
    for lib in sorted({r["lib"] for r in br.get("peers", []) if r["what"] == "seednet"}):
        ms = {(r.get("repeat", 0), r["batch"]): r["ms"] for r in br["peers"]
              if r["lib"] == lib and r["what"] == "seednet"}
        for rep in sorted({k[0] for k in eng}):
            lines.append(f"| {lib}, round {rep + 1} | " + " | ".join(
                _ratio(ms.get((rep, b)), eng.get((rep, b))) for b in batches) + " |")
    return lines


def browser_profile(r: dict, top: int) -> str:
    """The slowest dispatches of one step in the browser, and the sum by kernel."""
    prof = r.get("profile") or []
    total = sum(x[3] for x in prof)
    by = {}
    for phase, key, _grid, ms in prof:
        k = f"{phase} {key.split(':KH')[0].rstrip(':')}"
        by[k] = by.get(k, 0.0) + ms
    out = [f"browser, batch {r['batch']}: {len(prof)} dispatches, each timed alone "
           f"(submit + wait), sum {total:.0f} ms; by kernel:"]
    out += [f"{ms:9.1f} ms {100 * ms / total:5.1f}%  {k}" for k, ms in
            sorted(by.items(), key=lambda kv: -kv[1])[:top]]
    return "\n".join(out)


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The benchmark's options (also ``webgpu-trainer bench``'s)."""
    p.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS),
                   help="parts to run (default: all)")
    p.add_argument("--batch", type=int, nargs="+", default=[64, 1000])
    p.add_argument("--steps", type=int, default=None, help="native: timed steps at batch >= "
                   "512, 4x that below (default 50 on a GPU, 2 on a CPU adapter)")
    p.add_argument("--warmup", type=int, default=None, help="native warm-up steps (default 10; "
                   "1 on a CPU adapter)")
    p.add_argument("--gpu-reps", type=int, default=50,
                   help="native: steps timed by timestamp queries for the GPU ms/step")
    p.add_argument("--gemm-n", type=int, default=None,
                   help="native GEMM size (default 4096 on a GPU, 512 on a CPU adapter)")
    p.add_argument("--both-gemms", action="store_true", help="native: also the untiled GEMM")
    p.add_argument("--no-torch", action="store_true", help="native: no PyTorch beside it")
    p.add_argument("--variant", nargs="*", default=[],
                   help="native: also time SeedNet with: " + ", ".join(VARIANTS))
    p.add_argument("--browser-steps", type=int, default=3,
                   help="browser: timed steps at batch < 512 (half at larger batches; peers 1)")
    p.add_argument("--browser-gemm-n", type=int, default=1024, help="browser GEMM size")
    p.add_argument("--peers", nargs="*", choices=PEERS, default=list(PEERS),
                   help="browser: the peer libraries beside the engine (none: engine only)")
    p.add_argument("--repeats", type=int, default=1,
                   help="browser: run the engine and the peers this many times in turn")
    p.add_argument("--cpu-steps", type=int, default=10,
                   help="cpu: timed steps at batch < 512 (2-3 at larger batches)")
    p.add_argument("--chromium", default=os.environ.get("WEBGPU_TRAINER_CHROMIUM",
                                                        "/usr/bin/chromium"))
    p.add_argument("--profile", type=int, default=15,
                   help="print the N slowest kernels (browser, batch 64) and dispatches (native)")
    p.add_argument("--label", default="", help="recorded in the JSON")
    p.add_argument("--engine", type=Path, default=REPO / "py",
                   help="folder holding the webgpu_trainer package (default: this checkout's)")
    p.add_argument("--json", type=Path, default=None)
    return p


def run(args) -> int:
    """Run the parts in ``args.only``, print the tables, write the JSON."""
    sys.path.insert(0, str(args.engine.resolve()))
    res = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "label": args.label, "batches": args.batch, "load_before": os.getloadavg(),
           "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine()}
    failed = False
    if "browser" in args.only:
        try:
            res["browser"] = _browser(args)
        except Exception as exc:  # keep going: the other parts are still worth printing
            print(f"browser: FAILED: {type(exc).__name__}: {exc}", flush=True)
            failed = True
    if "native" in args.only:
        try:
            import gpu_timer
            dev = gpu_timer.open_device()
            cpu_adapter = getattr(dev, "is_cpu", False)
            args.steps = args.steps or (2 if cpu_adapter else 50)
            args.warmup = args.warmup if args.warmup is not None else (1 if cpu_adapter else 10)
            args.gemm_n = args.gemm_n or (512 if cpu_adapter else 4096)
            if cpu_adapter:
                args.gpu_reps = min(args.gpu_reps, 2)
            res["native"] = asyncio.run(_native(args, dev))
            if not args.no_torch and not cpu_adapter:
                res["torch"] = _torch(args)
            res["versions"] = _versions(None)
        except Exception as exc:
            print(f"native: FAILED: {type(exc).__name__}: {exc}", flush=True)
            failed = True
    if "cpu" in args.only:
        res["cpu"] = _cpu(args)
    res["load_after"] = os.getloadavg()
    res["engine"] = str(args.engine.resolve())
    print(f"\nmachine: {res['machine']}, {res['cpus']} CPUs, load average "
          f"{res['load_before'][0]:.1f} before / {res['load_after'][0]:.1f} after")
    ad = (res.get("browser") or {}).get("engine") or []
    if ad:
        print(f"browser: Chromium {res['browser'].get('chromium')}, adapter "
              f"{ad[0].get('adapter')}; peers {res['browser'].get('versions')}")
    print()
    print(summary(res))
    if res.get("native"):
        print()
        print(table(res))
    if args.profile:
        for r in ad:
            if r.get("profile"):
                print()
                print(browser_profile(r, args.profile))
        for r in (res.get("native") or {}).get("seednet", []):
            if r.get("profile"):
                print()
                print(profile_table(r, args.profile))
    path = args.json or HERE / "results" / f"{res['date'][:19].replace(':', '')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=1))
    print(f"\nwrote {path}")
    return 1 if failed else 0


def main(argv=None) -> int:
    return run(add_arguments(argparse.ArgumentParser(
        prog="run.py", description=__doc__.splitlines()[0])).parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

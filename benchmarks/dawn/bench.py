#!/usr/bin/env python3
"""The browser path against native, side by side (issue 20 item 3): ms per training step of
each model at each batch through the page's worker in Node on Dawn (run.mjs: Pyodide + Tint)
and natively (wgpu-py), both timed by the same code (worker/bench.py's ``bench``: warm-up
steps, then ``steps`` back to back ended by one queue wait, the mean), each cell ``repeats``
times (the spread: min / median / max); then the peers on the same Dawn (peers.mjs).

    python benchmarks/dawn/bench.py --site .dawnpay/site --json out.json [--plan small]

Models (pack.sh's site): the zoo (benchmarks/zoo.py's files) on ``random`` (1x28x28) or
``random-rgb32`` (3x32x32), random bytes from site.py (speed does not depend on the pixels);
every run initialises its weights (init "scratch"). ``--plan h200``: SeedNet and ResNet-8 with
the peers; ``--plan zoo``: all of them.
Runs where wgpu-py and a Node with npm ``webgpu`` exist (benchmarks/dawn/device.sh on the H200).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import dawn_harness as harness  # noqa: E402  (not tests/harness.py)

# model -> (dataset, [(batch, warmup, steps, repeats)])
PLAN = {"seednet": ("random", [(64, 300, 300, 5), (1000, 40, 60, 3)]),
        "resnet8": ("random-rgb32", [(64, 100, 100, 5), (1000, 10, 20, 3)])}
# every zoo model at batch 64 and 1000 (ResNet-18: 64 and 256), on zoo.py's sample shapes
# (issue 20 item 3: within 10% of native at the larger batch)
ZOO = {m: (d, [(64, 60, 100, 3), (1000, 10, 30, 3)]) for m, d in (
    ("seednet", "random"), ("mlp", "random"), ("encoder", "random"),
    ("resnet8", "random-rgb32"), ("vit", "random-rgb32"), ("mobilenetv2", "random-rgb32"),
    ("lstm", "random"))}
ZOO["resnet18"] = ("random-rgb32", [(64, 20, 40, 3), (256, 5, 15, 3)])
QUICK = {"seednet": ("random", [(8, 1, 2, 1)])}
# a CPU adapter (SwiftShader through Dawn; natively lavapipe, another adapter): SeedNet batch 64
SMALL = {"seednet": ("random", [(64, 1, 2, 2)])}
SMALL_PEERS = [["jax-js", "seednet", 64, 3, 1], ["tfjs", "seednet", 64, 3, 1]]
HOST_STEPS = {"h200": 5, "zoo": 3, "small": 1, "quick": 1}  # bench's `host`: steps timed alone
PEERS = [["jax-js", "seednet", 64, 50, 10], ["jax-js", "seednet", 1000, 10, 3],
         ["tfjs", "seednet", 64, 30, 5], ["tfjs", "seednet", 1000, 5, 2],
         ["jax-js", "gemm", 4096, 5], ["tfjs", "gemm", 4096, 5]]


def cfg(dataset: str, batch: int) -> dict:
    return {"dataset": dataset, "batch_size": batch, "seed": 0, "val_images": 0,
            "eval_images": batch}


def spread(runs: list) -> dict:
    s = sorted(runs)
    return {"ms": s[len(s) // 2], "min": s[0], "max": s[-1], "runs": runs}


def dawn(site: Path, plan: dict, node: str | None, host: int = 5,
         timeout: float = 400, profile: bool = False, in_flight: int | None = None) -> dict:
    """{model: {batch: {...}}} through the worker in Node (one process per model); with
    ``profile`` each cell's last run also times every dispatch (``GpuEngine.profile``);
    ``in_flight``: the engine's ``IN_FLIGHT`` (None: its default)."""
    out = {}
    for model, (dataset, cells) in plan.items():
        jobs = [{"type": "bench", "model": model, "config": cfg(dataset, b), "warmup": w,
                 "steps": s, "host": host, "profile": profile and i == r - 1,
                 "in_flight": in_flight}
                for b, w, s, r in cells for i in range(r)]
        res = harness.node_jobs(site, jobs, node=node, timeout=timeout)
        out["adapter"], out["boot_s"] = res["adapter"], res["boot_s"]
        out[model] = {}
        for b, _, _, _ in cells:
            rows = [r for r in res["results"] if r["job"]["config"]["batch_size"] == b]
            out[model][b] = {**spread([r["wall_ms"] for r in rows]),
                             "host_ms": [r["host_ms"] for r in rows]}
            profiled = [r["profile"] for r in rows if r.get("profile")]
            if profiled:
                out[model][b]["profile"] = profiled[-1]
        print(f"[dawn] {model}: {json.dumps(out[model])[:400]}", flush=True)
    return out


def native(site: Path, plan: dict, host: int = 5, profile: bool = False) -> dict:
    """The same cells natively (wgpu-py), timed by worker/bench.py's ``bench`` (with
    ``profile``: each cell's last run also times every dispatch)."""
    from webgpu_trainer.engine import config as run_config
    from webgpu_trainer.engine.backends.wgpu_native import Device
    from webgpu_trainer.engine.train.gpu_engine import GpuEngine
    from webgpu_trainer.engine.train.loop import Trainer
    from webgpu_trainer.worker import bench
    dev = Device()
    out = {"adapter": dev.info}
    for model, (dataset, cells) in plan.items():
        graph, weights = harness.site_bundle(site, model)
        train, test = harness.site_splits(site, dataset)
        out[model] = {}
        for b, w, s, r in cells:
            walls, hosts, prof = [], [], None
            for i in range(r):
                c = run_config.parse(cfg(dataset, b), train_images=train.count)
                tr = Trainer(GpuEngine(dev), graph, weights, c, train, test)

                async def go(tr=tr, w=w, s=s, last=profile and i == r - 1):
                    await tr.setup()
                    return await bench.bench(tr, dev, {"warmup": w, "steps": s, "host": host,
                                                       "profile": last})
                res = asyncio.run(go())
                walls.append(res["wall_ms"])
                hosts.append(res["host_ms"])
                prof = res.get("profile", prof)
            out[model][b] = {**spread(walls), "host_ms": hosts}
            if prof:
                out[model][b]["profile"] = prof
        print(f"[native] {model}: {json.dumps(out[model])[:400]}", flush=True)
    return out


def kernel_diff(out: dict, top: int = 8) -> list:
    """Lines comparing the profiled cells: per kernel (shader:entry) the summed ms through
    Dawn and natively, the largest differences (either way) first."""
    lines = []
    dawn_side = out.get("dawn") or {}
    for model, cells in (out.get("native") or {}).items():
        if model in ("adapter", "boot_s") or not isinstance(cells, dict):
            continue
        for b, cell in cells.items():
            other = (dawn_side.get(model) or {}).get(b) if isinstance(dawn_side, dict) else None
            if not isinstance(cell, dict) or not isinstance(other, dict) or \
                    "profile" not in cell or "profile" not in other:
                continue
            sums = {}
            for side, rows in (("dawn", other["profile"]), ("native", cell["profile"])):
                for _, key, _, ms in rows:
                    k = ":".join(str(key).split(":")[:2])
                    sums.setdefault(k, {"dawn": 0.0, "native": 0.0})[side] += ms
            tot = {side: sum(v[side] for v in sums.values()) for side in ("dawn", "native")}
            lines.append(f"{model} {b}: summed dawn {tot['dawn']:.3f} native "
                         f"{tot['native']:.3f} ms")
            for k, v in sorted(sums.items(), key=lambda kv: abs(kv[1]["native"] - kv[1]["dawn"]),
                               reverse=True)[:top]:
                lines.append(f"  {k:40s} dawn {v['dawn']:8.4f}  native {v['native']:8.4f}")
    return lines


def peers(node: str | None, jobs: list, timeout: float = 300) -> dict:
    cmd = [node or os.environ.get("NODE", "node"), str(HERE / "peers.mjs"), "--jobs",
           json.dumps(jobs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": proc.stderr[-2000:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plan", choices=("h200", "zoo", "small", "quick"), default="h200",
                    help="the cells: h200 (PLAN, PEERS), zoo (ZOO, PEERS), small (a CPU adapter:"
                         " SeedNet batch 64), quick (one batch-8 cell: a wiring check)")
    ap.add_argument("--models", nargs="+", help="only these models of the plan")
    ap.add_argument("--profile", action="store_true",
                    help="also every dispatch's time, both ways (each cell's last run)")
    ap.add_argument("--parts", default="dawn,native,peers")
    ap.add_argument("--in-flight", type=int, metavar="N",
                    help="the browser path's steps in flight (GpuEngine.IN_FLIGHT; default: "
                         "the engine's)")
    ap.add_argument("--node")
    ap.add_argument("--timeout", type=float, default=400, help="seconds per Node process")
    a = ap.parse_args(argv)
    if a.in_flight is not None and a.in_flight < 1:
        ap.error(f"--in-flight {a.in_flight}: at least 1")
    plan = {"h200": PLAN, "zoo": ZOO, "small": SMALL, "quick": QUICK}[a.plan]
    if a.models:
        unknown = sorted(set(a.models) - set(plan))
        if unknown:
            ap.error(f"--models {unknown}: not in plan {a.plan} ({sorted(plan)})")
        plan = {m: c for m, c in plan.items() if m in a.models}
    peer_jobs = {"h200": PEERS, "zoo": PEERS, "small": SMALL_PEERS,
                 "quick": [["jax-js", "seednet", 8, 2, 1]]}[a.plan]
    parts = a.parts.split(",")
    if set(parts) - {"dawn", "native", "peers"}:
        ap.error(f"--parts {a.parts!r}: each of dawn, native, peers")
    t0 = time.time()
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "what": "ms per training step (Adam), the page's worker in Node on Dawn vs native "
                   "wgpu-py, both timed by worker/bench.py; random-byte data",
           "plan": a.plan, "cells": plan, "python": platform.python_version(),
           "load": os.getloadavg(), "in_flight": a.in_flight}
    try:
        import wgpu
        out["wgpu-py"] = wgpu.__version__
    except ImportError:
        pass
    if "dawn" in parts:
        out["dawn"] = dawn(a.site, plan, a.node, HOST_STEPS[a.plan], a.timeout, a.profile,
                           a.in_flight)
    if "native" in parts:
        out["native"] = native(a.site, plan, HOST_STEPS[a.plan], a.profile)
    if "peers" in parts:
        out["peers"] = peers(a.node, peer_jobs, a.timeout)
        print(f"[peers] {json.dumps(out['peers'])[:1500]}", flush=True)
    for line in kernel_diff(out):
        print(line, flush=True)
    out["seconds"] = time.time() - t0
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

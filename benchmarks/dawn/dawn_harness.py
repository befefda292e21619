"""Python side of the Dawn-in-Node harness (benchmarks/dawn/): run the page's worker in Node
(``run.mjs``) and the same training natively, from one site folder (``site.py``).

- ``node_jobs(site, jobs)``: the worker's answers to ``jobs`` (run.mjs's JSON);
- ``site_bundle(site, model)`` / ``site_splits(site, dataset)``: the model and the dataset
  exactly as the worker gets them (the server's bytes), for a native run to use the same;
- ``native_losses(dev, site, model, cfg)``: the per-step training losses of a native run
  (``dev``: a wgpu-py device, or ``cli.devices.CpuDevice()``: the float64 numpy engine).

Environment: ``NODE`` (default ``node``), ``VK_ICD_FILENAMES`` passed through (Chromium's
SwiftShader on a machine without a GPU: ``swiftshader_icd()``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SWIFTSHADER_ICDS = ("/usr/lib/chromium/vk_swiftshader_icd.json",)


def swiftshader_icd() -> str | None:
    """Chromium's SwiftShader Vulkan ICD (Debian's chromium package, or Playwright's
    Chromium under ~/.cache/ms-playwright), or None."""
    for p in SWIFTSHADER_ICDS:
        if Path(p).is_file():
            return p
    found = sorted(Path.home().glob(".cache/ms-playwright/chromium-*/chrome-linux/"
                                    "vk_swiftshader_icd.json"))
    return str(found[-1]) if found else None


def node_jobs(site: Path, jobs: list, *, flags=(), env: dict | None = None, timeout=600,
              node: str | None = None, extra: list = ()) -> dict:
    """Run ``run.mjs`` on ``site`` with ``jobs``; its JSON (``{adapter, boot_s, results}``).
    RuntimeError with the worker's error or Node's stderr tail when it fails."""
    cmd = [node or os.environ.get("NODE", "node"), str(HERE / "run.mjs"), "--site", str(site),
           "--jobs", json.dumps(jobs), *extra]
    for f in flags:
        cmd += ["--flags", f]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=REPO)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    out = json.loads(lines[-1]) if lines else {"error": f"no JSON from {cmd[:2]}"}
    if proc.returncode or "error" in out:
        raise RuntimeError(f"Dawn harness failed (exit {proc.returncode}): "
                           f"{out.get('error', '')[:2000]}\n{proc.stderr[-3000:]}")
    return out


def site_bundle(site: Path, model: str) -> tuple[dict, bytes]:
    """``(graph, weights)`` of ``model`` as the site serves them."""
    base = Path(site) / "api" / "models" / model
    return json.loads((base / "graph.json").read_text()), (base / "weights.bin").read_bytes()


def site_splits(site: Path, dataset: str) -> tuple:
    """``(train, test)`` Splits of ``dataset`` as the site serves it (its manifest's spec)."""
    from webgpu_trainer.engine.train.data import DataSpec, Split
    base = Path(site) / "data" / dataset
    manifest = json.loads((base / "manifest.json").read_text())
    spec = DataSpec.from_manifest(manifest)
    out = []
    for name in ("train", "test"):
        ent = manifest["splits"][name]
        images = (base / ent["images"]["file"]).read_bytes()
        labels = (base / ent["labels"]["file"]).read_bytes()
        out.append(Split(images, labels, ent["count"], labels, spec))
    return tuple(out)


def native_losses(dev, site: Path, model: str, cfg: dict) -> list[float]:
    """The training losses (one per step, in order) of ``model`` trained natively on ``dev``
    with the run config ``cfg`` (its ``dataset`` read from ``site``)."""
    from webgpu_trainer.cli import devices
    from webgpu_trainer.engine import config as run_config
    graph, weights = site_bundle(site, model)
    train, test = site_splits(site, cfg["dataset"])
    rows = []

    def emit(kind, **kw):
        if kind == "progress":
            rows.extend(kw["losses"])
    parsed = run_config.parse(cfg, train_images=train.count)
    tr = devices.make_trainer(dev, graph, weights, parsed, train, test, emit)

    async def go():
        await tr.setup()
        await tr.run()
    asyncio.run(go())
    return [float(r[1]) for r in rows]

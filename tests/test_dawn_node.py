"""The browser path without a browser (benchmarks/dawn/, issue 20): the page's own worker
(web/lib/worker.js + py/webgpu_trainer/worker/ from the engine wheel) in Node.js on Dawn (npm
``webgpu``) over Chromium's SwiftShader, trained 2 steps of SeedNet at batch 8; its losses
against native wgpu-py on the same model and bytes, and against the float64 numpy engine.

Tolerance: 1e-4 relative per step, as the engines' agreement elsewhere
(``torch_models.check_engines_agree``): float32 on three implementations (Tint + SwiftShader,
wgpu-py's native adapter, float64 numpy), reduction orders the same kernels fix.
Node (Debian's nodejs, as the CI machine has for ESLint) and ``npm ci --prefix benchmarks``
are required; a missing one fails the test."""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import rel_err

REPO = Path(__file__).resolve().parents[1]
# benchmarks/dawn/dawn_harness.py, loaded by path: not a package, and a folder on sys.path
# would shadow modules of other tests (tests/harness.py)
_spec = importlib.util.spec_from_file_location(
    "dawn_harness", REPO / "benchmarks" / "dawn" / "dawn_harness.py")
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)

CFG = {"dataset": "random", "batch_size": 8, "max_steps": 2, "epochs": 1, "seed": 0,
       "eval_images": 8, "val_images": 0}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site folder: SeedNet and a 256-image random 1x28x28 dataset, through the server."""
    node = shutil.which("node")
    assert node, "Node.js is required (apt-get install nodejs)"
    dawn = REPO / "benchmarks" / "node_modules" / "webgpu" / "index.js"
    if not dawn.is_file():
        subprocess.run(["npm", "ci", "--prefix", str(REPO / "benchmarks"), "--no-audit",
                        "--no-fund"], check=True, capture_output=True, timeout=300)
    out = tmp_path_factory.mktemp("dawn-site")
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "dawn" / "site.py"), str(out),
                    "--random", "256"], check=True, capture_output=True, timeout=120)
    return out


def test_worker_on_dawn_swiftshader_matches_native(site, device):
    icd = harness.swiftshader_icd()
    assert icd, "Chromium's vk_swiftshader_icd.json not found (apt-get install chromium)"
    out = harness.node_jobs(site, [{"type": "start", "model": "seednet", "config": CFG}],
                            env={"VK_ICD_FILENAMES": icd}, timeout=240,
                            extra=["--no-selfcheck"])
    assert out["adapter"]["architecture"] == "swiftshader", out["adapter"]
    dawn = [loss for _, loss, _ in out["results"][0]["losses"]]
    native = harness.native_losses(device, site, "seednet", CFG)
    from webgpu_trainer.cli import devices
    numpy64 = harness.native_losses(devices.CpuDevice(), site, "seednet", CFG)
    assert len(dawn) == len(native) == len(numpy64) == 2
    assert all(np.isfinite(dawn)) and 1.0 < dawn[0] < 5.0, dawn  # ~ln 10 from scratch
    for step in range(2):
        assert rel_err(dawn[step], native[step]) <= 1e-4, (step, dawn, native)
        assert rel_err(dawn[step], numpy64[step]) <= 1e-4, (step, dawn, numpy64)
    assert dawn[0] != dawn[1]  # the second step trained on updated weights


def test_site_refuses_an_unknown_model(tmp_path):
    """site.py names the route's refusal (exit 2), writes no half site."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "dawn" / "site.py"),
                           str(tmp_path / "s"), "--model", "nosuch=" + str(tmp_path / "x.onnx"),
                           "--random", "64"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "x.onnx" in proc.stderr


HOSTILE_FETCH = r"""
import { siteFetch } from "./benchmarks/dawn/dawn.mjs";
const site = process.argv[1], out = {};
for (const url of ["/data/random/manifest.json", "/../../etc/passwd", "/a%2F..%2F..%2Fetc%2Fpasswd",
                   "/data/random/%2e%2e/%2e%2e/%2e%2e/etc/passwd", "/api/models/nosuch/graph.json",
                   "/data/random", "/%E0%A4%A"]) {
  const r = await siteFetch(site, "/pyo/", url);
  out[url] = r.status;
}
out.wheel = (await (await siteFetch(site, "/pyo/", "/api/wheel")).json()).pyodide;
out.other = await siteFetch(site, "/pyo/", "http://example.com/x").then(() => "fetched",
                                                                      (e) => e.message);
console.log(JSON.stringify(out));
"""


def test_fetch_stub_serves_only_the_site(site):
    """Hostile URLs: a path escaping the site (plain, %2F-encoded, %2e-encoded) is 404, so is
    a folder, a missing file and a broken %-escape (decodeURIComponent's URIError); another
    origin is refused; /api/wheel names the local Pyodide."""
    proc = subprocess.run(["node", "--input-type=module", "-e", HOSTILE_FETCH, str(site)],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out.pop("/data/random/manifest.json") == 200
    assert out.pop("wheel") == "/pyo/"
    assert "serves only the site folder" in out.pop("other")
    assert set(out.values()) == {404}, out

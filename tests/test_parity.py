"""Browser parity: the case lists of tests/cases (every op family, the plan, the optimizers) run
in Pyodide on the browser's WebGPU (web/parity.html, SwiftShader here) and natively (wgpu-py,
lavapipe here) through the same ``engine/parity.run_case``, and must agree within PARITY_RTOL,
relative to the largest value of each compared array (conftest.rel_err): per-step losses, the
model output, the flat gradient buffer (single-step cases) and the weights after the last step
(running statistics, optimizer updates). Each family runs the cases ``cases.browser_cases``
picks (all, or the documented subset of its module). Every WGSL file must compile in Chromium.
"""

import asyncio
import base64
import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from cases import FAMILIES, browser_cases
from conftest import rel_err

pytestmark = pytest.mark.e2e

PARITY_RTOL = 1e-5
REPORT = []


def _f32(text):
    return np.frombuffer(base64.b64decode(text), "<f4")


@pytest.fixture(scope="module")
def parity_page(chromium, server):
    ctx = chromium.new_context()
    page = ctx.new_page()
    console = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text[:300]}"))
    page.goto(server + "/dev/parity.html")
    page.wait_for_function("window.parityState && (window.parityState.ready || "
                           "window.parityState.error)", timeout=180_000)
    err = page.evaluate("window.parityState.error")
    if err:
        pytest.fail(f"parity page failed to boot: {err}\n" + "\n".join(console[-20:]))
    yield page
    ctx.close()


@pytest.mark.parametrize("family", FAMILIES)
def test_browser_matches_native(parity_page, device, family):
    from webgpu_trainer.engine.tools import parity
    cases = [c.parity() for c in browser_cases(family)]
    assert cases, f"{family}: no browser cases"
    # Playwright's sync API runs an event loop in this thread: run the native engine in another.
    with ThreadPoolExecutor(1) as pool:
        native = pool.submit(asyncio.run, parity.run_cases(device, cases)).result()
    start = time.perf_counter()
    browser = json.loads(parity_page.evaluate("c => window.runParity(c)", json.dumps(cases)))
    seconds = time.perf_counter() - start
    assert [r["name"] for r in browser] == [c["name"] for c in cases]
    failures, worst = [], {}
    for want, got in zip(native, browser):
        name = want["name"]
        assert "error" not in want, f"{name}: native run failed: {want.get('error')}"
        if "error" in got:
            failures.append(f"{name}: browser run failed: {got['error']}")
            continue
        errs = {"losses": rel_err(got["losses"], want["losses"])}
        # Gradients after several optimizer steps are gradients at slightly different weights
        # (the weights are compared): gradients are compared on single-step cases.
        keys = ("output", "grads", "weights") if len(want["losses"]) <= 1 else ("output", "weights")
        for key in keys:
            errs[key] = rel_err(_f32(got[key]), _f32(want[key]))
        for k, v in errs.items():
            worst[k] = max(worst.get(k, 0.0), v)
        if max(errs.values()) > PARITY_RTOL:
            failures.append(f"{name}: browser vs native relative error {errs}")
        assert all(np.isfinite(want["losses"])), f"{name}: native losses {want['losses']}"
    REPORT.append(f"{family:12s} {len(cases):3d} cases {seconds:5.1f} s  " +
                  "  ".join(f"{k} {v:.1e}" for k, v in worst.items()))
    assert not failures, "\n".join(failures)


def test_init_is_bit_identical(parity_page, device):
    """The same seed gives the same initial weights, byte for byte, in the browser (Pyodide,
    SwiftShader), natively (wgpu-py, lavapipe) and on the numpy engine: SeedNet (Conv, Gemm,
    BatchNorm) and a MatMul + Add + LayerNormalization model (engine/init.py, Philox)."""
    import test_loop
    from webgpu_trainer.cpu.cpu_engine import CpuEngine
    from webgpu_trainer.engine.tools import parity
    from webgpu_trainer.engine.tools.parity import b64
    cases, blobs = [], {}
    for model in ("seednet", "linear_layernorm"):
        graph, blob = test_loop.MODELS[model]()
        x = np.zeros([2] + graph["inputs"][0]["shape"][1:], np.float32)
        cases.append({"name": model, "graph": graph, "weights": b64(blob), "x": b64(x.tobytes()),
                      "labels": b64(bytes(8)), "batch": 2, "steps": 1, "optimizer": None,
                      "train": False, "seed": 0, "init_seed": 2024})  # eval: P untouched
        blobs[model] = (graph, blob)
    with ThreadPoolExecutor(1) as pool:  # Playwright's event loop owns this thread
        native = pool.submit(asyncio.run, parity.run_cases(device, cases)).result()
        for model, (graph, blob) in blobs.items():
            blobs[model] = pool.submit(asyncio.run, test_loop._initial_weights(
                CpuEngine(), graph, blob, 2024)).result()
    browser = json.loads(parity_page.evaluate("c => window.runParity(c)", json.dumps(cases)))
    for want, got in zip(native, browser):
        name = want["name"]
        assert "error" not in got and "error" not in want, (got.get("error"), want.get("error"))
        n = len(blobs[name])
        assert base64.b64decode(got["weights"])[:n] == blobs[name], f"{name}: browser vs numpy"
        assert base64.b64decode(want["weights"])[:n] == blobs[name], f"{name}: native vs numpy"
        REPORT.append(f"init {name}: {n} bytes identical in the browser, natively and on numpy")


def test_every_shader_compiles_in_chromium(parity_page):
    """Every shaders/*.wgsl compiles in Chromium's WebGPU (Tint), which is stricter than the
    native wgpu (naga) in places, e.g. reserved words and uniformity rules."""
    from webgpu_trainer.engine.backends import shaders
    sources = {p.name: shaders.source(p.stem)  # with its //!include lines expanded
               for p in sorted(shaders.shader_dir().glob("*.wgsl"))}
    errors = parity_page.evaluate("s => window.compileWGSL(s)", sources)
    assert set(errors) == set(sources)
    bad = {name: msgs for name, msgs in errors.items() if msgs}
    assert not bad, "WGSL errors in Chromium:\n" + "\n".join(
        f"{name}: {m}" for name, msgs in bad.items() for m in msgs)

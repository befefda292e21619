"""An uncaptured WebGPU error fails the run it came in, and only that one (headless Chromium,
SwiftShader).

The worker's device (webgpu_js.Device) collects what ``onuncapturederror`` reports, and every
submit after it raises it. The device lives as long as the page's worker, so errors never
cleared would fail every later job with the same old message: the worker clears them as a job
(the self-check, a run) starts and as a run ends (the kernels view between runs). The
``debug_gpu_error`` test hook (``?test=1`` only) makes the device report a real validation
error (a buffer of MAP_READ | STORAGE usage, which WebGPU refuses).
"""

from __future__ import annotations

import pytest
from e2e_fixtures import Page, run_training

pytestmark = pytest.mark.e2e

# 12 steps (256 images, batch 64, 3 epochs): the error comes in after the first
LONG = dict(optimizer="adam", lr="0.001", batch=64, epochs=3, seed=1, max_steps=0,
            eval_images=64, val_images=64, train_images=256, scratch=True)
RUN_TIMEOUT_S = 240


def test_an_uncaptured_gpu_error_fails_its_run_not_the_next(chromium, server):
    app = Page(chromium, f"{server}/?test=1")
    try:
        app.wait_ready()
        app.configure(**LONG)
        pg = app.page
        pg.evaluate("() => { window.e2eStepsBefore = appState.steps; }")
        pg.click("#start")
        pg.wait_for_function("appState.phase === 'training' && appState.steps.length >= 1",
                             timeout=RUN_TIMEOUT_S * 1000)
        pg.evaluate("window.gpuErrorForTests()")
        pg.wait_for_function("appState.phase === 'error' || appState.phase === 'done'",
                             timeout=RUN_TIMEOUT_S * 1000)
        st = app.state()
        assert st["phase"] == "error", f"the run went on past the error\n{app.diagnostics()}"
        assert "WebGPU error" in st["error"] and "debug_gpu_error" in st["error"], st["error"]
        assert 1 <= st["nsteps"] < 12, st["nsteps"]
        # the kernels view between runs works: the run cleared its errors as it ended
        pg.click("#tab-kernels")
        pg.wait_for_function("window.kernelsState.error || (window.kernelsState.result && "
                             "!window.kernelsState.busy)", timeout=RUN_TIMEOUT_S * 1000)
        assert pg.evaluate("window.kernelsState.error") is None, \
            pg.evaluate("window.kernelsState.error")
        pg.click("#tab-dashboard")
        # the next run on the same device trains: it started with the errors cleared
        app.configure(**{**LONG, "epochs": 1, "max_steps": 2})
        run = run_training(app, 2, RUN_TIMEOUT_S, "after the error")
        st = app.state()
        assert run.t_done is not None and st["nsteps"] == 2, app.diagnostics()
        assert st["lastStep"]["loss"] == st["lastStep"]["loss"] > 0, st["lastStep"]
    finally:
        app.close()

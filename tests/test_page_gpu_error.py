"""An uncaptured WebGPU error fails the run it hit, and only that one (headless Chromium,
SwiftShader).

The worker's device (webgpu_js.Device) collects what ``onuncapturederror`` reports and the next
submit raises it. The device lives as long as the page's worker, so a collected error that is
never cleared would fail every later run (and a later self-check) with the same old message.
The ``debug_gpu_error`` test hook (``?test=1`` only) makes the device report a real validation
error (a buffer of MAP_READ | STORAGE usage, which WebGPU refuses).
"""

from __future__ import annotations

import pytest
from e2e_fixtures import Page, run_training

pytestmark = pytest.mark.e2e

SETTINGS = dict(optimizer="adam", lr="0.001", batch=64, epochs=1, seed=1, max_steps=2,
                eval_images=64, val_images=64, train_images=256, scratch=True)
RUN_TIMEOUT_S = 240


def test_an_uncaptured_gpu_error_fails_one_run_not_the_next(chromium, server):
    app = Page(chromium, f"{server}/?test=1")
    try:
        app.wait_ready()
        app.configure(**SETTINGS)
        run_training(app, 2, RUN_TIMEOUT_S, "before the error")
        pg = app.page
        pg.evaluate("window.gpuErrorForTests()")
        pg.evaluate("() => { window.e2eStepsBefore = appState.steps; }")
        pg.wait_for_function("!document.querySelector('#start').disabled", timeout=60_000)
        pg.click("#start")
        pg.wait_for_function("appState.phase === 'error' || (appState.phase === 'done' && "
                             "appState.steps !== window.e2eStepsBefore)",
                             timeout=RUN_TIMEOUT_S * 1000)
        st = app.state()
        assert st["phase"] == "error", f"the run after the error finished\n{app.diagnostics()}"
        assert "WebGPU error" in st["error"] and "debug_gpu_error" in st["error"], st["error"]
        # the next run on the same device trains: the reported error was consumed once
        run = run_training(app, 2, RUN_TIMEOUT_S, "after the error")
        st = app.state()
        assert run.t_done is not None and st["nsteps"] == 2, app.diagnostics()
        assert st["lastStep"]["loss"] == st["lastStep"]["loss"] > 0, st["lastStep"]
    finally:
        app.close()

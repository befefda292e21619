"""Keep your work (issue 10, item 5) in headless Chromium with real WebGPU (SwiftShader), the real
server and MNIST: one page (``?test=1``) shared by the module's tests, in order.

- A 3-epoch run (256 training images, batch 64: 4 steps per epoch) stores its checkpoint in
  IndexedDB after epoch 1; the page is reloaded in epoch 2; the resume banner offers the run;
  Resume continues from step 4 with the stored metrics history (the same first rows) to the end.
- The metrics CSV downloaded equals appState; the settings export -> import round trip gives
  the same config, a bad file is refused with its fields named and nothing applied.
- An uninterrupted run of the same config (the .onnx of its current weights downloaded DURING
  it, valid in onnxruntime) gives the resumed run's losses (the engine is deterministic: within
  ``RESUME_ATOL``, bit-identical in practice).
- The GPU device destroyed mid-run (the ``debug_lose_device`` test hook): the page says so,
  Resume on a new device (a new worker) repeats the same losses.
- Reset everything, after its confirm step, leaves no IndexedDB database.
Screenshots: resume-banner, resume-banner-phone, work-panel, work-panel-phone, reset-confirm,
device-lost, device-lost-phone.
"""

from __future__ import annotations

import csv
import io
import json
import time

import numpy as np
import pytest
from e2e_fixtures import Page, screenshot
from conftest import RESUME_ATOL

pytestmark = pytest.mark.e2e

CONFIG = dict(optimizer="adam", lr="0.001", batch=64, epochs=3, seed=3, max_steps=0,
              eval_images=64, train_images=256, scratch=True)
PER_EPOCH, TOTAL = 4, 12
RUN_TIMEOUT_S = 240
DESKTOP, PHONE = {"width": 1280, "height": 800}, {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def app(chromium, server):
    page = Page(chromium, f"{server}/?test=1")
    page.page.set_viewport_size(DESKTOP)
    page.wait_ready()
    yield page
    page.close()


@pytest.fixture(scope="module")
def runs():
    return {}  # name -> appState.steps / epochs of a finished run


def steps_of(app):
    return app.page.evaluate("JSON.parse(JSON.stringify(appState.steps))")


def epochs_of(app):
    return app.page.evaluate("JSON.parse(JSON.stringify(appState.epochs))")


def wait(app, js: str, timeout_s: float = RUN_TIMEOUT_S, what: str = ""):
    try:
        app.page.wait_for_function(js, timeout=timeout_s * 1000)
    except Exception as exc:
        pytest.fail(f"waiting for {what or js}: {type(exc).__name__}\n{app.diagnostics()}")
    st = app.state()
    if st["phase"] == "error":
        pytest.fail(f"the page failed: {st['error']}\n{app.diagnostics()}")


def wait_done(app, what):
    wait(app, "appState.phase === 'done' || appState.phase === 'error'", what=what)
    assert app.state()["phase"] == "done", app.diagnostics()


def wait_checkpoint(app, epoch):
    wait(app, f"(appState.checkpoint && appState.checkpoint.epoch === {epoch}) || "
              "appState.phase === 'error'", what=f"the checkpoint of epoch {epoch}")


def start(app):
    app.page.wait_for_function("!document.querySelector('#start').disabled", timeout=30_000)
    app.page.click("#start")


def losses(steps):
    return np.array([s["loss"] for s in steps])


def test_reload_mid_run_offers_resume_and_continues(app, runs):
    pg = app.page
    assert pg.evaluate("appState.checkpoint") is None  # a fresh browser profile
    app.configure(**CONFIG)
    start(app)
    wait_checkpoint(app, 1)
    before = steps_of(app)
    before_epochs = epochs_of(app)
    assert [s["step"] for s in before] == [1, 2, 3, 4] and len(before_epochs) == 1
    assert all(s["lr"] == 0.001 for s in before)
    pg.reload()  # in epoch 2: the worker and its run are gone
    app.wait_ready()
    pg.wait_for_selector("#resume-banner", state="visible", timeout=30_000)
    text = pg.inner_text("#resume-banner")
    assert "after epoch 1 of 3, step 4 of 12" in text, text
    assert pg.evaluate("appState.phase") == "ready" and pg.evaluate("appState.steps.length") == 0
    screenshot(pg, "resume-banner")
    pg.set_viewport_size(PHONE)
    screenshot(pg, "resume-banner-phone")
    pg.set_viewport_size(DESKTOP)
    pg.click("#resume-run")
    wait(app, "appState.phase === 'training'", 30, "training to resume")
    assert pg.is_hidden("#resume-banner")
    wait_done(app, "the resumed run")
    after, after_epochs = steps_of(app), epochs_of(app)
    assert after[:4] == before and after_epochs[:1] == before_epochs  # the stored history
    assert [s["step"] for s in after] == list(range(1, TOTAL + 1))
    assert [e["epoch"] for e in after_epochs] == [1, 2, 3]
    assert pg.evaluate("window.lastRun.steps") == TOTAL
    pg.wait_for_function("appState.checkpoint?.epoch === 3 && appState.checkpoint.finished",
                         timeout=10_000)  # the last checkpoint: the finished run, no resume
    runs["resumed"] = (after, after_epochs)


def test_metrics_csv_equals_app_state(app, runs):
    pg = app.page
    pg.click("#tab-work")
    with pg.expect_download() as dl:
        pg.click("#work-csv")
    rows = list(csv.DictReader(io.StringIO(open(dl.value.path()).read())))
    steps, epochs = runs["resumed"]
    train = [r for r in rows if r["kind"] == "train"]
    val = [r for r in rows if r["kind"] == "val"]
    assert len(train) == len(steps) == TOTAL and len(val) == len(epochs) == 3
    for r, s in zip(train, steps):
        assert (int(r["step"]), float(r["loss"]), float(r["acc"]), float(r["lr"])) == \
            (s["step"], s["loss"], s["acc"], s["lr"])
    for r, e in zip(val, epochs):
        assert (int(r["epoch"]), int(r["step"]), float(r["loss"]), float(r["acc"])) == \
            (e["epoch"], e["step"], e["val_loss"], e["val_acc"])
    screenshot(pg, "work-panel")
    pg.set_viewport_size(PHONE)
    pg.locator("#panel-work").scroll_into_view_if_needed()
    screenshot(pg, "work-panel-phone")
    pg.set_viewport_size(DESKTOP)


def test_config_export_import_round_trip(app, tmp_path):
    pg = app.page
    before = pg.evaluate("window.readFormForTests()")
    with pg.expect_download() as dl:
        pg.click("#work-config-export")
    doc = json.loads(open(dl.value.path()).read())
    assert doc["model"] == "seednet" and doc["config"] == before
    # a bad file: every bad field named, nothing applied
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": "seednet", "config": {**before, "lr": -1,
                                                              "batch_size": "big"}}))
    pg.fill("#lr", "0.02")
    pg.set_input_files("#work-config-file", str(bad))
    pg.wait_for_selector("#config-import-errors", state="visible", timeout=10_000)
    errors = pg.inner_text("#config-import-errors")
    assert "lr:" in errors and "batch_size:" in errors and "nothing was changed" in errors
    assert pg.input_value("#lr") == "0.02"
    good = tmp_path / "good.json"
    good.write_text(json.dumps(doc))
    pg.set_input_files("#work-config-file", str(good))
    pg.wait_for_function("document.querySelector('#work-note').textContent.includes('Imported')",
                         timeout=10_000)
    assert pg.is_hidden("#config-import-errors")
    assert pg.evaluate("window.readFormForTests()") == before


def test_uninterrupted_run_gives_the_same_losses_and_onnx_any_time(app, runs, tmp_path):
    import onnx
    import onnxruntime as ort
    pg = app.page
    start(app)
    wait(app, "appState.steps.length >= 4", what="the first epoch")
    with pg.expect_download(timeout=120_000) as dl:  # during training: the current weights
        pg.click("#work-onnx")
    assert pg.evaluate("appState.phase") == "training"
    path = tmp_path / "now.onnx"
    dl.value.save_as(path)
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    meta = {p.key: p.value for p in model.metadata_props}
    assert int(meta["steps"]) >= 4, meta
    sess = ort.InferenceSession(str(path))
    out = sess.run(None, {sess.get_inputs()[0].name: np.zeros((2, 1, 28, 28), np.float32)})[0]
    assert out.shape == (2, 10) and np.isfinite(out).all()
    wait_done(app, "the uninterrupted run")
    steps, epochs = steps_of(app), epochs_of(app)
    resumed, resumed_epochs = runs["resumed"]
    assert [s["step"] for s in steps] == list(range(1, TOTAL + 1))
    err = np.abs(losses(steps) - losses(resumed)).max()
    print(f"resumed vs uninterrupted: max |loss difference| {err:.3g} over {TOTAL} steps")
    assert err <= RESUME_ATOL
    assert [s["acc"] for s in steps] == [s["acc"] for s in resumed]
    for a, b in zip(epochs, resumed_epochs):
        assert abs(a["val_loss"] - b["val_loss"]) <= RESUME_ATOL and a["val_acc"] == b["val_acc"]
    runs["uninterrupted"] = steps


def test_device_lost_then_resume_on_a_new_device(app, runs):
    pg = app.page
    pg.click("#tab-dashboard")
    start(app)
    wait_checkpoint(app, 1)
    pg.evaluate("window.loseDeviceForTests()")
    pg.wait_for_selector("#device-lost", state="visible", timeout=60_000)
    text = pg.inner_text("#device-lost")
    assert "GPU was reset or the laptop slept" in text and "epoch 1 (step 4)" in text, text
    assert pg.evaluate("appState.phase") == "lost" and pg.is_hidden("#error")
    screenshot(pg, "device-lost")
    pg.set_viewport_size(PHONE)
    screenshot(pg, "device-lost-phone")
    pg.set_viewport_size(DESKTOP)
    t0 = time.monotonic()
    pg.click("#device-lost-go")
    wait(app, "appState.phase === 'training'", 120, "the run to resume on a new device")
    print(f"new device + worker ready and resumed in {time.monotonic() - t0:.1f} s")
    wait_done(app, "the run resumed after the device was lost")
    steps = steps_of(app)
    assert [s["step"] for s in steps] == list(range(1, TOTAL + 1))
    assert np.abs(losses(steps) - losses(runs["uninterrupted"])).max() <= RESUME_ATOL


def test_reset_everything_clears_storage(app):
    pg = app.page
    pg.click("#tab-work")
    pg.evaluate("localStorage.setItem('x', '1')")
    names = pg.evaluate("indexedDB.databases().then((d) => d.map((x) => x.name))")
    assert "webgpu-trainer" in names
    pg.click("#reset-all")
    assert pg.is_visible("#reset-confirm")
    pg.click("#reset-no")  # the confirm step: Cancel deletes nothing
    assert pg.evaluate("indexedDB.databases().then((d) => d.length)") == len(names)
    pg.click("#reset-all")
    pg.locator("#reset-confirm").scroll_into_view_if_needed()
    screenshot(pg, "reset-confirm")
    pg.click("#reset-yes")
    pg.wait_for_selector("#reset-result", state="visible", timeout=20_000)
    result = pg.inner_text("#reset-result")
    assert "IndexedDB “webgpu-trainer” (the checkpoint of epoch 3" in result, result
    assert "localStorage: 1 key(s)" in result
    assert pg.evaluate("indexedDB.databases().then((d) => d.length)") == 0
    assert pg.evaluate("localStorage.length") == 0
    pg.reload()
    app.wait_ready()
    assert pg.is_hidden("#resume-banner") and pg.evaluate("appState.checkpoint") is None
    errors = [c for c in app.console if c.startswith(("error", "pageerror"))]
    assert not errors, errors

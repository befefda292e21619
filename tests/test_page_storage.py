"""Keep your work (issue 10, item 5; issue 16) in headless Chromium with real WebGPU
(SwiftShader), the real server and MNIST. Every test has a page of its own (``?test=1``, a new
browser context: an empty IndexedDB) and passes alone and in any order; the one module fixture,
``reference``, is read-only: the uninterrupted run of CONFIG (3 epochs of 4 steps, 256 training
images, batch 64), its per-step losses and epochs, and its finished page (downloads only).

- Reload in epoch 3 after epoch 2's checkpoint failed to write (IndexedDB refusing: the page
  says so and keeps epoch 1's): the resume banner offers epoch 1; Resume continues from step 4
  with the stored metrics history to the end, with the reference's losses (the engine is
  deterministic: within ``RESUME_ATOL``, bit-identical in practice).
- A checkpoint every ``checkpoint_every_s`` seconds inside an epoch: a reload after one, Resume
  gives the reference's losses; Stop inside an epoch keeps the steps done (its checkpoint).
- The metrics CSV equals appState; the settings export -> import round trip gives the same
  config, a bad file is refused with its fields named and nothing applied.
- The .onnx of the current weights downloaded during a run (valid in onnxruntime), the run's
  losses undisturbed.
- The GPU device destroyed mid-run (the ``debug_lose_device`` test hook): the page says so,
  Resume on a new device (a new worker) repeats the reference's losses.
- After a reload, Download .onnx exports the stored checkpoint; Reset everything, after its
  confirm step, leaves no IndexedDB database.
Screenshots: resume-banner, resume-banner-phone, work-panel, work-panel-phone, reset-confirm,
device-lost, device-lost-phone.
"""

from __future__ import annotations

import csv
import io
import json
import re
import time

import numpy as np
import pytest
from conftest import RESUME_ATOL
from e2e_fixtures import Page, screenshot

pytestmark = pytest.mark.e2e

CONFIG = dict(optimizer="adam", lr="0.001", batch=64, epochs=3, seed=3, max_steps=0,
              eval_images=64, val_images=64, train_images=256, scratch=True)
PER_EPOCH, TOTAL = 4, 12
RUN_TIMEOUT_S = 240
DESKTOP, PHONE = {"width": 1280, "height": 800}, {"width": 390, "height": 844}


def open_page(chromium, server) -> Page:
    page = Page(chromium, f"{server}/?test=1")
    page.page.set_viewport_size(DESKTOP)
    page.wait_ready()
    return page


@pytest.fixture()
def app(chromium, server):
    """A page of its own (a new browser context: nothing stored)."""
    page = open_page(chromium, server)
    yield page
    page.close()


def configure(app, every_s: float = 0, **over):
    """CONFIG (``over`` replacing fields) with a checkpoint every ``every_s`` seconds inside an
    epoch (0: at the epochs' ends only, whatever the machine's speed)."""
    app.configure(**{**CONFIG, **over})
    app.page.fill("#checkpoint-every-s", str(every_s))


@pytest.fixture(scope="module")
def reference(chromium, server):
    """The uninterrupted run of CONFIG: {"steps", "epochs", "app"} (its finished page, for
    downloads only: tests must not change it)."""
    page = open_page(chromium, server)
    configure(page)
    start(page)
    wait_done(page, "the uninterrupted reference run")
    yield {"steps": steps_of(page), "epochs": epochs_of(page), "app": page}
    page.close()


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
    wait(app, f"(appState.checkpoint?.epoch === {epoch} && !appState.checkpoint.inside) || "
              "appState.phase === 'error'", what=f"the checkpoint of epoch {epoch}")


def wait_steps(app, n: int):
    """Until THIS run reports step ``n`` (the phase is `training` and its progress says so)."""
    wait(app, f"appState.phase === 'training' && (appState.progress?.step ?? 0) >= {n} && "
              f"appState.steps.length >= {n}", what=f"step {n}")


def start(app):
    app.page.wait_for_function("!document.querySelector('#start').disabled", timeout=60_000)
    app.page.click("#start")
    wait(app, "appState.phase !== 'ready' && appState.phase !== 'done'", 30, "the run to start")


def losses(steps):
    return np.array([s["loss"] for s in steps])


def assert_same_run(steps, epochs, reference):
    """``steps`` / ``epochs`` (appState's) are the reference run's: every step, losses within
    RESUME_ATOL, the same batch accuracies and validation numbers."""
    ref_steps, ref_epochs = reference["steps"], reference["epochs"]
    assert [s["step"] for s in steps] == list(range(1, TOTAL + 1))
    err = np.abs(losses(steps) - losses(ref_steps)).max()
    print(f"max |loss difference| vs the uninterrupted run: {err:.3g} over {TOTAL} steps")
    assert err <= RESUME_ATOL
    assert [s["acc"] for s in steps] == [s["acc"] for s in ref_steps]
    assert [e["epoch"] for e in epochs] == [1, 2, 3]
    for a, b in zip(epochs, ref_epochs):
        assert abs(a["val_loss"] - b["val_loss"]) <= RESUME_ATOL and a["val_acc"] == b["val_acc"]
        assert abs(a["train_loss"] - b["train_loss"]) <= RESUME_ATOL


def resume_from_banner(app):
    pg = app.page
    pg.click("#resume-run")
    wait(app, "appState.phase === 'training'", 60, "training to resume")
    assert pg.is_hidden("#resume-banner")
    wait_done(app, "the resumed run")


def test_reload_mid_run_offers_resume_and_continues(app, reference):
    pg = app.page
    assert pg.evaluate("appState.checkpoint") is None  # a fresh browser profile
    configure(app)
    start(app)
    wait_checkpoint(app, 1)
    # from now on IndexedDB refuses every write (a full disk): epoch 2's checkpoint fails
    pg.evaluate("""() => { IDBObjectStore.prototype.put = function () {
        throw new DOMException('the disk is full (test)', 'QuotaExceededError'); }; }""")
    wait(app, "document.getElementById('ckpt-status').dataset.state === 'error'",
         what="the failed write of epoch 2's checkpoint")
    status = pg.inner_text("#ckpt-status")
    assert status == ("Could not save the checkpoint of epoch 2 (step 8): QuotaExceededError: "
                      "the disk is full (test). The last good checkpoint (epoch 1, step 4) is "
                      "kept."), status
    before = steps_of(app)
    before_epochs = epochs_of(app)
    assert [s["step"] for s in before[:4]] == [1, 2, 3, 4] and len(before_epochs) >= 1
    assert all(s["lr"] == 0.001 for s in before)
    pg.reload()  # in epoch 3: the worker and its run are gone; epoch 1's checkpoint is kept
    app.wait_ready()
    pg.wait_for_selector("#resume-banner", state="visible", timeout=30_000)
    text = pg.inner_text("#resume-banner")
    assert "after epoch 1 of 3, step 4 of 12" in text, text
    assert pg.evaluate("appState.phase") == "ready" and pg.evaluate("appState.steps.length") == 0
    screenshot(pg, "resume-banner")
    pg.set_viewport_size(PHONE)
    screenshot(pg, "resume-banner-phone")
    pg.set_viewport_size(DESKTOP)
    resume_from_banner(app)
    after, after_epochs = steps_of(app), epochs_of(app)
    assert after[:4] == before[:4] and after_epochs[:1] == before_epochs[:1]  # stored history
    assert_same_run(after, after_epochs, reference)
    assert pg.evaluate("window.lastRun.steps") == TOTAL
    pg.wait_for_function("appState.checkpoint?.epoch === 3 && appState.checkpoint.finished",
                         timeout=10_000)  # the last checkpoint: the finished run, no resume


def test_timed_checkpoint_inside_an_epoch_resumes_exactly(app, reference):
    """checkpoint_every_s tiny: a checkpoint after every step inside an epoch; a reload after
    the first one stored; Resume continues from the stored step with the reference's losses
    and epoch means (the epoch's running sums are in the checkpoint)."""
    pg = app.page
    configure(app, every_s=0.001)
    start(app)
    wait(app, "appState.checkpoint?.inside === true", what="a checkpoint inside an epoch")
    pg.reload()
    app.wait_ready()
    pg.wait_for_selector("#resume-banner", state="visible", timeout=30_000)
    ck = pg.evaluate("JSON.parse(JSON.stringify(appState.checkpoint))")
    text = pg.inner_text("#resume-banner")
    assert ck["step"] % PER_EPOCH, f"the stored checkpoint is at an epoch's end: {ck}"
    epoch = ck["step"] // PER_EPOCH + 1
    assert (ck["epoch"], ck["inside"]) == (epoch, True), ck
    assert f"stopped inside epoch {epoch} of 3, step {ck['step']} of 12" in text, text
    assert "inside epoch" in pg.inner_text("#ckpt-status")
    resume_from_banner(app)
    assert_same_run(steps_of(app), epochs_of(app), reference)


def test_stop_inside_an_epoch_keeps_the_steps_done(app, reference):
    """Stop saves a checkpoint of every step done (not only the last epoch's end); the banner
    offers it and Resume gives the reference's losses."""
    pg = app.page
    configure(app)
    start(app)
    wait_steps(app, PER_EPOCH + 1)
    pg.click("#stop")
    wait_done(app, "the stopped run")
    done = pg.evaluate("appState.steps.length")
    pg.wait_for_selector("#resume-banner", state="visible", timeout=30_000)
    assert pg.evaluate("appState.checkpoint.step") == done > PER_EPOCH
    assert f"step {done} of 12" in pg.inner_text("#resume-banner")
    resume_from_banner(app)
    assert_same_run(steps_of(app), epochs_of(app), reference)


def test_metrics_csv_equals_app_state(reference):
    app = reference["app"]
    pg = app.page
    pg.click("#tab-work")
    with pg.expect_download() as dl:
        pg.click("#work-csv")
    rows = list(csv.DictReader(io.StringIO(open(dl.value.path()).read())))
    steps, epochs = steps_of(app), epochs_of(app)
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
    configure(app)
    pg.click("#tab-work")
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


def test_onnx_of_the_current_weights_during_training(app, reference, tmp_path):
    """Download .onnx while THIS run trains (issue 16: the old test clicked before the run had
    started, when the worker had no trainer yet): a valid model of the weights at that step; the
    run's losses are the reference's (the snapshot did not disturb it)."""
    import onnx
    import onnxruntime as ort
    pg = app.page
    configure(app)
    pg.click("#tab-work")
    start(app)
    starting = pg.evaluate("""() => {  // decided and clicked in one task: no race
        const starting = appState.progress?.images_per_s === undefined;
        if (starting) document.getElementById('work-onnx').click();
        return starting; }""")
    if starting:  # the run's set-up (model, data, compiling): no weights yet, and no error
        assert "still starting" in pg.inner_text("#work-note") and pg.is_hidden("#error")
    wait_steps(app, 2)
    with pg.expect_download(timeout=120_000) as dl:
        pg.click("#work-onnx")
    assert pg.is_hidden("#error"), app.diagnostics()
    path = tmp_path / "now.onnx"
    dl.value.save_as(path)
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    meta = {p.key: p.value for p in model.metadata_props}
    assert 2 <= int(meta["steps"]) <= TOTAL, meta
    sess = ort.InferenceSession(str(path))
    out = sess.run(None, {sess.get_inputs()[0].name: np.zeros((2, 1, 28, 28), np.float32)})[0]
    assert out.shape == (2, 10) and np.isfinite(out).all()
    wait_done(app, "the run")
    assert_same_run(steps_of(app), epochs_of(app), reference)


def test_device_lost_then_resume_on_a_new_device(app, reference):
    pg = app.page
    configure(app)
    start(app)
    wait_checkpoint(app, 1)
    pg.evaluate("window.loseDeviceForTests()")
    pg.wait_for_selector("#device-lost", state="visible", timeout=60_000)
    text = pg.inner_text("#device-lost")
    assert "GPU was reset or the laptop slept" in text, text
    ck = pg.evaluate("JSON.parse(JSON.stringify(appState.checkpoint))")
    assert re.search(rf"epoch {ck['epoch']} \(step {ck['step']}\)", text), (text, ck)
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
    assert_same_run(steps_of(app), epochs_of(app), reference)


def onnx_tensors(path) -> dict:
    import onnx
    from onnx import numpy_helper
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def trainable_of(pg):
    return pg.evaluate("window.readFormForTests().trainable")


def test_short_run_resumed_downloaded_then_reset(app, tmp_path):
    """A two-epoch run that freezes a parameter, stopped, reloaded and resumed: Resume ticks
    the stored run's Train boxes again. After a reload, Download .onnx exports the stored
    checkpoint (its padded weight buffer cut to the model's size): the same tensors as the
    finished run's download. Reset everything then clears the storage."""
    pg = app.page
    configure(app, epochs=2)
    pg.wait_for_function("document.querySelector('#summary-totals')?.dataset.trainable",
                         timeout=60_000)
    pg.evaluate("document.querySelector('#summary-table tbody input[type=checkbox]').click()")
    frozen = trainable_of(pg)
    assert frozen and len(frozen) > 1, frozen  # every parameter but one
    start(app)
    wait_steps(app, 1)
    pg.click("#stop")
    wait_done(app, "the stopped run")
    pg.reload()
    app.wait_ready()
    pg.wait_for_selector("#resume-banner", state="visible", timeout=30_000)
    assert trainable_of(pg) is None  # a new page: every parameter trains
    resume_from_banner(app)
    assert trainable_of(pg) == frozen
    assert pg.evaluate("appState.config.trainable") == frozen
    pg.wait_for_function("appState.checkpoint?.finished === true", timeout=10_000)
    pg.click("#tab-results")
    with pg.expect_download(timeout=60_000) as dl:
        pg.click("#download")  # the finished run's weights
    dl.value.save_as(tmp_path / "run.onnx")
    pg.reload()
    app.wait_ready()
    pg.click("#tab-work")
    with pg.expect_download(timeout=60_000) as dl:
        pg.click("#work-onnx")  # no run in this page: the stored checkpoint
    dl.value.save_as(tmp_path / "stored.onnx")
    run, kept = onnx_tensors(tmp_path / "run.onnx"), onnx_tensors(tmp_path / "stored.onnx")
    assert sorted(run) == sorted(kept) and len(run) > 10
    for name, value in run.items():
        assert np.array_equal(value, kept[name]), name
    assert pg.is_hidden("#error")
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
    assert "IndexedDB “webgpu-trainer” (the checkpoint of epoch 2" in result, result
    assert "localStorage: 1 key(s)" in result
    assert pg.evaluate("indexedDB.databases().then((d) => d.length)") == 0
    assert pg.evaluate("localStorage.length") == 0
    pg.reload()
    app.wait_ready()
    assert pg.is_hidden("#resume-banner") and pg.evaluate("appState.checkpoint") is None
    errors = [c for c in app.console if c.startswith(("error", "pageerror"))]
    assert not errors, errors

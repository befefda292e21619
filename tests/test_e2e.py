"""End to end in headless Chromium with real WebGPU (SwiftShader here): issue 2, item 8.

A module-scoped fixture starts the real server (``python server.py --port P``) on a free port of
127.0.0.1 with the real MNIST cache and the repo's ``models/``; Chromium (``/usr/bin/chromium``,
``--enable-unsafe-webgpu``) opens the page, which boots Pyodide in a Web Worker and trains
SeedNet on the GPU. The tests:

- the page boots (worker ready, adapter shown, no error);
- SeedNet trains from scratch with Adam (lr 1e-3, batch 64, seed 0) for 150 steps: the loss
  falls below half, test accuracy on the first 1,000 test images is >= 93%, the downloaded .onnx
  is valid, carries its provenance and agrees with the browser in onnxruntime (>= 99.9% argmax
  agreement, logits within 1e-3); its speed is printed (benchmarks/ measures it);
- Stop ends a whole-epoch run early, with ``lastRun.stopped``.

Timing (s/step, images/s, totals) is printed to stdout (``pytest -s`` or the ``-rA`` summary).
Slow runs fail early and clearly: once the first step reports arrive, a run whose projected time
exceeds the wait limit fails at once with the measured s/step instead of hanging for 8 minutes.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
from e2e_fixtures import REPORT  # noqa: F401  (conftest prints it)
from e2e_fixtures import EVAL_IMAGES, REPO, Page, native_losses, note, run_training

pytestmark = pytest.mark.e2e


# The main run (issue 2, item 8)
STEPS = 150
VAL_IMAGES = 500              # held out of the training split (validated once, at the end)
# Start -> phase "done", hard wait limit (E2E_TRAIN_TIMEOUT_S overrides it, e.g. to see the
# accuracy and ONNX checks of a slow run). Speed is measured by benchmarks/, not asserted here.
TRAIN_TIMEOUT_S = float(os.environ.get("E2E_TRAIN_TIMEOUT_S", 8 * 60))
MIN_ACCURACY = 0.93
MIN_AGREEMENT = 0.999
MAX_LOGIT_DIFF = 1e-3

STOP_TIMEOUT_S = 60           # Stop clicked -> phase "done"


# ----------------------------------------------------------------------------- training run

@pytest.fixture(scope="module")
def trained(chromium, server, tmp_path_factory):
    """The main run (issue 2, item 8): SeedNet from scratch, Adam lr 1e-3, batch 64, seed 0,
    150 steps, evaluated on the first 1,000 test images; plus its downloaded .onnx."""
    app = Page(chromium, server)
    try:
        boot_s = app.wait_ready()
        app.configure(optimizer="adam", lr="0.001", batch=64, epochs=1, seed=0,
                      max_steps=STEPS, eval_images=EVAL_IMAGES, scratch=True,
                      val_images=VAL_IMAGES)
        run = run_training(app, STEPS, TRAIN_TIMEOUT_S, "main")
        page = app.page
        steps = page.evaluate("window.appState.steps")
        last = page.evaluate("""() => {
            const r = window.lastRun;
            return {test_acc: r.test_acc, test_loss: r.test_loss, eval_images: r.eval_images,
                    stopped: r.stopped, model: r.model, steps: r.steps,
                    weights_bytes: r.weights ? r.weights.byteLength : 0};
        }""")
        logits = np.asarray(page.evaluate("Array.from(window.lastRun.logits)"), np.float32)
        labels = np.asarray(page.evaluate("Array.from(window.lastRun.labels)"), np.int64)
        page.wait_for_function("!document.querySelector('#download').disabled", timeout=10_000)
        page.click("#tab-results")
        with page.expect_download(timeout=60_000) as dl_info:
            page.click("#download")
        download = dl_info.value
        onnx_path = tmp_path_factory.mktemp("download") / download.suggested_filename
        download.save_as(onnx_path)
        adapter = app.state()["adapter"]
        errors_visible = page.is_visible("#error")
        error_text = page.evaluate("window.appState.error")
    finally:
        app.close()

    sps = run.s_per_step()
    total_s = run.t_done - run.t_start
    note(f"\n[e2e] adapter: {json.dumps(adapter)}")
    note(f"[e2e] boot {boot_s:.1f} s; Start -> first report (step {run.seen[0][1]}) "
          f"{run.first_report_s():.1f} s; {sps:.3f} s/step "
          f"({64 / sps:.1f} images/s; worker reports {run.worker_ips:.1f} images/s); "
          f"Start -> done {total_s:.1f} s for {steps[-1]['step']} steps; "
          f"test acc {last['test_acc']:.4f} on {last['eval_images']} images")
    return {"run": run, "steps": steps, "last": last, "logits": logits, "labels": labels,
            "onnx": onnx_path, "errors_visible": errors_visible, "error": error_text,
            "s_per_step": sps, "total_s": total_s}


# ------------------------------------------------------------------------------------- tests

def test_page_boots(app):
    boot_s = app.wait_ready()
    adapter_text = app.page.text_content("#adapter").strip()
    st = app.state()
    note(f"\n[e2e] boot {boot_s:.1f} s; adapter {adapter_text!r} {json.dumps(st['adapter'])}")
    assert st["adapter"], "no `adapter` message reached the page"
    assert adapter_text and adapter_text not in ("detecting GPU…", "no WebGPU"), adapter_text
    assert not app.page.is_visible("#error"), app.page.text_content("#error-text")
    assert not app.page.is_visible("#no-webgpu")
    assert st["phase"] == "ready" and st["error"] is None
    assert app.page.is_enabled("#start")


def test_training_loss_falls(trained):
    steps = trained["steps"]
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1)), "missing or extra steps"
    losses = np.array([s["loss"] for s in steps], np.float64)
    assert np.isfinite(losses).all()
    first, last = losses[:20].mean(), losses[-20:].mean()
    note(f"\n[e2e] mean loss first 20 steps {first:.4f}, last 20 steps {last:.4f}")
    assert last < 0.5 * first, f"loss did not halve: first 20 {first:.4f}, last 20 {last:.4f}"
    assert not trained["errors_visible"], trained["error"]


CURVE_STEPS = 50
CURVE_RTOL = 1e-4


def test_browser_and_native_loss_curves_match(trained, mnist_cache):
    """Issue 3: same seed, same data order => the native trainer (wgpu-py, lavapipe here)
    reproduces the browser's (Pyodide, SwiftShader) per-step losses of the main run for its first
    CURVE_STEPS steps, within CURVE_RTOL relative per step. The native run uses the same config
    with max_steps = CURVE_STEPS (no scheduler: a step's lr does not depend on the run's length).

    Training is chaotic: perturbing the input normalisation by 3e-7 on one host moves the loss
    by 5e-3 relative by step 47 (Adam lr 1e-3). The hosts agree because the kernels give the
    same bits on both: exp/log on the training path are shaders/lib/detmath.wgsl, not the drivers'
    approximations (with those, the curves differed by 8.8e-4 at step 33)."""
    t0 = time.monotonic()
    losses = native_losses(mnist_cache, {"optimizer": "adam", "lr": 1e-3, "batch_size": 64,
                                         "epochs": 1, "seed": 0, "init": "scratch",
                                         "max_steps": CURVE_STEPS, "val_images": VAL_IMAGES})
    browser = {s["step"]: s["loss"] for s in trained["steps"][:CURVE_STEPS]}
    steps = list(range(1, CURVE_STEPS + 1))
    assert sorted(losses) == steps and sorted(browser) == steps, "missing steps"
    want = np.array([browser[t] for t in steps])
    got = np.array([losses[t] for t in steps])
    rel = np.abs(got - want) / np.abs(want)
    note(f"\n[e2e] browser vs native loss curve, {CURVE_STEPS} steps: max relative difference "
         f"{rel.max():.2e} (step {int(rel.argmax()) + 1}), {int((got == want).sum())} of "
         f"{CURVE_STEPS} steps bit-identical; native run {time.monotonic() - t0:.0f} s")
    assert rel.max() <= CURVE_RTOL, f"step {int(rel.argmax()) + 1}: browser {want[rel.argmax()]}" \
        f" vs native {got[rel.argmax()]}"


def test_test_accuracy(trained, mnist_cache):
    from webgpu_trainer.host import data
    last, logits, labels = trained["last"], trained["logits"], trained["labels"]
    assert last["eval_images"] == EVAL_IMAGES and not last["stopped"]
    _, real_labels = data.load(mnist_cache, "test")
    np.testing.assert_array_equal(labels, real_labels[:EVAL_IMAGES])
    logits = logits.reshape(EVAL_IMAGES, 10)
    acc = float((logits.argmax(1) == real_labels[:EVAL_IMAGES]).mean())
    assert abs(acc - last["test_acc"]) < 1e-9, (acc, last["test_acc"])
    # the model ends in LogSoftmax: rows are log-probabilities
    np.testing.assert_allclose(np.exp(logits.astype(np.float64)).sum(1), 1.0, atol=1e-4)
    assert last["test_acc"] >= MIN_ACCURACY, (
        f"test accuracy {last['test_acc']:.4f} on the first {EVAL_IMAGES} test images "
        f"< {MIN_ACCURACY}")


def test_onnx_export_matches_browser(trained, mnist_cache):
    import onnx
    import onnxruntime as ort

    from webgpu_trainer.host import data
    path = trained["onnx"]
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    props = {p.key: p.value for p in model.metadata_props}
    note(f"\n[e2e] {path.name}: {path.stat().st_size} bytes, metadata {props}")
    assert props.get("trained_with") == "webgpu-trainer"
    assert props.get("dataset") == "MNIST"
    assert props.get("optimizer") == "adam"
    assert float(props["lr"]) == pytest.approx(1e-3)
    assert int(props["batch_size"]) == 64 and int(props["seed"]) == 0
    assert props.get("init") == "scratch"
    assert int(props["steps"]) == STEPS
    assert float(props["test_accuracy"]) == pytest.approx(trained["last"]["test_acc"])

    images, _ = data.load(mnist_cache, "test")
    x = ((images[:EVAL_IMAGES].astype(np.float32) / 255.0) - 0.1307) / 0.3081
    x = x.reshape(EVAL_IMAGES, 1, 28, 28).astype(np.float32)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (ort_logits,) = sess.run(None, {sess.get_inputs()[0].name: x})
    browser = trained["logits"].reshape(EVAL_IMAGES, 10)
    agree = float((ort_logits.argmax(1) == browser.argmax(1)).mean())
    diff = float(np.abs(ort_logits - browser).max())
    note(f"[e2e] onnxruntime vs browser: argmax agreement {agree:.4f}, "
          f"max |logit diff| {diff:.2e}")
    assert agree >= MIN_AGREEMENT, f"argmax agreement {agree:.4f} < {MIN_AGREEMENT}"
    assert diff <= MAX_LOGIT_DIFF, f"max |logit difference| {diff:.2e} > {MAX_LOGIT_DIFF}"


def test_stop(app):
    app.wait_ready()
    # whole epoch (937 steps); few test images so the final evaluation is quick
    app.configure(optimizer="adam", lr="0.001", batch=64, epochs=1, seed=0, max_steps=0,
                  eval_images=64)
    page = app.page
    t0 = time.monotonic()
    page.click("#start")
    try:
        page.wait_for_function("window.appState.steps.length > 0 || "
                               "window.appState.phase === 'error'", timeout=TRAIN_TIMEOUT_S * 1000)
    except Exception:
        pytest.fail(f"no progress within {TRAIN_TIMEOUT_S} s\n{app.diagnostics()}")
    st = app.state()
    assert st["phase"] == "training", app.diagnostics()
    total, step_at_stop = st["progress"]["total_steps"], st["progress"]["step"]
    t_first = time.monotonic()
    page.click("#stop")
    try:
        page.wait_for_function("window.appState.phase === 'done' || "
                               "window.appState.phase === 'error'",
                               timeout=STOP_TIMEOUT_S * 1000)
    except Exception:
        pytest.fail(f"not done within {STOP_TIMEOUT_S} s after Stop\n{app.diagnostics()}")
    t_done = time.monotonic()
    st = app.state()
    assert st["phase"] == "done", app.diagnostics()
    stopped = page.evaluate("window.lastRun && window.lastRun.stopped")
    steps = page.evaluate("window.lastRun.steps")
    note(f"\n[e2e] stop: first report after {t_first - t0:.1f} s (step "
          f"{step_at_stop}), done {t_done - t_first:.1f} s after Stop, "
          f"{steps} of {total} steps")
    assert stopped is True
    assert steps is None or steps < total
    assert not page.is_visible("#error"), page.text_content("#error-text")
    assert page.is_enabled("#start") and page.is_enabled("#download")


UPLOAD_FIXTURE = REPO / "tests" / "fixtures" / "models" / "lenet5-ts17.onnx"
UPLOAD_STEPS = 8
UPLOAD_EVAL = 256


def test_upload_finetune_head_and_download(app, mnist_cache, tmp_path):
    """Issue 4: upload a fixture made by torch.onnx.export through the page's file picker, see
    its summary, fine-tune only its head for a few steps on real MNIST, download the .onnx:
    onnx.checker (full) passes, onnxruntime agrees with the browser's eval outputs, the frozen
    initializers are byte-identical to the upload and the head's changed."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    from webgpu_trainer.host import data
    from webgpu_trainer.engine.tools import summary
    from webgpu_trainer import onnx_io
    app.wait_ready()
    page = app.page
    page.set_input_files("#model-file", str(UPLOAD_FIXTURE))
    name = UPLOAD_FIXTURE.stem
    try:
        page.wait_for_function(f"document.querySelector('#model').value === '{name}' && "
                               "!document.querySelector('#summary-card').hidden && "
                               "document.querySelector('#summary-card').dataset.model === "
                               f"'{name}'",
                               timeout=60_000)
    except Exception:
        pytest.fail(f"upload not shown: {page.text_content('#import-errors')}\n"
                    f"{app.diagnostics()}")
    page.click("#tab-model")
    rows = page.locator("#summary-table tbody tr").count()
    graph, _ = onnx_io.load_bundle(UPLOAD_FIXTURE)
    assert rows == len(graph["nodes"])
    page.click("#train-head")
    assert page.is_checked("#init-finetune")
    head = summary.head_params(graph)
    cfg_trainable = page.evaluate("readFormForTests()")["trainable"]
    assert cfg_trainable == head
    app.configure(optimizer="adam", lr="0.01", batch=32, epochs=1, seed=1,
                  max_steps=UPLOAD_STEPS, eval_images=UPLOAD_EVAL, scratch=False, model=None,
                  val_images=UPLOAD_EVAL)
    run_training(app, UPLOAD_STEPS, TRAIN_TIMEOUT_S, "upload")
    logits = np.asarray(page.evaluate("Array.from(window.lastRun.logits)"), np.float32)
    page.wait_for_function("!document.querySelector('#download').disabled", timeout=10_000)
    page.click("#tab-results")
    with page.expect_download(timeout=60_000) as dl_info:
        page.click("#download")
    out = tmp_path / "trained.onnx"
    dl_info.value.save_as(out)
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta.get("trainable") == ",".join(head), meta
    before = {t.name: numpy_helper.to_array(t) for t in onnx.load(UPLOAD_FIXTURE).graph.initializer}
    after = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n, v in before.items():
        if n in head:
            assert not np.array_equal(after[n], v), f"head parameter {n} did not change"
        elif v.dtype == np.float32 and n in after and "running" not in n:
            assert np.array_equal(after[n], v), f"frozen {n} changed"
    images, _ = data.load(mnist_cache, "test")
    x = ((images[:UPLOAD_EVAL].astype(np.float32) / 255 - 0.1307) / 0.3081)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    ort_out = sess.run(None, {inp.name: x.reshape(UPLOAD_EVAL, 1, 28, 28)})[0]
    classes = ort_out.shape[1]
    got = logits.reshape(UPLOAD_EVAL, classes)  # the page evaluates log-probabilities
    z = ort_out.astype(np.float64)
    z = z - z.max(1, keepdims=True)
    ort_out = z - np.log(np.exp(z).sum(1, keepdims=True))
    diff = float(np.abs(ort_out - got).max())
    agree = float((ort_out.argmax(1) == got.argmax(1)).mean())
    note(f"\n[e2e] upload {UPLOAD_FIXTURE.name}: head {head} fine-tuned {UPLOAD_STEPS} steps; "
         f"onnxruntime vs browser max diff {diff:.2e}, argmax agreement {agree:.4f}")
    assert diff <= MAX_LOGIT_DIFF and agree >= MIN_AGREEMENT

"""The kernels playground and deleting an uploaded model, in headless Chromium with real WebGPU
(issue 10): the page's output (the engine's Conv in the worker, window.kernelsState) equals a
float64 numpy cross-correlation of the very pixels the page used, within PLAYGROUND_ATOL, for
every preset and a typed kernel, on the built-in pattern, an MNIST digit and an uploaded PNG;
bad weights are refused inline; a convolution during a training run leaves the run alone; an
uploaded model is deleted from the page (built-in models offer no delete).

One booted page for the module (~30 s to boot on SwiftShader); the run is 3 steps."""

import struct
import time
import zlib

import numpy as np
import pytest
from conftest import PLAYGROUND_ATOL
from e2e_fixtures import REPO, Page, native_losses, screenshot
from test_e2e import CURVE_RTOL
from test_playground import correlate

pytestmark = pytest.mark.e2e

RESULT_TIMEOUT_MS = 60_000
LENET = REPO / "tests" / "fixtures" / "models" / "lenet5-ts17.onnx"


@pytest.fixture(scope="module")
def app(chromium, server):
    page = Page(chromium, server)
    page.page.set_viewport_size({"width": 1280, "height": 800})
    page.wait_ready()
    page.page.click("#tab-kernels")
    # what the panel showed when it opened (the tests change the panel, in any order)
    page.opened = wait_result(page.page)
    page.opened_note = page.page.text_content("#kernel-image-note")
    yield page
    page.close()


def result(page) -> dict:
    """The last result of the page: the request it sent and the worker's raw output."""
    r = page.evaluate("""() => {
        const r = window.kernelsState.result;
        return r && {id: r.id, width: r.width, height: r.height, kernel: r.kernel,
                     pixels: Array.from(r.pixels), output: Array.from(r.output),
                     min: r.min, max: r.max, ms: r.ms};
    }""")
    h, w = r["height"], r["width"]
    r["pixels"] = np.asarray(r["pixels"], np.float32).reshape(h, w)
    r["output"] = np.asarray(r["output"], np.float32).reshape(h, w)
    return r


def wait_result(page, after_id: int = 0, kernel=None) -> dict:
    """The first result newer than request ``after_id`` (and with ``kernel``, when given)."""
    page.wait_for_function(
        """([after, kernel]) => {
            const s = window.kernelsState;
            if (s.error) return true;
            const r = s.result;
            return r && r.id > after && !s.busy &&
                (kernel === null || JSON.stringify(r.kernel) === JSON.stringify(kernel));
        }""", arg=[after_id, kernel], timeout=RESULT_TIMEOUT_MS)
    assert page.evaluate("window.kernelsState.error") is None, \
        page.evaluate("window.kernelsState.error")
    return result(page)


def last_id(page) -> int:
    return page.evaluate("window.kernelsState.result ? window.kernelsState.result.id : 0")


def assert_matches_numpy(r, what):
    want = correlate(r["pixels"], r["kernel"])
    err = float(np.abs(r["output"] - want).max())
    assert err <= PLAYGROUND_ATOL, f"{what}: max |page - numpy| {err:.3g} > {PLAYGROUND_ATOL}"
    assert r["min"] == pytest.approx(float(r["output"].min()))
    assert r["max"] == pytest.approx(float(r["output"].max()))
    return err


def png(grey: np.ndarray) -> bytes:
    """A greyscale 8-bit PNG of ``grey`` (uint8 [h, w]): signature, IHDR, IDAT, IEND."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    h, w = grey.shape
    raw = b"".join(b"\0" + grey[y].tobytes() for y in range(h))  # filter 0 per row
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_presets_and_a_typed_kernel_equal_numpy(app):
    page = app.page
    presets = page.evaluate("window.kernelsState.presets")
    r = app.opened  # the panel opens with Sobel x on the pattern
    assert (r["width"], r["height"]) == (192, 128)
    assert r["kernel"] == next(p["weights"] for p in presets if p["id"] == "sobel_x")
    assert app.opened_note.startswith("Pattern: 192×128")
    before = last_id(page)
    page.click("#kernel-pattern")  # back to the pattern, whatever an earlier test showed
    wait_result(page, before)
    page.fill("#kernel-w0", "0.125")  # a custom kernel: each preset below is a change
    errors = {}
    for p in presets:
        before = last_id(page)
        page.check(f"#kernel-preset-{p['id']}")
        r = wait_result(page, before, p["weights"])
        assert page.text_content("#kernel-about").startswith(p["label"])
        errors[p["id"]] = assert_matches_numpy(r, p["label"])
        if p["id"] == "sobel_x":
            screenshot(page, "kernels-sobel")
    typed = ["1", "0", "-1", "0.5", "2", "-0.5", "1/4", "-3", "1e-1"]
    for k, text in enumerate(typed):
        page.fill(f"#kernel-w{k}", text)
    assert page.is_checked("#kernel-preset-custom")
    before = last_id(page)
    page.click("#kernel-apply")
    want = [1, 0, -1, 0.5, 2, -0.5, 0.25, -3, 0.1]
    r = wait_result(page, before, want)
    errors["typed"] = assert_matches_numpy(r, "typed kernel")
    print(f"\n[kernels] max |page - numpy| per kernel: {errors}; last {r['ms']:.1f} ms")


def test_a_bad_weight_is_refused_inline(app):
    page = app.page
    before = last_id(page)
    page.fill("#kernel-w4", "abc")
    page.fill("#kernel-w8", "")
    assert page.is_visible("#kernel-errors")
    text = page.text_content("#kernel-errors")
    assert "middle centre: “abc” is not a number (e.g. -1, 0.25 or 1/16)" in text, text
    assert "bottom right: enter a number" in text, text
    assert page.get_attribute("#kernel-w4", "aria-invalid") == "true"
    assert page.get_attribute("#kernel-w0", "aria-invalid") is None
    assert page.is_disabled("#kernel-apply")
    page.press("#kernel-w4", "Enter")
    page.wait_for_timeout(300)
    assert last_id(page) == before and not page.evaluate("window.kernelsState.busy"), \
        "a request left with a bad weight"
    screenshot(page, "kernels-bad-weight")
    page.check("#kernel-preset-laplacian")  # a preset replaces every weight
    assert page.is_hidden("#kernel-errors")
    wait_result(page, before)


def test_an_mnist_digit(app, mnist_cache):
    from webgpu_trainer.host import data
    page = app.page
    images, labels = data.load(mnist_cache, "test")
    before = last_id(page)
    page.fill("#kernel-digit", "7")
    page.click("#kernel-digit-load")
    r = wait_result(page, before)
    assert (r["width"], r["height"]) == (28, 28)
    np.testing.assert_allclose(r["pixels"], images[7].reshape(28, 28) / 255.0, atol=1e-7)
    assert f"(a {labels[7]})" in page.text_content("#kernel-image-note")
    # from the worker's test split: the page fetched no shard itself (tests/test_page_testset.py)
    assert page.evaluate("performance.getEntriesByType('resource').filter(e => "
                         "e.name.includes('/data/mnist/test-')).length") == 0
    assert_matches_numpy(r, "laplacian on MNIST test image 7")
    page.fill("#kernel-digit", "10000")
    page.click("#kernel-digit-load")
    page.wait_for_selector("#kernel-image-error:not([hidden])")
    assert "from 0 to 9999" in page.text_content("#kernel-image-error")
    assert page.get_attribute("#kernel-digit", "aria-invalid") == "true"


def test_an_uploaded_image(app):
    page = app.page
    y, x = np.mgrid[0:40, 0:30]
    grey = ((x * 7 + y * 3) % 256).astype(np.uint8)
    before = last_id(page)
    page.set_input_files("#kernel-file", files=[
        {"name": "ramp.png", "mimeType": "image/png", "buffer": png(grey)}])
    r = wait_result(page, before)
    assert (r["width"], r["height"]) == (30, 40)
    np.testing.assert_allclose(r["pixels"], grey / 255.0, atol=1e-6)  # R = G = B: luma exact
    assert_matches_numpy(r, "uploaded 30x40 PNG")
    big = (np.mgrid[0:300, 0:450][1] % 256).astype(np.uint8)  # 450 x 300: scaled down
    before = r["id"]
    page.set_input_files("#kernel-file", files=[
        {"name": "big.png", "mimeType": "image/png", "buffer": png(big)}])
    r = wait_result(page, before)
    assert (r["width"], r["height"]) == (256, 171)
    assert "450×300 scaled down to 256×171 (at most 256×256)" in \
        page.text_content("#kernel-image-note")
    assert_matches_numpy(r, "uploaded 450x300 PNG, scaled")
    page.set_input_files("#kernel-file", files=[
        {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"not an image"}])
    page.wait_for_selector("#kernel-image-error:not([hidden])")
    assert "notes.txt: this browser cannot read it as an image" in \
        page.text_content("#kernel-image-error")
    assert result(page)["id"] == r["id"]


RUN = {"optimizer": "adam", "lr": 1e-3, "batch_size": 64, "epochs": 1, "seed": 0,
       "init": "scratch", "max_steps": 6, "val_images": 64}  # a short validation


def test_a_convolution_during_training(app, mnist_cache):
    """Asked for once the training loop runs: the output is right, it comes back while the run
    goes on, and the run's per-step losses equal the native trainer's for the same config (no
    convolution there) within CURVE_RTOL: the convolution did not disturb the run."""
    page = app.page
    before = last_id(page)
    page.click("#kernel-pattern")
    wait_result(page, before)
    app.configure(optimizer=RUN["optimizer"], lr=RUN["lr"], batch=RUN["batch_size"],
                  epochs=RUN["epochs"], seed=RUN["seed"], max_steps=RUN["max_steps"],
                  eval_images=64, scratch=True, val_images=RUN["val_images"])
    page.click("#start")
    page.wait_for_function("window.appState.status === 'Training…' || window.appState.error",
                           timeout=120_000)
    assert app.state()["phase"] == "training", app.diagnostics()
    before, t0 = last_id(page), time.monotonic()
    page.check("#kernel-preset-sharpen")
    r = wait_result(page, before)
    waited = time.monotonic() - t0
    assert app.state()["phase"] == "training", "the run ended before the convolution came back"
    assert_matches_numpy(r, "sharpen during training")
    page.wait_for_function("['done', 'error'].includes(window.appState.phase)",
                           timeout=120_000)
    st = app.state()
    assert st["phase"] == "done" and st["error"] is None, app.diagnostics()
    browser = {s["step"]: s["loss"] for s in page.evaluate("window.appState.steps")}
    native = native_losses(mnist_cache, RUN)
    steps = list(range(1, RUN["max_steps"] + 1))
    assert sorted(browser) == steps and sorted(native) == steps, (browser, native)
    rel = max(abs(browser[t] - native[t]) / abs(native[t]) for t in steps)
    assert rel <= CURVE_RTOL, f"losses moved by {rel:.2e}: browser {browser}, native {native}"
    print(f"\n[kernels] a convolution during training came back after {waited:.1f} s; "
          f"the run's losses match the native run within {rel:.1e}")
    page.set_viewport_size({"width": 390, "height": 844})
    page.click("#tab-kernels")
    page.locator(".kernels-views").scroll_into_view_if_needed()
    screenshot(page, "kernels-phone")
    page.set_viewport_size({"width": 1280, "height": 800})


def test_delete_an_uploaded_model(app, server_uploads):
    page = app.page
    uploads = server_uploads
    page.wait_for_function("window.appState.phase !== 'training'")
    assert page.is_hidden("#model-delete"), "a built-in model offers delete"
    page.set_input_files("#model-file", str(LENET))
    page.wait_for_function("document.querySelector('#model').value === 'lenet5-ts17'",
                           timeout=60_000)
    assert (uploads / "lenet5-ts17.onnx").is_file()
    # what the page asks about the chosen model (its summary, its memory after a 400 ms
    # debounce) is answered before the delete: an ask sent after it would get a 404
    page.wait_for_function("document.querySelector('#summary-card').dataset.model === "
                           "'lenet5-ts17' && window.appState.memoryEstimate?.model === "
                           "'lenet5-ts17'", timeout=60_000)
    assert page.is_visible("#model-delete-ask")
    page.click("#model-delete-ask")
    assert "Delete “lenet5-ts17”" in page.text_content("#model-delete-question")
    page.click("#model-delete-no")
    assert page.is_hidden("#model-delete-confirm") and (uploads / "lenet5-ts17.onnx").is_file()
    page.click("#model-delete-ask")
    screenshot(page, "model-delete-confirm")
    page.click("#model-delete-yes")
    page.wait_for_function("!Array.from(document.querySelectorAll('#model option'))"
                           ".some((o) => o.value === 'lenet5-ts17')", timeout=30_000)
    assert not (uploads / "lenet5-ts17.onnx").exists()
    assert page.input_value("#model") == "seednet" and page.is_hidden("#model-delete")
    errors = [c for c in app.console if c.startswith(("error:", "pageerror:"))]
    assert not errors, "console errors:\n" + "\n".join(errors)

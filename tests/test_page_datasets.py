"""The page follows the dataset (issue 18, "In the page"), in headless Chromium with WebGPU: a
small RGB dataset (3x8x8, classes red / green / blue, written into the server's data root in
the manifest format of DATASETS.md by tests/dataset_fixtures.py) is listed by the picker with
its shape, classes, counts and download size; with the MNIST model the page names both shapes
and Start stays disabled; Try it and the kernels playground show its test images in colour
(the canvas pixels equal the shard's) with the class names; a share link carries it. With a
matching tiny model a run's loss falls and Results, Try it and Inside the model use the class
names; every view is saved as a screenshot (test-artifacts/screenshots/datasets-*.png)."""

import numpy as np
import pytest
from dataset_fixtures import (RGB_CLASSES, colour_blobs, rgb_png, tiny_rgb_model,
                              write_image_dataset)
from e2e_fixtures import Page, run_training, screenshot

pytestmark = pytest.mark.e2e

SIDE, TRAIN, TEST = 8, 384, 96
RUN_TIMEOUT_S = 300

CANVAS = """(id) => {
  const c = document.getElementById(id);
  return [c.width, c.height, Array.from(c.getContext('2d').getImageData(0, 0, c.width,
          c.height).data)];
}"""


@pytest.fixture(scope="module")
def rgb(server_data_root, server_uploads):
    """The "blobs" dataset in the server's data root and "blobnet" (its model) in its uploads."""
    test = colour_blobs(TEST, SIDE, seed=1)
    write_image_dataset(server_data_root, "blobs", {"train": colour_blobs(TRAIN, SIDE),
                                                    "test": test}, RGB_CLASSES,
                        title="Colour blobs")
    tiny_rgb_model(server_uploads / "blobnet.onnx", SIDE, len(RGB_CLASSES))
    return {"test": test}


def rgba(image: np.ndarray) -> list:
    """uint8 [3, H, W] as the RGBA bytes a canvas holds."""
    c, h, w = image.shape
    out = np.full((h, w, 4), 255, np.uint8)
    out[..., :3] = image.transpose(1, 2, 0)
    return out.ravel().tolist()


def pick_dataset(page, name: str) -> None:
    if page.get_attribute("#settings-toggle", "aria-expanded") == "false":
        page.click("#settings-toggle")
    page.select_option("#dataset", name)


def test_picker_and_mismatch(rgb, app, server):
    app.wait_ready()
    page = app.page
    names = page.eval_on_selector_all("#dataset option", "os => os.map(o => o.value)")
    assert names == ["blobs", "mnist"] and page.input_value("#dataset") == "mnist"
    assert page.input_value("#model") == "seednet"
    assert page.text_content("#try-draw-hint") == "Draw a digit (0–9) in the box, or upload " \
                                                  "a photo:"
    pick_dataset(page, "blobs")
    # the header and Try it word the dataset: its title and class names, no digits
    assert page.text_content("#tagline") == ("Train a neural network on Colour blobs on your "
                                             "GPU, in the browser")
    assert page.text_content("#try-draw-hint") == (
        "Draw one of the 3 classes of Colour blobs (red, green, blue) in the box, or upload a "
        "photo (in colour):")
    hint = page.text_content("#dataset-hint")
    size = (TRAIN + TEST) * (3 * SIDE * SIDE + 1)  # 92,640 bytes
    assert hint == (f"3x8x8 images · classes: red, green, blue · {TRAIN} training + {TEST} test"
                    f" · {size / 1024:.1f} KB to download"), hint
    page.wait_for_selector("#dataset-fit:not([hidden])", timeout=10_000)
    fit = page.text_content("#dataset-fit")
    assert fit == ("Model seednet: input 'input' [N, 1, 28, 28] does not fit dataset blobs "
                   "(3x8x8 images, [N, 3, 8, 8]): choose a model made for 3x8x8 images, make "
                   "one in the Build tab, or choose another dataset."), fit
    assert page.text_content("#summary-fit") == fit
    assert page.is_disabled("#start") and page.get_attribute("#start", "title") == fit
    assert page.is_hidden("#dataset-warn")
    screenshot(page, "datasets-mismatch")
    # Try it: the dataset's test image in colour, its class names
    page.click("#tab-try")
    page.fill("#try-index", "5")
    page.dispatch_event("#try-index", "change")
    page.wait_for_function("document.getElementById('try-source').textContent"
                           ".startsWith('test image #5')")
    label = RGB_CLASSES[int(np.asarray(rgb["test"][1])[5])]
    assert page.text_content("#try-source") == f"test image #5, labelled {label}"
    w, h, data = page.evaluate(CANVAS, "try-input")
    assert (w, h) == (SIDE, SIDE) and data == rgba(rgb["test"][0][5])
    assert page.eval_on_selector_all("#try-probs .prob-digit", "s => s.map(e => e.textContent)") \
        == RGB_CLASSES
    screenshot(page, "datasets-tryit-untrained")
    # a photo: its centre square resized to 8x8 RGB (a uniform colour stays exactly that)
    photo = np.empty((30, 40, 3), np.uint8)
    photo[:] = (200, 30, 60)
    page.set_input_files("#try-photo-file", files=[{"name": "solid.png", "mimeType":
                                                     "image/png", "buffer": rgb_png(photo)}])
    page.wait_for_function("document.getElementById('try-source').textContent"
                           " === 'your photo solid.png'")
    assert page.evaluate("window.tryState.input") == [200] * 64 + [30] * 64 + [60] * 64
    # the kernels playground: the test image in colour, convolved as its grey levels
    page.click("#tab-kernels")
    page.fill("#kernel-digit", "7")
    page.click("#kernel-digit-load")
    page.wait_for_function("document.getElementById('kernel-image-note').textContent"
                           ".includes('#7')")
    label = RGB_CLASSES[int(np.asarray(rgb["test"][1])[7])]
    assert page.text_content("#kernel-image-note") == \
        f"Colour blobs test image #7 (a {label}): 8×8, RGB (convolved as its grey levels)"
    w, h, data = page.evaluate(CANVAS, "kernel-input")
    assert (w, h) == (SIDE, SIDE) and data == rgba(rgb["test"][0][7])
    screenshot(page, "datasets-kernels")
    # back to MNIST: the model fits again
    pick_dataset(page, "mnist")
    page.wait_for_selector("#dataset-fit", state="hidden")
    page.wait_for_function("!document.getElementById('start').disabled")
    assert app.console == [] or not any("pageerror" in c for c in app.console), app.console


def test_share_link_names_the_dataset(rgb, chromium, server):
    page = Page(chromium, f"{server}/?dataset=blobs")
    try:
        page.wait_ready()
        page.page.wait_for_function("window.appState.dataset?.name === 'blobs'")
        assert page.page.input_value("#dataset") == "blobs"
        page.page.click("#share")
        page.page.wait_for_function("document.getElementById('share-url').value !== ''")
        assert "dataset=blobs" in page.page.input_value("#share-url")
    finally:
        page.close()


def test_rgb_run_uses_class_names(rgb, app):
    app.wait_ready()
    page = app.page
    pick_dataset(page, "blobs")
    app.configure(model="blobnet", optimizer="adam", lr="0.01", batch=32, epochs=2,
                  eval_images=TEST, val_images=32)
    page.wait_for_function("!document.getElementById('start').disabled")
    run_training(app, 2 * (TRAIN - 32) // 32, RUN_TIMEOUT_S, "rgb")
    losses = page.evaluate("window.appState.steps.map(s => s.loss)")
    assert np.mean(losses[-3:]) < 0.5 * np.mean(losses[:3]), losses
    screenshot(page, "datasets-dashboard")
    page.click("#tab-results")
    heads = page.eval_on_selector_all("#confusion thead tr:last-child th[scope=col]:not(.corner)",
                                      "s => s.map(e => e.textContent)")
    assert heads == RGB_CLASSES, heads
    rows = page.eval_on_selector_all("#per-class tbody th", "s => s.map(e => e.textContent)")
    assert rows == RGB_CLASSES
    screenshot(page, "datasets-results")
    page.click("#tab-try")
    page.fill("#try-index", "3")
    page.dispatch_event("#try-index", "change")
    page.wait_for_function("window.tryState.probs && window.tryState.index === 3")
    probs = page.evaluate("window.tryState.probs")
    label = int(np.asarray(rgb["test"][1])[3])
    assert len(probs) == 3 and int(np.argmax(probs)) == label, probs
    best = page.text_content("#try-probs li.best .prob-digit")
    assert best == RGB_CLASSES[label]
    screenshot(page, "datasets-tryit")
    page.click("#tab-model")
    page.wait_for_function("window.viewsState.last")
    assert page.text_content("#views-label").startswith("label ")
    assert page.text_content("#views-label")[6:] in RGB_CLASSES
    screenshot(page, "datasets-inside")


def claimed(root, name: str, shape: list, train: int, test: int) -> None:
    """A manifest claiming ``train`` + ``test`` images of ``shape`` (no shards: the picker
    judges the size from the list, before anything is downloaded)."""
    import json
    per = int(np.prod(shape))
    splits = {s: {"count": n, "images": {"file": f"{s}-images.u8", "shape": [n, *shape],
                                         "dtype": "uint8", "bytes": n * per, "sha256": "0"},
                  "labels": {"file": f"{s}-labels.u8", "shape": [n], "dtype": "uint8",
                             "bytes": n, "sha256": "0"}}
              for s, n in (("train", train), ("test", test))}
    (root / name).mkdir()
    (root / name / "manifest.json").write_text(json.dumps(
        {"format": "webgpu-trainer/dataset@1", "name": name, "title": name.title(),
         "kind": "image", "sample_shape": shape, "classes": ["a", "b"], "mean": [0.5] * 3,
         "std": [0.25] * 3, "splits": splits}))


def test_too_large_is_said_before_download(rgb, app, server, server_data_root):
    """Before any download: more than the page holds is refused; a training split over the
    GPU's buffer limit (here lowered to 100 samples by ``?test=1&chunk=N``, as the worker's)
    fits in several buffers (the hint says how many); a sample over the limit does not fit."""
    app.wait_ready()
    page = app.page
    limits = page.evaluate("""async () => {
        const l = (await navigator.gpu.requestAdapter()).limits;
        return [l.maxBufferSize, l.maxStorageBufferBindingSize];
    }""")
    claimed(server_data_root, "huge", [3, 32, 32], 1000, 400_000)  # 1.15 GiB, mostly test
    claimed(server_data_root, "big", [3, 32, 32], 250, 10)
    claimed(server_data_root, "giant", [3, 400, 400], 2, 1)
    page.reload()
    app.wait_ready()
    pick_dataset(page, "huge")
    page.wait_for_selector("#dataset-warn:not([hidden])")
    assert page.text_content("#dataset-warn") == (
        "Huge is 1.1 GB: larger than this page can hold (1.0 GB); it will not fit the "
        "browser's memory.")
    pick_dataset(page, "big")  # the adapter's own limit: one buffer
    page.wait_for_selector("#dataset-warn", state="hidden")
    assert "GPU buffers" not in page.text_content("#dataset-hint") and min(limits) > 250 * 3072
    limit = 100 * 3072
    page.goto(f"{server}/?test=1&chunk={limit}")
    app.wait_ready()
    pick_dataset(page, "giant")
    page.wait_for_function("document.getElementById('dataset-warn').textContent"
                           ".startsWith('Giant')")
    assert page.text_content("#dataset-warn") == (
        "Giant's samples are 468.8 KB each: larger than this GPU's buffer limit (300.0 KB); "
        "it will not fit.")
    pick_dataset(page, "big")
    page.wait_for_function("document.getElementById('dataset-hint').textContent"
                           ".includes('GPU buffers')")
    assert page.is_hidden("#dataset-warn")
    assert page.text_content("#dataset-hint").endswith(
        " · uploaded as 3 GPU buffers (this GPU binds 300.0 KB at most)")
    screenshot(page, "datasets-too-large")


def random_images(n: int, classes: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8),
            (np.arange(n) % classes).astype(np.uint8))


def test_default_model_follows_the_dataset(rgb, app, server_data_root):
    for name, k in (("tiny10", 10), ("tiny100", 100)):
        if not (server_data_root / name).exists():
            write_image_dataset(server_data_root, name, {"train": random_images(k * 2, k, 0),
                                                         "test": random_images(k, k, 1)},
                                [f"class {i}" for i in range(k)])
    page = app.page
    page.reload()
    app.wait_ready()
    for name, model in (("tiny10", "seednet-rgb32"), ("tiny100", "seednet-rgb32-c100"),
                        ("mnist", "seednet"), ("blobs", "seednet")):  # blobs: none made for it
        pick_dataset(page, name)
        page.wait_for_function(f"document.getElementById('model').value === '{model}'")
        fits = name != "blobs"
        page.wait_for_selector("#dataset-fit", state="hidden" if fits else "visible")
    # a link naming the dataset gets its model
    page.goto(page.url.split("?")[0] + "?dataset=tiny100")
    app.wait_ready()
    page.wait_for_function("document.getElementById('model').value === 'seednet-rgb32-c100'")
    assert page.is_hidden("#dataset-fit")

"""Your own data in the page (issue 18, "In the page"), in headless Chromium with WebGPU: a zip
of PNGs (3 classes of solid colours, made here with Pillow) chosen in the drop zone ->
the preview (POST /api/datasets/scan) shows the classes, counts and thumbnails -> Prepare
(POST /api/datasets, 28x28 grey: SeedNet's shape) -> the picker holds it and SeedNet is chosen
-> a short run -> Try it names the right class of its test images. A zip with a ``../`` member
shows the server's own error and leaves the datasets as they were; a built-in name is refused
as the server words it. "Make your own classes": strokes drawn with the mouse for 2 classes ->
Prepare -> the picker holds the drawings' dataset. Screenshots: test-artifacts/screenshots/
upload-*.png."""

import io
import json
import urllib.error
import urllib.request
import zipfile

import numpy as np
import pytest
from e2e_fixtures import run_training, screenshot
from PIL import Image

pytestmark = pytest.mark.e2e

COLOURS = {"blue": (20, 40, 230), "green": (30, 200, 40), "red": (230, 30, 30)}
PER_CLASS, SIDE = 30, 16
RUN_TIMEOUT_S = 300
EXAMPLES = 5            # drawings per class of the own classes


def png(rgb, rng) -> bytes:
    """A SIDE x SIDE PNG of colour ``rgb`` with a little noise (Pillow)."""
    noise = rng.integers(-12, 13, (SIDE, SIDE, 3))
    pixels = np.clip(np.array(rgb) + noise, 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, "PNG")
    return out.getvalue()


def colour_zip() -> bytes:
    """colours/<class>/<i>.png, PER_CLASS images per class."""
    rng = np.random.default_rng(0)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, rgb in COLOURS.items():
            for i in range(PER_CLASS):
                z.writestr(f"colours/{name}/{i:02d}.png", png(rgb, rng))
    return out.getvalue()


def open_panel(page, box: str) -> None:
    if page.get_attribute("#settings-toggle", "aria-expanded") == "false":
        page.click("#settings-toggle")
    page.evaluate(f"document.getElementById('{box}').open = true")


def listed(server) -> dict:
    with urllib.request.urlopen(f"{server}/api/datasets", timeout=10) as r:
        return json.load(r)


def choose_zip(page, name: str, data: bytes) -> None:
    page.set_input_files("#dsu-file", files=[{"name": name, "mimeType": "application/zip",
                                              "buffer": data}])


def manifest(root, name: str) -> bytes:
    return (root / name / "manifest.json").read_bytes()


def test_zip_preview_prepare_train_try(app, server, server_data_root):
    """The flow above; first with a test share of 0.5 (45 training images, 4 held out for
    validation): the default batch 64 becomes 32, said next to the field, and a run of it
    starts; then the zip again under the same name asks before replacing it (cancel: the
    manifest is unchanged; yes: replaced)."""
    app.wait_ready()
    page = app.page
    open_panel(page, "dataset-own")
    choose_zip(page, "Colours.zip", colour_zip())
    page.wait_for_selector("#dsu-grid figure")
    captions = page.eval_on_selector_all("#dsu-grid figcaption", "s => s.map(e => e.textContent)")
    assert captions == [f"{n} {PER_CLASS}" for n in sorted(COLOURS)], captions
    page.wait_for_function("[...document.querySelectorAll('#dsu-grid img')]"
                           ".every(i => i.complete && i.naturalWidth === 16)")
    assert page.eval_on_selector_all("#dsu-grid .dsu-thumbs", "s => s.map(e => "
                                     "e.children.length)") == [4, 4, 4]
    assert page.text_content("#dsu-preview p") == "Colours.zip: 90 images in 3 classes"
    assert page.input_value("#dsu-name") == "colours"
    screenshot(page, "upload-preview")
    # a built-in name: the server's 400, word for word, next to the drop zone (no question)
    page.fill("#dsu-name", "mnist")
    page.click("#dsu-prepare")
    page.wait_for_selector("#dsu-error:not([hidden])")
    assert page.text_content("#dsu-error") == \
        "dataset name 'mnist' is a built-in dataset's: choose another name"
    assert page.is_hidden("#dsu-replace")
    page.fill("#dsu-name", "colours")
    page.select_option("#dsu-size", "28")
    page.select_option("#dsu-color", "grey")
    page.fill("#dsu-test", "0.5")
    page.click("#dsu-prepare")
    page.wait_for_function("window.appState.dataset?.name === 'colours'", timeout=60_000)
    assert page.input_value("#model") == "seednet"
    # 45 training images less 4 (a tenth) for validation: 41 -> a batch of 32
    assert page.input_value("#batch-size") == "32"
    assert page.text_content("#batch-size-fit") == (
        "Set to 32 to fit the 41 training images of colours (the default 64 needs more); "
        "type a batch size to choose your own.")
    page.wait_for_function("!document.getElementById('start').disabled")
    run_training(app, 1, RUN_TIMEOUT_S, "upload-fit")
    assert page.evaluate("window.appState.config.batch_size") == 32
    # the same zip again: its name is a listed dataset's, so Prepare asks first
    before = manifest(server_data_root, "colours")
    assert json.loads(before)["splits"]["test"]["count"] == 45
    choose_zip(page, "Colours.zip", colour_zip())
    page.wait_for_selector("#dsu-grid figure")
    assert page.input_value("#dsu-name") == "colours"
    page.fill("#dsu-test", "0.2")
    page.click("#dsu-prepare")
    page.wait_for_selector("#dsu-replace:not([hidden])")
    assert page.text_content("#dsu-replace-ask") == (
        "A dataset named “colours” exists. Replace it with Colours.zip? Its prepared images "
        "are overwritten; runs of it cannot be resumed.")
    page.click("#dsu-replace-no")
    assert page.is_hidden("#dsu-replace")
    assert page.text_content("#dsu-status") == "Kept colours: nothing was prepared."
    assert manifest(server_data_root, "colours") == before
    page.click("#dsu-prepare")
    page.click("#dsu-replace-yes")
    page.wait_for_function("document.getElementById('dsu-status').textContent"
                           ".startsWith('Prepared colours: 1x28x28, 3 classes, 72')",
                           timeout=60_000)
    assert json.loads(manifest(server_data_root, "colours"))["splits"]["test"]["count"] == 18
    # the user's file name (file=), never the server's temp file's
    assert json.loads(manifest(server_data_root, "colours"))["source"] == \
        "Colours.zip (90 images in 3 class folders, 28x28 grey)"
    assert page.is_hidden("#dsu-error")
    d = listed(server)["datasets"]
    ours = next(x for x in d if x["name"] == "colours")
    assert ours["sample_shape"] == [1, 28, 28] and ours["classes"] == sorted(COLOURS)
    assert ours["train"] + ours["test"] == 3 * PER_CLASS and ours["test"] == 18
    assert page.text_content("#dsu-status") == \
        ("Prepared colours: 1x28x28, 3 classes, 72 training + 18 test (90 images of 1 size "
         "center-cropped to a square and resized to 28x28; 90 RGB images converted to grey)")
    # 72 less 7 for validation: the default 64 fits again, nothing to say
    assert page.input_value("#batch-size") == "64" and page.is_hidden("#batch-size-fit")
    assert page.input_value("#dataset") == "colours" and page.input_value("#model") == "seednet"
    screenshot(page, "upload-prepared")
    app.configure(model="seednet", optimizer="adam", lr="0.01", batch=8, epochs=3,
                  eval_images=18, val_images=8)
    assert page.input_value("#batch-size") == "8"  # typed: the later fields do not change it
    page.wait_for_function("!document.getElementById('start').disabled")
    run_training(app, 3 * 64 // 8, RUN_TIMEOUT_S, "upload")
    page.click("#tab-try")
    for index in range(6):
        page.fill("#try-index", str(index))
        page.dispatch_event("#try-index", "change")
        page.wait_for_function(f"window.tryState.probs && window.tryState.index === {index}")
        source = page.text_content("#try-source")
        label = source.rsplit(" ", 1)[1]
        assert source == f"test image #{index}, labelled {label}" and label in COLOURS
        best = page.text_content("#try-probs li.best .prob-digit")
        assert best == label, (index, page.evaluate("window.tryState.probs"))
    screenshot(page, "upload-tryit")


def test_hostile_zip_shows_the_error_and_changes_nothing(app, server, server_data_root):
    app.wait_ready()
    page = app.page
    before = listed(server)
    files = sorted(str(p.relative_to(server_data_root)) for p in server_data_root.rglob("*"))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("cats/1.png", png((200, 10, 10), np.random.default_rng(1)))
        z.writestr("../evil.png", png((10, 10, 200), np.random.default_rng(2)))
    req = urllib.request.Request(f"{server}/api/datasets/scan", data=out.getvalue(),
                                 method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 400
    words = json.load(err.value)["error"]
    assert "../evil.png" in words
    open_panel(page, "dataset-own")
    choose_zip(page, "evil.zip", out.getvalue())
    page.wait_for_selector("#dsu-error:not([hidden])")
    assert page.text_content("#dsu-error") == words
    assert page.is_hidden("#dsu-form") and page.inner_text("#dsu-preview") == ""
    screenshot(page, "upload-hostile")
    assert listed(server) == before
    assert sorted(str(p.relative_to(server_data_root))
                  for p in server_data_root.rglob("*")) == files


def test_folder_and_csv(app, server, tmp_path):
    """A folder (zipped in the page) previews like its zip; a CSV previews as a table and
    prepares a table dataset the picker lists by its features."""
    app.wait_ready()
    page = app.page
    rng = np.random.default_rng(3)
    for name in ("cats", "dogs"):
        (tmp_path / "pets" / name).mkdir(parents=True)
        for i in range(3):
            (tmp_path / "pets" / name / f"{i}.png").write_bytes(png(COLOURS["red"], rng))
    (tmp_path / "pets" / "readme.txt").write_text("not an image")
    open_panel(page, "dataset-own")
    page.set_input_files("#dsu-folder", tmp_path / "pets")
    page.wait_for_selector("#dsu-grid figure")
    assert page.text_content("#dsu-preview p") == "pets.zip: 6 images in 2 classes"
    assert page.eval_on_selector_all("#dsu-grid figcaption", "s => s.map(e => e.textContent)") \
        == ["cats 3", "dogs 3"]
    assert page.eval_on_selector_all("#dsu-grid img", "s => s.length") == 6
    assert page.eval_on_selector_all(".dsu-refused", "s => s.map(e => e.textContent)") == \
        ["readme.txt: at the top level, not in a class folder"]
    assert page.input_value("#dsu-name") == "pets"
    rows = ["a,b,label"] + [f"{i % 2 + 0.1 * i},{i},{'yes' if i % 2 else 'no'}"
                            for i in range(10)]
    page.set_input_files("#dsu-file", files=[{"name": "Table 1.csv", "mimeType": "text/csv",
                                              "buffer": "\n".join(rows).encode()}])
    page.wait_for_function("document.querySelector('#dsu-preview p')?.textContent"
                           ".startsWith('Table 1.csv')")
    assert page.text_content("#dsu-preview p") == \
        "Table 1.csv: a table of 10 rows, 2 features, 2 classes"
    assert page.eval_on_selector_all("#dsu-grid figcaption", "s => s.map(e => e.textContent)") \
        == ["no 5", "yes 5"]
    assert page.input_value("#dsu-name") == "table-1" and page.is_disabled("#dsu-size")
    page.click("#dsu-prepare")
    page.wait_for_function("window.appState.dataset?.name === 'table-1'", timeout=60_000)
    option = page.eval_on_selector("#dataset", "s => s.selectedOptions[0].textContent")
    assert option == "table-1 (2 features, 2 classes)"
    screenshot(page, "upload-csv")


def stroke(page, box, points) -> None:
    """Draw a stroke through ``points`` (fractions of the canvas) with the mouse."""
    at = [(box["x"] + fx * box["width"], box["y"] + fy * box["height"]) for fx, fy in points]
    page.mouse.move(*at[0])
    page.mouse.down()
    for x, y in at[1:]:
        page.mouse.move(x, y, steps=4)
    page.mouse.up()


RING = [(0.5 + 0.3 * np.cos(t), 0.5 + 0.3 * np.sin(t)) for t in np.linspace(0, 6.3, 16)]


def draw(page, canvas: str, cls: str, k: int) -> None:
    """Draw example ``k`` of ``cls`` on ``canvas``: a ring or an X, a little moved per k."""
    box = page.locator(canvas).bounding_box()
    d = 0.04 * (k % 3 - 1)
    if cls == "circle":
        stroke(page, box, [(x + d, y - d) for x, y in RING])
    else:
        stroke(page, box, [(0.2 + d, 0.2), (0.8, 0.8 - d)])
        stroke(page, box, [(0.8 - d, 0.2), (0.2, 0.8 + d)])


def test_own_classes_by_drawing_then_try_it_live(app, server):
    app.wait_ready()
    page = app.page
    open_panel(page, "own-classes-box")
    assert page.eval_on_selector_all(".own-class-name", "s => s.map(e => e.value)") == \
        ["circle", "cross"]
    page.click("#own-prepare")
    assert page.text_content("#own-error") == \
        "Class circle has 0 of the 2 examples every class needs: add more."
    page.click("#own-add")  # a blank canvas is not an example
    assert page.text_content("#own-error") == "Draw something first."
    for k in range(EXAMPLES):
        for index, cls in enumerate(["circle", "cross"]):
            page.select_option("#own-target", str(index))
            draw(page, "#own-canvas", cls, k)
            if k == 0 and cls == "cross":
                screenshot(page, "upload-own-drawing")
            page.click("#own-add")
    page.wait_for_function("[...document.querySelectorAll('.own-count')].map(e => "
                           f"e.textContent).join() === '{EXAMPLES} examples,{EXAMPLES} "
                           "examples'", timeout=10_000)
    page.fill("#own-name", "doodles")
    page.click("#own-prepare")
    page.wait_for_function("window.appState.dataset?.name === 'doodles'", timeout=60_000)
    d = next(x for x in listed(server)["datasets"] if x["name"] == "doodles")
    assert d["classes"] == ["circle", "cross"] and d["sample_shape"] == [1, 28, 28]
    assert (d["train"], d["test"]) == (2 * EXAMPLES - 2, 2)
    assert page.input_value("#model") == "seednet" and page.is_hidden("#own-error")
    screenshot(page, "upload-own-prepared")
    # train briefly, then draw in Try it: the model reads the drawing as it read the examples
    app.configure(model="seednet", optimizer="adam", lr="0.01", batch=4, epochs=20,
                  eval_images=2, val_images=0)
    page.wait_for_function("!document.getElementById('start').disabled")
    run_training(app, 20 * (2 * EXAMPLES - 2) // 4, RUN_TIMEOUT_S, "own")
    page.click("#tab-try")
    for cls in ("circle", "cross"):
        page.click("#try-clear")
        draw(page, "#try-canvas", cls, 1)
        page.wait_for_timeout(600)  # past the drawing's debounce: the last request is asked
        asked = page.evaluate("window.tryState.requests")
        page.wait_for_function(f"window.tryState.answers >= {asked} && "
                               "window.tryState.inFlight === 0 && window.tryState.probs")
        assert page.text_content("#try-source") == "your drawing"
        probs = page.evaluate("window.tryState.probs")
        assert int(np.argmax(probs)) == ["circle", "cross"].index(cls), probs
        assert page.text_content("#try-probs li.best .prob-digit") == cls
        screenshot(page, f"upload-own-tryit-{cls}")


def test_own_classes_follow_the_model_then_all_its_outputs(app, server, server_data_root):
    """With seednet-rgb32 chosen the own classes are prepared as its input, 32x32 RGB (the
    drawing's white background and dark ink in every channel), the model stays, a short run
    trains on them; Try it shows all 10 of the model's outputs for the 2 classes: the class
    names, then "output 2".."output 9" (no class of the dataset), the bars summing to 100%."""
    app.wait_ready()
    page = app.page
    open_panel(page, "own-classes-box")
    page.select_option("#model", "seednet-rgb32")
    page.wait_for_function("document.getElementById('own-shape').textContent === 'Prepared as "
                           "32 × 32 RGB: the input of model seednet-rgb32.'", timeout=30_000)
    for k in range(3):
        for index, cls in enumerate(["circle", "cross"]):
            page.select_option("#own-target", str(index))
            draw(page, "#own-canvas", cls, k)
            page.click("#own-add")
    page.fill("#own-name", "doodles-rgb")
    page.click("#own-prepare")
    page.wait_for_function("window.appState.dataset?.name === 'doodles-rgb'", timeout=60_000)
    d = next(x for x in listed(server)["datasets"] if x["name"] == "doodles-rgb")
    assert d["classes"] == ["circle", "cross"] and d["sample_shape"] == [3, 32, 32]
    assert (d["train"], d["test"]) == (4, 2)
    assert page.input_value("#model") == "seednet-rgb32" and page.is_hidden("#dataset-fit")
    m = json.loads((server_data_root / "doodles-rgb" / "manifest.json").read_text())
    x = np.fromfile(server_data_root / "doodles-rgb" / m["splits"]["train"]["images"]["file"],
                    np.uint8).reshape(4, 3, 32, 32)
    assert (x[:, 0] == x[:, 1]).all() and (x[:, 1] == x[:, 2]).all()  # black ink on white
    assert (x == 255).mean() > 0.6 and (x < 100).any(axis=(1, 2, 3)).all()
    screenshot(page, "upload-own-rgb32")
    app.configure(model="seednet-rgb32", optimizer="adam", lr="0.01", batch=2, epochs=1,
                  max_steps=2, eval_images=2, val_images=0)
    page.wait_for_function("!document.getElementById('start').disabled")
    run_training(app, 2, RUN_TIMEOUT_S, "own-rgb32")
    page.click("#tab-try")
    page.click("#try-clear")
    draw(page, "#try-canvas", "circle", 1)
    page.wait_for_timeout(600)
    asked = page.evaluate("window.tryState.requests")
    page.wait_for_function(f"window.tryState.answers >= {asked} && "
                           "window.tryState.inFlight === 0 && window.tryState.probs")
    probs = page.evaluate("window.tryState.probs")
    names = page.eval_on_selector_all("#try-probs .prob-digit", "s => s.map(e => e.textContent)")
    assert names == ["circle", "cross"] + [f"output {i}" for i in range(2, 10)]
    shown = page.eval_on_selector_all("#try-probs .prob-val", "s => s.map(e => e.textContent)")
    assert shown == [f"{100 * p:.1f}%" for p in probs] and abs(sum(probs) - 1) < 1e-4
    assert page.text_content("#try-extra") == (
        "This model has 10 outputs and doodles-rgb 2 classes: outputs 2–9 are no class of it "
        "(training pushes them towards 0%).")
    screenshot(page, "upload-own-rgb32-tryit")

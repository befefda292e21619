"""Issue 19 item 5, "the page trains them": zoo models (tests/fixtures/zoo/, scripts/make_zoo.py)
uploaded through the page's model upload control as a user does, with a small generated
dataset that fits, trained for a few steps in headless Chromium (SwiftShader), downloaded as
.onnx from the Results tab and judged with onnxruntime against the engine.

Asserted:
- the ViT (TorchScript export): onnx.checker passes on the download; onnxruntime's
  log-softmax of the downloaded model on the run's test images equals the page's evaluation
  (window.lastRun.logits) within ORT_ATOL; the live views say the first layer is a Conv and
  show its kernels, and show the first encoder layer's attention map of the chosen test image:
  [65, 65] averaged over its 4 heads, every row summing to 1 within ROW_SUM_TOL, equal to the
  float64 numpy engine's Softmax activation on the run's weights within FWD_RTOL; the test
  image the views draw comes with the worker's answer (no request to the dataset's files);
- the LSTM (dynamo export): the views say in words that its first layer has no image view and
  that there are no feature maps (nothing blank), the run trains and the download agrees with
  onnxruntime as above;
- an MLP (784 -> 128 -> 10, tests/dataset_fixtures.py): the views say its first layer is a
  Linear and draw its first 64 weight rows as 28x28 images, each pixel the diverging colour
  of the trained weight (within 1 of 255);
- hostile: the LSTM (1x28x28) against the 3x32x32 dataset is refused before any work: the
  message names both shapes, Start is disabled, no run starts; the page's fit rule takes the
  input shapes the worker's does ([N, 28, 28], [N, 1, 784], [N, 784] for 1x28x28 data).
"""

import json
import urllib.request
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import FWD_RTOL, assert_close
from dataset_fixtures import mlp_model, write_image_dataset
from e2e_fixtures import Page, run_training, screenshot

from webgpu_trainer.cpu.engine import Engine, params_from_blob

pytestmark = pytest.mark.e2e

ZOO = Path(__file__).resolve().parent / "fixtures" / "zoo"
CLASSES = [str(i) for i in range(10)]
TRAIN, TEST, VAL = 24, 8, 8       # images per split (VAL of the training ones held out)
BATCH, STEPS = 8, 2
ORT_ATOL = 1e-5                   # log-probabilities: onnxruntime (CPU) vs the page's engine
ROW_SUM_TOL = 1e-4                # each attention row (a softmax) sums to 1
RUN_TIMEOUT_S = 240
WAIT_MS = 120_000


def _images(shape, seed):
    """``(x uint8 [TRAIN + TEST, *shape], y)``: noise with a class-dependent bright band."""
    rng = np.random.default_rng(seed)
    n = TRAIN + TEST
    y = (np.arange(n) % 10).astype(np.uint8)
    x = rng.integers(0, 80, (n, *shape)).astype(np.int64)
    for i in range(n):
        x[i, :, 2 * y[i]:2 * y[i] + 3, :] += 150
    return x.clip(0, 255).astype(np.uint8), y


@pytest.fixture(scope="module")
def datasets(server_data_root):
    """"rgb10" (3x32x32) and "rows28" (1x28x28), 10 classes each, in the server's data root."""
    out = {}
    for name, shape, seed in (("rgb10", (3, 32, 32), 1), ("rows28", (1, 28, 28), 2)):
        x, y = _images(shape, seed)
        out[name] = (write_image_dataset(server_data_root, name, {
            "train": (x[:TRAIN], y[:TRAIN]), "test": (x[TRAIN:], y[TRAIN:])}, CLASSES), x[TRAIN:])
    return out


@pytest.fixture(scope="module")
def app(chromium, server, datasets):
    app = Page(chromium, server)
    app.wait_ready()
    yield app
    app.close()


def _upload(app, stem, folder=ZOO):
    """Upload <folder>/<stem>.onnx through #model-file (once per server); chosen."""
    page = app.page
    if page.evaluate(f"!appState.models.some((m) => m.name === {stem!r})"):
        page.set_input_files("#model-file", str(folder / f"{stem}.onnx"))
    else:
        page.select_option("#model", stem)
        page.dispatch_event("#model", "change")
    page.wait_for_function(f"document.getElementById('model').value === {stem!r}",
                           timeout=WAIT_MS)


def _choose(app, dataset, model, folder=ZOO):
    page = app.page
    page.select_option("#dataset", dataset)  # may choose the dataset's default model
    _upload(app, model, folder)
    page.wait_for_function("appState.fit === null && !document.getElementById('start').disabled",
                           timeout=WAIT_MS)


def _train_and_download(app, dataset, model, tmp_path):
    """Train STEPS steps, then the Results tab's .onnx: ``(lastRun without buffers, logits
    [TEST, 10], weights bytes, downloaded model path)``."""
    page = app.page
    app.configure(model=None, optimizer="adam", lr="0.001", batch=BATCH, max_steps=STEPS,
                  eval_images=TEST, val_images=VAL, seed=0)
    run_training(app, STEPS, RUN_TIMEOUT_S, model)
    # after an earlier run the phase reads "done" until this run's start is under way
    page.wait_for_function(f"appState.phase === 'error' || (appState.phase === 'done' && "
                           f"window.lastRun && lastRun.model === {model!r})",
                           timeout=RUN_TIMEOUT_S * 1000)
    assert app.state()["phase"] == "done", app.diagnostics()
    last = page.evaluate("({steps: lastRun.steps, model: lastRun.model, eval: "
                         "lastRun.eval_images, verdict: lastRun.verdict})")
    logits = np.asarray(page.evaluate("Array.from(lastRun.logits)"), np.float64)
    weights = bytes(page.evaluate("Array.from(new Uint8Array(lastRun.weights))"))
    page.click("#tab-results")
    page.wait_for_function("!document.querySelector('#download').disabled", timeout=WAIT_MS)
    with page.expect_download(timeout=WAIT_MS) as dl:
        page.click("#download")
    path = tmp_path / f"{model}-trained.onnx"
    dl.value.save_as(path)
    assert last["model"] == model and last["steps"] == STEPS and last["eval"] == TEST, last
    return last, logits.reshape(TEST, -1), weights, path


def _views(app, cond):
    """Wait for the live views' answer about the finished run where ``cond`` (JS over ``l``,
    the answer) holds, or for an error answer (failing with it)."""
    page = app.page
    page.wait_for_function(f"(() => {{ const l = window.viewsState.last; return l && "
                           f"((l.error && !l.pending) || (l.step === {STEPS} && {cond})); }})()",
                           timeout=WAIT_MS)
    err = page.evaluate("window.viewsState.last.error")
    assert not err, f"{err}\n{app.diagnostics()}"


def _normalised(manifest, x):
    """The engine's input of uint8 images ``x``: ((v / 255) - mean[c]) / std[c] in float32."""
    mean = np.asarray(manifest["mean"]).reshape(1, -1, 1, 1)
    std = np.asarray(manifest["std"]).reshape(1, -1, 1, 1)
    return ((x / 255 - mean) / std).astype(np.float32)


def _judge_with_onnxruntime(path, x, logits, uploaded):
    """The download passes onnx.checker, was trained (weights moved from the upload's), and
    onnxruntime's log-softmax of it on ``x`` equals the page's evaluation ``logits``."""
    import onnxruntime as ort
    from onnx import numpy_helper
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    before = {t.name: numpy_helper.to_array(t) for t in onnx.load(uploaded).graph.initializer}
    moved = [t.name for t in model.graph.initializer if t.name in before
             and before[t.name].dtype == np.float32
             and not np.array_equal(numpy_helper.to_array(t), before[t.name])]
    assert moved, "no weight changed: the download is not the trained model"
    sess = ort.InferenceSession(path.read_bytes(), providers=["CPUExecutionProvider"])
    out = sess.run(None, {sess.get_inputs()[0].name: x})[0].astype(np.float64)
    want = out - out.max(1, keepdims=True)
    want -= np.log(np.exp(want).sum(1, keepdims=True))
    err = np.abs(want - logits).max()
    print(f"[zoo] {path.name}: onnxruntime vs page log-probabilities max |diff| {err:.2e}")
    assert err <= ORT_ATOL, (err, want[:2], logits[:2])


def _graph(server, model):
    with urllib.request.urlopen(f"{server}/api/models/{model}/graph.json") as r:
        return json.load(r)


def test_vit_trains_shows_its_attention_and_exports(app, datasets, server, tmp_path):
    manifest, test_x = datasets["rgb10"]
    page = app.page
    _choose(app, "rgb10", "vit-ts")
    last, logits, weights, path = _train_and_download(app, "rgb10", "vit-ts", tmp_path)
    x = _normalised(manifest, test_x)
    _judge_with_onnxruntime(path, x, logits, ZOO / "vit-ts.onnx")

    requests = []

    def seen(r):
        if "/data/rgb10/" in r.url:
            requests.append(r.url)
    page.on("request", seen)
    try:
        page.click("#tab-model")
        page.fill("#views-index", "3")
        page.dispatch_event("#views-index", "change")
        _views(app, "l.index === 3")
    finally:
        page.remove_listener("request", seen)
    got = page.evaluate("""() => { const l = window.viewsState.last;
        return {first: l.first, image: Array.from(l.image), shape: l.sample_shape,
                count: l.count, a: {...l.attention, values: Array.from(l.attention.values)},
                caption: document.getElementById('views-filters-caption').textContent,
                att: document.getElementById('views-attention-caption').textContent,
                hidden: document.getElementById('views-attention').hidden}; }""")
    assert requests == [], f"the views fetched the dataset again: {requests}"
    assert got["image"] == test_x[3].reshape(-1).tolist() and got["shape"] == [3, 32, 32]
    assert got["count"] == TEST
    assert got["first"]["text"] == "first layer is a Conv (embed.weight [64x3x4x4]): its " \
        "kernels shown", got["first"]
    assert got["caption"].startswith("First layer is a Conv (embed.weight [64x3x4x4]): its "
                                     "kernels shown, max |w| "), got["caption"]
    a = got["a"]
    assert (a["tokens"], a["heads"], a["grid"], a["first"]) == (65, 4, [8, 8], 1), a
    assert not got["hidden"] and "averaged over its 4 heads" in got["att"], got["att"]
    att = np.asarray(a["values"], np.float64).reshape(65, 65)
    assert np.abs(att.sum(1) - 1).max() <= ROW_SUM_TOL, att.sum(1)
    graph = _graph(server, "vit-ts")
    eng = Engine(graph, params_from_blob(graph, weights), np.float64)
    acts = eng.forward(x[3:4].astype(np.float64), train=False)[0]
    want = np.asarray(acts[a["name"]], np.float64).reshape(-1, 65, 65).mean(0)
    assert_close(att, want, FWD_RTOL, "attention map vs the float64 numpy engine")
    page.locator("#views").scroll_into_view_if_needed()
    screenshot(page, "zoo-vit-views")
    page.locator("#views-attention").scroll_into_view_if_needed()
    screenshot(page, "zoo-vit-attention")


def test_lstm_views_say_what_they_show_and_it_trains(app, datasets, tmp_path):
    manifest, test_x = datasets["rows28"]
    page = app.page
    _choose(app, "rows28", "lstm-dynamo")
    last, logits, _, path = _train_and_download(app, "rows28", "lstm-dynamo", tmp_path)
    _judge_with_onnxruntime(path, _normalised(manifest, test_x), logits,
                            ZOO / "lstm-dynamo.onnx")
    page.click("#tab-model")
    _views(app, "l.model === 'lstm-dynamo'")
    shown = page.evaluate("""() => ({
        caption: document.getElementById('views-filters-caption').textContent,
        canvas: document.getElementById('views-filters').hidden,
        maps: document.getElementById('views-maps').textContent,
        attention: document.getElementById('views-attention').hidden,
        image: document.getElementById('views-image').hidden})""")
    assert shown == {
        "caption": "First layer is an LSTM: no image view (its gate weights act on one time "
                   "step of 28 values at a time; node node_lstm__2)",
        "canvas": True, "maps": "No conv layer in this model: no feature maps to show.",
        "attention": True, "image": False}, shown
    page.locator("#views").scroll_into_view_if_needed()
    screenshot(page, "zoo-lstm-views")


def test_zoo_model_against_a_dataset_it_does_not_fit_is_refused(app, datasets):
    page = app.page
    page.click("#tab-dashboard")
    page.select_option("#dataset", "rgb10")
    _upload(app, "lstm-ts")
    page.wait_for_function("appState.fit !== null", timeout=WAIT_MS)
    steps = page.evaluate("appState.steps.length")
    assert page.text_content("#dataset-fit") == (
        "Model lstm-ts: input 'input' [N, 1, 28, 28] does not fit dataset rgb10 (3x32x32 "
        "images, [N, 3, 32, 32]): choose a model made for 3x32x32 images, make one in the "
        "Build tab, or choose another dataset.")
    assert page.is_disabled("#start")
    page.wait_for_function("window.appState.workerReady", timeout=WAIT_MS)
    assert page.text_content("#status") == ("Start waits: the model does not fit the dataset "
                                            "(the note under the dataset says why).")
    page.click("#start", force=True)  # a click anyway: nothing starts
    page.wait_for_timeout(500)
    assert page.evaluate("appState.steps.length") == steps
    assert app.state()["phase"] in ("ready", "done"), app.state()
    page.select_option("#dataset", "rows28")  # a dataset it fits: Start, and the status, back
    page.wait_for_function("appState.fit === null && !document.getElementById('start').disabled",
                           timeout=WAIT_MS)
    assert "Start waits" not in page.text_content("#status")
    # the page takes the input shapes the worker takes (engine/train/data.py check_fits)
    fits = page.evaluate("""async () => {
        const { fitProblem } = await import('/page/dataset.js');
        const d = appState.datasets.find((x) => x.name === 'rows28');
        const g = (shape) => ({ inputs: [{ name: 'x', shape: ['N', ...shape] }],
                                outputs: [{ shape: ['N', 10] }] });
        return [[28, 28], [1, 784], [784], [1, 28, 28], [32, 32]].map(
            (s) => fitProblem('m', g(s), d)); }""")
    assert fits[:4] == [None] * 4, fits
    assert fits[4] == "Model m: input 'x' [N, 32, 32] does not fit dataset rows28 (1x28x28 " \
        "images, [N, 1, 28, 28]): choose a model made for 1x28x28 images, make one in the " \
        "Build tab, or choose another dataset.", fits


def test_a_linear_first_layer_is_drawn_as_images(app, datasets, tmp_path):
    _, test_x = datasets["rows28"]
    page = app.page
    mlp_model(tmp_path / "mlp784.onnx")
    _choose(app, "rows28", "mlp784", tmp_path)
    _, _, weights, _ = _train_and_download(app, "rows28", "mlp784", tmp_path)
    page.click("#tab-model")
    _views(app, "l.model === 'mlp784'")
    got = page.evaluate("""() => { const c = document.getElementById('views-filters');
        const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        return {w: c.width, h: c.height, cols: +c.dataset.cols, hidden: c.hidden,
                px: Array.from(px), filters: window.viewsState.last.filters.shape,
                caption: document.getElementById('views-filters-caption').textContent}; }""")
    assert got["caption"].startswith("First layer is a Linear (fc1.weight): its 784->128 weight "
                                     "rows shown as 28x28 images (the first 64 of 128), max |w| ")
    assert got["filters"] == [64, 784] and not got["hidden"], got["filters"]
    assert (got["cols"], got["w"], got["h"]) == (8, 8 * 29 - 1, 8 * 29 - 1)
    w = np.frombuffer(weights, np.float32, 128 * 784, 0).reshape(128, 784)[:64]  # fc1.weight
    scale = np.abs(w).max()
    px = np.asarray(got["px"], np.int64).reshape(got["h"], got["w"], 4)[..., :3]
    for r in (0, 9, 63):
        y0, x0 = (r // 8) * 29, (r % 8) * 29
        v = w[r].reshape(28, 28)[..., None] / scale
        want = np.where(v >= 0, 255 + (np.array([178, 24, 43]) - 255) * np.abs(v),
                        255 + (np.array([33, 102, 172]) - 255) * np.abs(v))
        err = np.abs(px[y0:y0 + 28, x0:x0 + 28] - want).max()
        assert err <= 1, (r, err)
    page.locator("#views").scroll_into_view_if_needed()
    screenshot(page, "zoo-mlp-views")

"""Inside the model and Try it (issue 10, items 2 and 4) in headless Chromium with real WebGPU:
the summary's trainable parameter count equals PyTorch's for SeedNet; the live views (first conv
filters, feature maps of a chosen test image, weight / gradient norms) are asked for only while
their panel is visible, also during training, and show the model's values (the float64 numpy
engine on the run's weights is the reference); a digit drawn with the mouse gets 10
probabilities and is centred as MNIST; a test image picked by index gets the probabilities the
run's evaluation gave it. One short run (MAX_STEPS of Adam) is shared by the module's tests,
which only read its page; the page before any training is a page of its own."""

import json
import math
import time
import urllib.request

import numpy as np
import pytest
from conftest import FWD_RTOL, assert_close
from e2e_fixtures import Page, screenshot

from webgpu_trainer.cpu.engine import Engine, params_from_blob
from webgpu_trainer.engine.train.data import MNIST
from webgpu_trainer.host import data

pytestmark = pytest.mark.e2e

SEEDNET_TRAINABLE = 376_870   # sum(p.numel() for p in SeedNet().parameters() if p.requires_grad)
MAX_STEPS = 20
EVAL_IMAGES = 100
VAL_IMAGES = 64  # (the form's default, 5,000, costs the run's end ~20 s on SwiftShader)
TRAIN_TIMEOUT_S = 300
PROB_SUM_TOL = 1e-5           # the probabilities of one image sum to 1
PROB_TOL = 1e-4               # Try it's probabilities vs exp(the run's log-probabilities)
WAIT_MS = 60_000


def _graph(server) -> dict:
    with urllib.request.urlopen(f"{server}/api/models/seednet/graph.json") as r:
        return json.load(r)


def _tensor(page, t) -> np.ndarray:
    """The run's trained values of the graph tensor ``t`` (window.lastRun.weights)."""
    js = f"Array.from(new Float32Array(window.lastRun.weights, {t['offset']}, {t['nbytes'] // 4}))"
    return np.asarray(page.evaluate(js), np.float64).reshape(t["shape"])


@pytest.fixture(scope="module")
def app(chromium, server):
    app = Page(chromium, server)
    app.page.set_viewport_size({"width": 1280, "height": 800})
    app.wait_ready()
    app.page.wait_for_function("document.querySelector('#summary-totals')?.dataset.trainable",
                               timeout=WAIT_MS)
    yield app
    app.close()


@pytest.fixture(scope="module")
def trained(app):
    """The module's run; the live views are asked for only once their tab is shown, and they
    answer while the model trains."""
    page = app.page
    app.configure(max_steps=MAX_STEPS, eval_images=EVAL_IMAGES, val_images=VAL_IMAGES)
    page.click("#tab-dashboard")
    before = page.evaluate("window.viewsState.requests")  # the initial weights' views, if shown
    page.click("#start")
    page.wait_for_function("window.appState.status.startsWith('Training') || "
                           "window.appState.phase !== 'training'", timeout=TRAIN_TIMEOUT_S * 1000)
    hidden_requests = page.evaluate("window.viewsState.requests") - before
    page.click("#tab-model")
    page.wait_for_function("window.viewsState.last && !window.viewsState.last.error",
                           timeout=WAIT_MS)
    during = page.evaluate("({step: window.viewsState.last.step, phase: window.appState.phase, "
                           "ms: window.viewsState.last.ms, steps: window.appState.steps.length})")
    print("views during training", during)
    page.click("#tab-dashboard")
    t0 = time.monotonic()
    page.wait_for_function("['done', 'error'].includes(window.appState.phase)",
                           timeout=TRAIN_TIMEOUT_S * 1000)
    assert app.state()["phase"] == "done", app.diagnostics()
    return {"hidden_requests": hidden_requests, "during": during,
            "wait_s": time.monotonic() - t0}


def test_summary_counts_trainable_parameters_like_pytorch(app):
    page = app.page
    page.click("#tab-model")
    totals = page.eval_on_selector("#summary-totals", "e => ({...e.dataset, text: e.textContent})")
    assert int(totals["trainable"]) == SEEDNET_TRAINABLE, totals
    assert f"{SEEDNET_TRAINABLE:,} trainable parameters" in totals["text"], totals["text"]
    assert int(totals["buffers"]) > 0 and "buffers (BatchNorm" in totals["text"], totals
    rows = page.eval_on_selector_all(
        "#summary-table tbody tr", "rs => rs.map(r => [...r.cells].map(c => c.textContent))")
    convs = [r for r in rows if r[1] == "Conv"]
    assert len(convs) == 3 and all(r[2].startswith("[") and r[3] and r[4] for r in convs), convs
    assert sum(int(r[3].replace(",", "") or 0) for r in rows) == SEEDNET_TRAINABLE


@pytest.fixture()
def untrained(chromium, server):
    """A ready page of its own that has not trained (the module's ``app`` may have)."""
    app = Page(chromium, server)
    app.wait_ready()
    yield app
    app.close()


def _weights_bin(server) -> bytes:
    with urllib.request.urlopen(f"{server}/api/models/seednet/weights.bin") as r:
        return r.read()


def test_before_training_the_initial_weights_answer(untrained, server, mnist_cache):
    """Before any run (fine-tune: the model's own weights) Try it classifies a test image and
    the views show the filters, both said untrained; the probabilities equal a float64 numpy
    forward of seednet.onnx's weights; the norms have no gradient yet."""
    page = untrained.page
    page.check("#init-finetune")
    page.click("#tab-try")
    page.fill("#try-index", "5")
    page.dispatch_event("#try-index", "change")
    page.wait_for_function("window.tryState.probs && window.tryState.index === 5",
                           timeout=WAIT_MS)
    st = page.evaluate("window.tryState")
    assert st["untrained"] is True and st["step"] == 0, st
    assert "Untrained" in page.text_content("#try-status")
    assert "initial weights (untrained)" in page.text_content("#try-model")
    graph = _graph(server)
    blob = _weights_bin(server)
    images, _ = data.load(mnist_cache, "test")
    eng = Engine(graph, params_from_blob(graph, blob), np.float64)
    x = np.asarray(MNIST.table(), np.float32)[images[5]].astype(np.float64).reshape(1, 1, 28, 28)
    logits = eng.forward(x, train=False)[0][eng.output][0]
    want = np.exp(logits - logits.max())
    want /= want.sum()  # SeedNet ends in LogSoftmax: softmax of its input is the same
    assert np.abs(np.asarray(st["probs"]) - want).max() <= PROB_TOL, (st["probs"], want)
    page.click("#tab-model")
    page.wait_for_function("window.viewsState.last && !window.viewsState.last.error",
                           timeout=WAIT_MS)
    last = page.evaluate("({untrained: window.viewsState.last.untrained, "
                         "step: window.viewsState.last.step})")
    assert last == {"untrained": True, "step": 0}
    assert "Untrained" in page.text_content("#views-status")
    cells = page.eval_on_selector_all("#views-norms tbody tr td:nth-child(4)",
                                      "ts => ts.map(t => t.textContent)")
    assert cells and set(cells) == {"no step yet"}, cells
    page.check("#init-scratch")
    page.click("#tab-dashboard")


def test_views_follow_training_only_while_visible(trained):
    assert trained["hidden_requests"] == 0, "views asked for while their tab was hidden"
    assert trained["during"]["phase"] == "training" and trained["during"]["step"] < MAX_STEPS, \
        trained["during"]


def _shown(page, index=None):
    """Wait for views of the finished run (and test image ``index``); the answer."""
    cond = ("(() => { const l = window.viewsState.last; return l && !l.error && "
            "l.step === window.lastRun.steps" + (f" && l.index === {index}" if index is not None
                                                 else "") + "; })()")
    page.wait_for_function(cond, timeout=WAIT_MS)
    return page


def test_filters_show_the_first_conv_weights(app, trained, server):
    page = app.page
    page.click("#tab-model")
    _shown(page)
    t = next(t for t in _graph(server)["tensors"] if t["name"] == "conv1.weight")
    w = _tensor(page, t)
    cv = page.evaluate("""() => { const c = document.querySelector('#views-filters');
        const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        return {w: c.width, h: c.height, cols: +c.dataset.cols, px: Array.from(px)}; }""")
    px = np.asarray(cv["px"], np.int64).reshape(cv["h"], cv["w"], 4)
    out, _, kh, kw = w.shape
    scale = np.abs(w).max()
    for f in range(out):
        y0, x0 = (f // cv["cols"]) * (kh + 1), (f % cv["cols"]) * (kw + 1)
        for i in range(kh):
            for j in range(kw):
                v = w[f, 0, i, j] / scale  # diverging: white at 0, red +, blue -
                end = (178, 24, 43) if v >= 0 else (33, 102, 172)
                want = [255 + (c - 255) * abs(v) for c in end]
                got = px[y0 + i, x0 + j, :3]
                assert np.abs(got - want).max() <= 1, (f, i, j, got, want)
    assert len({tuple(p) for p in px[..., :3].reshape(-1, 3)}) > 10, "the filters look blank"
    page.locator("#views").scroll_into_view_if_needed()
    screenshot(page, "model-views-1280")


def test_feature_maps_of_a_chosen_test_image(app, trained, server, mnist_cache):
    page = app.page
    page.click("#tab-model")
    page.fill("#views-index", "7")
    page.dispatch_event("#views-index", "change")
    _shown(page, 7)
    last = page.evaluate("""() => { const l = window.viewsState.last;
        return {label: l.label, maps: l.maps.map(m => ({name: m.name, shape: m.shape,
                values: Array.from(m.values)}))}; }""")
    graph = _graph(server)
    blob = page.evaluate("Array.from(new Uint8Array(window.lastRun.weights))")
    images, labels = data.load(mnist_cache, "test")
    eng = Engine(graph, params_from_blob(graph, bytes(blob)), np.float64)
    x = np.asarray(MNIST.table(), np.float32)[images[7]].astype(np.float64).reshape(1, 1, 28, 28)
    vals = eng.forward(x, train=False)[0]
    assert last["label"] == labels[7]
    assert len(last["maps"]) == 3
    for m in last["maps"]:
        assert_close(np.asarray(m["values"]).reshape(m["shape"]), vals[m["name"]][0], FWD_RTOL,
                     f"feature maps {m['name']}")
    drawn = page.eval_on_selector_all("#views-maps canvas", "cs => cs.map(c => c.width * c.height)")
    assert len(drawn) == 3 and all(drawn)


def test_norms_are_finite_and_positive(app, trained, server):
    page = app.page
    page.click("#tab-model")
    _shown(page)
    norms = page.evaluate("window.viewsState.last.norms")
    graph = _graph(server)
    params = {t["name"]: t for t in graph["tensors"] if t["role"] == "param"}
    assert sorted(r["name"] for r in norms) == sorted(params)
    for r in norms:
        t = params[r["name"]]
        assert_close(r["weight"], np.linalg.norm(_tensor(page, t)), FWD_RTOL,
                     f"norm of {r['name']}")
        assert math.isfinite(r["grad"]) and r["grad"] >= 0, r
    assert sum(r["grad"] > 0 for r in norms) >= len(norms) - 1  # fc2.bias before a BatchNorm: ~0
    assert page.eval_on_selector_all("#views-norms tbody tr", "rs => rs.length") == len(norms)


def test_drawn_digit_is_centred_and_classified(app, trained):
    page = app.page
    page.click("#tab-try")
    box = page.locator("#try-canvas").bounding_box()
    x, y = box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.2
    page.mouse.move(x, y)
    page.mouse.down()
    for k in range(1, 13):  # a "1": one stroke down, slightly slanted
        page.mouse.move(x + k * 1.5, y + k * box["height"] * 0.05)
    page.mouse.up()
    page.wait_for_function("window.tryState.probs && window.tryState.source === 'drawn'",
                           timeout=WAIT_MS)
    st = page.evaluate("window.tryState")
    assert len(st["probs"]) == 10 and all(0 <= p <= 1 for p in st["probs"])
    assert abs(sum(st["probs"]) - 1) <= PROB_SUM_TOL, sum(st["probs"])
    img = np.asarray(st["input"], np.float64).reshape(28, 28)
    assert img.max() == 255 and img.min() == 0
    ys, xs = np.mgrid[0:28, 0:28] + 0.5
    com = ((img * xs).sum() / img.sum(), (img * ys).sum() / img.sum())
    assert abs(com[0] - 14) <= 1 and abs(com[1] - 14) <= 1, com
    rows, cols = np.nonzero(img)
    assert rows.max() - rows.min() + 1 <= 21 and cols.max() - cols.min() + 1 <= 21  # the 20x20 box
    screenshot(page, "try-it-drawn")


def test_picked_test_image_gets_the_runs_answer(app, trained):
    page = app.page
    page.click("#tab-try")
    for i in (3, 4):
        if i == 3:
            page.fill("#try-index", "3")
            page.dispatch_event("#try-index", "change")
        else:
            page.click("#try-next")
        try:
            page.wait_for_function(f"window.tryState.index === {i} && window.tryState.probs",
                                   timeout=WAIT_MS)
        except Exception:
            pytest.fail(f"no answer for test image {i}: tryState "
                        f"{page.evaluate('JSON.stringify({...window.tryState, input: null})')}, "
                        f"status {page.text_content('#try-status')!r}\n{app.diagnostics()}")
        probs = np.asarray(page.evaluate("window.tryState.probs"))
        logp = np.asarray(page.evaluate(
            f"Array.from(window.lastRun.logits.slice({i * 10}, {i * 10 + 10}))"))
        assert probs.argmax() == logp.argmax()
        assert np.abs(probs - np.exp(logp)).max() <= PROB_TOL, (probs, np.exp(logp))
    # the Results panel's mistakes open here
    page.click("#tab-dashboard")
    page.evaluate("document.dispatchEvent(new CustomEvent('pick-test-image', {detail: 9}))")
    page.wait_for_function("window.tryState.index === 9 && window.tryState.probs",
                           timeout=WAIT_MS)
    assert page.is_visible("#panel-try") and page.input_value("#try-index") == "9"
    screenshot(page, "try-it-test-image-1280")


def test_try_it_keeps_one_request_in_flight_and_shows_every_answer(app, trained):
    """Four test images picked at once: the first is asked, the other three wait for its
    answer, then only the latest is asked; both answers are shown (none dropped), the last one
    being the latest pick's; "updating…" shows while one is on its way."""
    page = app.page
    page.click("#tab-try")
    page.fill("#try-index", "20")
    page.dispatch_event("#try-index", "change")
    page.wait_for_function("window.tryState.index === 20 && window.tryState.probs && "
                           "window.tryState.answers === window.tryState.requests",
                           timeout=WAIT_MS)
    before = page.evaluate("""() => {
        const st = window.tryState;
        let index = st.index;
        window.shownIndices = [];
        Object.defineProperty(st, 'index', {configurable: true, get: () => index,
            set: (v) => { index = v; window.shownIndices.push(v); }});
        window.updatingShown = 0;
        const u = document.getElementById('try-updating');
        new MutationObserver(() => { if (u.classList.contains('on')) window.updatingShown++; })
            .observe(u, {attributes: true, attributeFilter: ['class']});
        const input = document.getElementById('try-index');
        for (const i of [21, 22, 23, 24]) {
            input.value = String(i);
            input.dispatchEvent(new Event('change'));
        }
        return {requests: st.requests, answers: st.answers};
    }""")
    page.wait_for_function("window.tryState.index === 24 && "
                           "window.tryState.answers === window.tryState.requests",
                           timeout=WAIT_MS)
    after = page.evaluate("({requests: window.tryState.requests, answers: window.tryState.answers,"
                          " shown: window.shownIndices, updating: window.updatingShown,"
                          " on: document.getElementById('try-updating').classList.contains('on')})")
    assert after["requests"] - before["requests"] == 2, (before, after)
    assert after["answers"] - before["answers"] == 2, (before, after)
    assert after["shown"] == [21, 24], after
    assert after["updating"] >= 1 and after["on"] is False, after


def test_phone_width(app, trained):
    page = app.page
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        page.click("#tab-try")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        page.locator("#try-probs").scroll_into_view_if_needed()
        screenshot(page, "try-it-390")
        page.click("#tab-model")
        _shown(page)
        page.locator("#views").scroll_into_view_if_needed()
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        screenshot(page, "model-views-390")
    finally:
        page.set_viewport_size({"width": 1280, "height": 800})

"""The Results tab in headless Chromium with real WebGPU (issue 10, item 3): after a short
SeedNet run the confusion matrix, the accuracy per digit and the most confidently wrong test
images equal what numpy computes from the run's own log-probabilities and the MNIST test
labels read independently; the wrong images are the test shard's pixels, and clicking one
opens Try it with that image in view; Stop says "evaluating" at once and shows "Evaluating N
test images… k/N", a second Stop cuts it short (the results cover the images evaluated); a
run at chance level says so instead of "finished".

Each run has a page of its own, so the tests pass alone and in any order: the main run and the
chance-level run are module fixtures whose tests only read their page; Stop has its own."""

import time

import numpy as np
import pytest
from e2e_fixtures import Page, run_training, screenshot

pytestmark = pytest.mark.e2e

RUN = dict(optimizer="adam", lr="0.002", batch=32, epochs=1, seed=0, max_steps=0,
           train_images=768, val_images=64, eval_images=202)  # 24 steps, one whole epoch;
# 202 test labels: not a whole number of 4-byte words (writeBuffer pads them)
RUN_STEPS = 24
RUN_TIMEOUT_S = 300
STOP_EVAL = 2048      # test images to evaluate after Stop (eight chunks of 256)
CHUNK = 256           # engine/train/gpu_engine.py EVAL_IMAGES (batch 32 divides it)
WRONG_SHOWN = 24      # web/evaluation.js

# The page's status lines, kept as they change (a MutationObserver on #status).
WATCH_STATUS = """() => {
  window.statusLog = [];
  const status = document.getElementById('status');
  new MutationObserver(() => window.statusLog.push(status.textContent))
    .observe(status, {childList: true, characterData: true, subtree: true});
}"""


def watched_page(chromium, server) -> Page:
    """A ready page of the app whose status lines are kept (``window.statusLog``)."""
    page = Page(chromium, server)
    page.wait_ready()
    page.page.evaluate(WATCH_STATUS)
    return page


@pytest.fixture(scope="module")
def app_page(chromium, server):
    """The main run's page (``finished``); its tests only read it."""
    page = watched_page(chromium, server)
    yield page
    page.close()


def _last_run(app) -> dict:
    return app.page.evaluate("""() => {
        const r = window.lastRun;
        return {logits: Array.from(r.logits), labels: Array.from(r.labels), verdict: r.verdict,
                reason: r.reason, test_acc: r.test_acc, eval_images: r.eval_images,
                val_acc: r.val_acc, stopped: r.stopped, steps: r.steps};
    }""")


@pytest.fixture(scope="module")
def finished(app_page):
    """The main run: 24 steps (one epoch of 768 images), 64 validation, 200 test images."""
    app_page.page.evaluate("window.statusLog.length = 0")
    app_page.configure(**RUN)
    t0 = time.monotonic()
    run_training(app_page, RUN_STEPS, RUN_TIMEOUT_S, "results")
    app_page.page.wait_for_selector("#evaluation[data-images='drawn']", state="attached",
                                    timeout=30_000)
    print(f"[results] run {time.monotonic() - t0:.1f} s")
    last = _last_run(app_page)
    last["statuses"] = app_page.page.evaluate("window.statusLog.slice()")
    return last


def _confusion(logits, labels, classes=10):
    pred = np.asarray(logits, np.float64).reshape(len(labels), classes).argmax(1)
    cm = np.zeros((classes, classes), np.int64)
    np.add.at(cm, (np.asarray(labels), pred), 1)
    return cm, pred


def test_confusion_matrix_equals_numpy(app_page, finished, mnist_cache):
    from webgpu_trainer.host import data
    page = app_page.page
    page.click("#tab-results")
    n = RUN["eval_images"]
    _, real = data.load(mnist_cache, "test")
    labels = np.asarray(finished["labels"], np.int64)
    np.testing.assert_array_equal(labels, real[:n])
    want, pred = _confusion(finished["logits"], labels)
    shown = np.array(page.evaluate("""() => [...document.querySelectorAll('#confusion tbody tr')]
        .map(tr => [...tr.querySelectorAll('td')].map(td => Number(td.textContent)))"""))
    assert shown.shape == (10, 10)
    assert shown.sum() == n == finished["eval_images"]
    np.testing.assert_array_equal(shown, want)
    assert np.trace(want) / n == pytest.approx(finished["test_acc"], abs=1e-9)
    heads = page.evaluate("""() => [...document.querySelectorAll('#confusion th[scope=col]')]
        .map(th => th.textContent.trim()).filter(Boolean)""")
    rows = page.evaluate("""() => [...document.querySelectorAll('#confusion th[scope=row]')]
        .map(th => th.textContent)""")
    assert heads[-10:] == [str(d) for d in range(10)] and rows == [str(d) for d in range(10)]
    page.set_viewport_size({"width": 1280, "height": 800})
    page.evaluate("document.getElementById('panel-results').scrollIntoView()")
    screenshot(page, "results-1280")
    page.evaluate("document.getElementById('wrong-title').scrollIntoView()")
    screenshot(page, "results-wrong-1280")
    page.set_viewport_size({"width": 390, "height": 844})
    page.evaluate("document.getElementById('panel-results').scrollIntoView()")
    screenshot(page, "results-390")
    page.evaluate("document.getElementById('confusion-title').scrollIntoView()")
    screenshot(page, "results-confusion-390")
    page.set_viewport_size({"width": 1280, "height": 1000})


def test_per_class_accuracy_equals_numpy(app_page, finished):
    want, _ = _confusion(finished["logits"], finished["labels"])
    rows = app_page.page.evaluate("""() => [...document.querySelectorAll('#per-class tbody tr')]
        .map(tr => [tr.querySelector('th').textContent,
                    ...[...tr.querySelectorAll('td.num')].map(td => td.textContent)])""")
    assert len(rows) == 10
    for digit, (name, counts, acc) in enumerate(rows):
        total = int(want[digit].sum())
        assert name == str(digit) and counts == f"{want[digit, digit]} / {total}"
        if not total:
            assert acc == "–"
            continue
        # one decimal (JavaScript's toFixed rounds halves up, Python's format to even)
        assert acc.endswith("%") and abs(float(acc[:-1]) - 100 * want[digit, digit] / total) \
            <= 0.05 + 1e-9, (digit, acc)


def test_wrong_grid_shows_the_most_confident_mistakes(app_page, finished, mnist_cache):
    from webgpu_trainer.host import data
    page = app_page.page
    logp = np.asarray(finished["logits"], np.float64).reshape(-1, 10)
    labels = np.asarray(finished["labels"], np.int64)
    pred = logp.argmax(1)
    wrong = np.flatnonzero(pred != labels)
    conf = np.exp(logp[wrong, pred[wrong]])
    order = wrong[np.lexsort((wrong, -conf))]  # most confident first, ties by index
    shown = page.evaluate("""() => [...document.querySelectorAll('#wrong-grid button.wrong')]
        .map(b => ({index: +b.dataset.index, pred: +b.dataset.pred, label: +b.dataset.label,
                    text: b.textContent}))""")
    assert len(shown) == min(WRONG_SHOWN, len(wrong)) > 0, "a 24-step model makes mistakes"
    assert [s["index"] for s in shown] == list(order[:WRONG_SHOWN])
    for s in shown:
        i = s["index"]
        assert s["label"] == labels[i] != s["pred"] == pred[i]
        pct = round(100 * float(np.exp(logp[i, pred[i]])))
        assert f"predicted {pred[i]} ({pct}%)" in s["text"] and f"true {labels[i]}" in s["text"]
    # the first image is the test shard's pixels, drawn 28x28
    images, _ = data.load(mnist_cache, "test")
    drawn = page.evaluate("""() => {
        const c = document.querySelector('#wrong-grid canvas');
        return Array.from(c.getContext('2d').getImageData(0, 0, 28, 28).data)
            .filter((_, k) => k % 4 === 0);
    }""")
    np.testing.assert_array_equal(np.asarray(drawn).reshape(28, 28), images[shown[0]["index"]])
    # clicking one offers it to the "Try it" tab, scrolled so that the image is in view
    page.set_viewport_size({"width": 1280, "height": 800})
    page.click("#tab-results")
    page.evaluate("document.getElementById('wrong-grid').scrollIntoView()")
    picked = page.evaluate("""() => new Promise(resolve => {
        document.addEventListener('pick-test-image', e => resolve(e.detail), {once: true});
        document.querySelector('#wrong-grid button.wrong').click();
    })""")
    assert picked == shown[0]["index"]
    page.wait_for_function(f"window.tryState.index === {picked} && window.tryState.probs",
                           timeout=60_000)
    page.wait_for_timeout(300)  # the scroll
    for sel in ("#try-canvas", "#try-input"):
        box = page.locator(sel).bounding_box()
        assert box and 0 <= box["y"] and box["y"] + box["height"] <= 800, (sel, box)
    screenshot(page, "results-wrong-picked-1280")
    page.set_viewport_size({"width": 1280, "height": 1000})


def test_evaluation_progress_and_verdict_shown(app_page, finished):
    statuses = finished["statuses"]
    n = RUN["eval_images"]
    for want in ("Evaluating 64 validation images… 64/64", f"Evaluating {n} test images… 0/{n}",
                 f"Evaluating {n} test images… {n}/{n}"):
        assert want in statuses, (want, statuses[-12:])
    page = app_page.page
    verdict = finished["verdict"]
    assert verdict in ("ok", "chance") and finished["reason"]
    assert page.get_attribute("#verdict", "data-verdict") == verdict
    assert page.text_content("#verdict-reason").lower().startswith(finished["reason"][:20].lower())
    assert finished["val_acc"] is not None  # the epoch ended: validated on the held-out images
    assert page.text_content("#val-acc") == f"{100 * finished['val_acc']:.2f}%"


@pytest.fixture(scope="module")
def chance(chromium, server):
    """One SGD step at lr 1e-6 from PyTorch's init: a model that guesses; its page (read-only
    for its tests) and ``_last_run``."""
    app = watched_page(chromium, server)
    app.configure(optimizer="sgd", lr="0.000001", batch=32, epochs=1, seed=0,
                  max_steps=1, eval_images=200, val_images=64, train_images=384)
    run_training(app, 1, RUN_TIMEOUT_S, "chance")
    yield app, _last_run(app)
    app.close()


def test_chance_level_run_says_so(chance):
    app_page, chance = chance
    page = app_page.page
    assert chance["test_acc"] <= 0.15 and chance["verdict"] == "chance", chance["reason"]
    page.click("#tab-results")
    assert page.text_content("#verdict-title") == "No better than chance"
    reason = page.text_content("#verdict-reason")
    assert "no better than guessing (10% for 10 classes)" in reason
    assert "after 1 step with sgd at learning rate 1e-06 the model has hardly trained" in reason
    assert page.text_content("#phase") == "chance level"
    assert "No better than chance" in page.text_content("#status")
    green = page.evaluate("getComputedStyle(document.body).getPropertyValue('--ok')")
    big = page.evaluate("getComputedStyle(document.getElementById('test-acc')).color")
    assert big != page.evaluate(f"(() => {{ const d = document.createElement('i'); "
                                f"d.style.color = '{green.strip()}'; document.body.append(d); "
                                f"const c = getComputedStyle(d).color; d.remove(); return c; }})()")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "results-chance-1280")
    page.set_viewport_size({"width": 1280, "height": 1000})


@pytest.fixture()
def stop_page(chromium, server):
    page = watched_page(chromium, server)
    yield page
    page.close()


def test_stop_shows_evaluating_and_a_second_stop_cuts_it_short(stop_page):
    """Stop: the pill says "evaluating" at once, the button "Stop evaluating"; the status and
    the bar count the test images; a second Stop ends the evaluation after its current chunk:
    the results cover a whole number of chunks, fewer than asked, and say how many."""
    app_page = stop_page
    page = app_page.page
    app_page.configure(optimizer="adam", lr="0.001", batch=32, epochs=1, seed=0, max_steps=0,
                       eval_images=STOP_EVAL, val_images=64, train_images=0)
    page.click("#start")
    page.wait_for_function("(window.appState.phase === 'training' && "
                           "window.appState.steps.length > 0) || window.appState.phase === "
                           "'error'", timeout=RUN_TIMEOUT_S * 1000)
    assert app_page.state()["phase"] == "training", app_page.diagnostics()
    t_stop = time.monotonic()
    page.click("#stop")
    at_once = page.evaluate("""() => [document.getElementById('phase').textContent,
        document.getElementById('stop').textContent, document.getElementById('stop').disabled,
        document.getElementById('status').textContent]""")
    assert at_once[:3] == ["evaluating", "Stop evaluating", False], at_once
    assert f"then evaluating {STOP_EVAL:,} test images" in at_once[3], at_once
    page.wait_for_function("document.getElementById('status').textContent.startsWith("
                           f"'Evaluating {STOP_EVAL:,} test images… ')", timeout=60_000)
    t_eval = time.monotonic() - t_stop
    assert page.evaluate("document.getElementById('progress').max") == STOP_EVAL
    assert page.text_content("#phase") == "evaluating"
    page.set_viewport_size({"width": 1280, "height": 800})
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "evaluating-after-stop-1280")
    page.set_viewport_size({"width": 1280, "height": 1000})
    page.click("#stop")  # Stop evaluating
    assert page.is_disabled("#stop")
    page.wait_for_function("['done', 'error'].includes(window.appState.phase)", timeout=120_000)
    last = _last_run(app_page)
    print(f"[results] Stop -> 'Evaluating…' {t_eval:.1f} s, -> done "
          f"{time.monotonic() - t_stop:.1f} s, {last['eval_images']} test images")
    assert last["stopped"] and last["verdict"] == "stopped", last["reason"]
    n = last["eval_images"]
    assert 0 < n < STOP_EVAL and n % CHUNK == 0, n
    assert len(last["labels"]) == n and len(last["logits"]) == 10 * n
    cm, _ = _confusion(last["logits"], last["labels"])
    assert np.trace(cm) / n == pytest.approx(last["test_acc"], abs=1e-9)
    assert page.text_content("#phase") == "stopped"
    assert page.text_content("#eval-count").replace(",", "").startswith(str(n))
    assert page.text_content("#verdict-title") == "Stopped early"

"""The dashboard and the run bar (issue 10, item 1) in headless Chromium with real WebGPU
(SwiftShader here), on one module-scoped page that trains SeedNet briefly:

- Start -> the charts receive points (read through window.charts, the uPlot instances): the
  loss chart's steps and losses are the worker's, its smoothed loss the debiased moving
  average computed by numpy, the learning-rate chart has StepLR's values of
  engine/train/schedulers.py for every step, the train-vs-validation chart gets three points inside
  the epoch (64 held-out images each) and the epoch's end, against steps;
- Pause: the phase reads "paused" and the step count stays put for PAUSED_S seconds; Resume:
  it continues; Stop: the pill says "evaluating" at once and the button becomes "Stop
  evaluating"; the run ends (``lastRun.stopped``); leaving the page asks first while a run
  trains (beforeunload), not after;
- the speed card: GFLOP/s = 3 x 2 x the summary's mult-adds x images/s / 1e9, ms/step =
  1000 x batch / images/s, the GPU memory covers the weights, gradients and uploaded data;
- the layout: at 1280x800 Start and the loss chart are on the first screen; at 390x844 the
  run bar is at most RUNBAR_PHONE_PX high, the settings are folded and the tabs and the loss
  chart come right after it;
- zoom: a drag on the loss chart zooms it and the learning-rate chart, double-click resets;
- the share link round trip, and a bad link's values marked inline (Start disabled);
- the (i) help of learning rate, batch, epochs, seed, head and mult-adds;
- the ETA's format (util.js duration).
Screenshots: dashboard-training-1280, dashboard-phone, dashboard-phone-settings,
dashboard-paused-1280, dashboard-stopping-1280, dashboard-stopped-1280 (the validation,
learning-rate and speed cards).
"""

import json
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest
from e2e_fixtures import Page, screenshot

from webgpu_trainer.engine.train import schedulers

pytestmark = pytest.mark.e2e

LR, STEP_SIZE, GAMMA, MOMENTUM = 0.05, 3, 0.5, 0.9
BATCH, TRAIN_IMAGES, EPOCHS, EVAL_IMAGES, SEED = 32, 512, 2, 64, 3
PER_EPOCH = TRAIN_IMAGES // BATCH
PAUSED_S = 3.0
WAIT_MS = 240_000
SMOOTHING = 0.9           # web/charts.js
VAL_POINTS = [4, 8, 12]   # 16 steps: validation after each quarter (train.VAL_POINTS 4)
VAL_PART = 64             # held-out images of such a point: max(VAL_MIN, 16 x 32 / 10)
RUNBAR_PHONE_PX = 72      # the run bar's height on a phone
TABS_PHONE_Y = 420        # the tabs start above this on a phone


def _state(pg):
    return pg.evaluate("""() => ({phase: appState.phase, error: appState.error,
        step: appState.progress ? appState.progress.step : 0, nsteps: appState.steps.length,
        epochs: appState.epochs.length})""")


def _wait(app, js, what, timeout_ms=WAIT_MS):
    try:
        app.page.wait_for_function(f"({js}) || window.appState.phase === 'error'",
                                   timeout=timeout_ms)
    except Exception:
        pytest.fail(f"{what}: not within {timeout_ms / 1000:.0f} s\n{app.diagnostics()}")
    st = _state(app.page)
    assert st["phase"] != "error", f"{what}: {st['error']}\n{app.diagnostics()}"
    return st


def _in_viewport(pg, selector):
    box = pg.locator(selector).bounding_box()
    vp = pg.viewport_size
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= vp["height"] \
        and box["width"] > 0


@pytest.fixture(scope="module")
def run(chromium, server):
    """One page: SGD + StepLR (per step) on 512 images, 2 epochs of 16 steps; paused, resumed
    and stopped after the first epoch. Yields what the tests check."""
    app = Page(chromium, server)
    pg = app.page
    pg.set_viewport_size({"width": 1280, "height": 800})
    out = {"app": app}
    try:
        app.wait_ready()
        out["layout_1280"] = {s: _in_viewport(pg, s) for s in ("#start", "#chart-steps")}
        app.configure(optimizer="sgd", lr=LR, batch=BATCH, epochs=EPOCHS, seed=SEED,
                      eval_images=EVAL_IMAGES)
        pg.fill("#momentum", str(MOMENTUM))
        pg.fill("#train-images", str(TRAIN_IMAGES))
        pg.select_option("#scheduler", "steplr")
        pg.fill("#step-size", str(STEP_SIZE))
        pg.fill("#gamma", str(GAMMA))
        pg.select_option("#interval", "step")
        pg.wait_for_function("!document.querySelector('#start').disabled", timeout=20_000)
        pg.evaluate("window.scrollTo(0, 0)")
        pg.click("#start")
        _wait(app, "window.appState.steps.length > 0", "first progress")
        out["unload_training"] = pg.evaluate(
            "!window.dispatchEvent(new Event('beforeunload', {cancelable: true}))")
        pg.evaluate("window.scrollTo(0, 0)")
        screenshot(pg, "dashboard-training-1280")
        pg.set_viewport_size({"width": 390, "height": 844})
        pg.evaluate("window.scrollTo(0, 0)")
        out["layout_phone"] = {s: _in_viewport(pg, s) for s in ("#start", "#progress", "#eta")}
        out["boxes_phone"] = {s: pg.locator(s).bounding_box() for s in
                              ("#progress-card", ".tabs", "#chart-steps", "#settings")}
        out["folded_phone"] = (pg.get_attribute("#settings-toggle", "aria-expanded"),
                               pg.is_visible("#lr"))
        screenshot(pg, "dashboard-phone")
        pg.click("#settings-toggle")
        out["unfolded_phone"] = (pg.get_attribute("#settings-toggle", "aria-expanded"),
                                 pg.is_visible("#lr"))
        pg.evaluate("window.scrollTo(0, 0)")
        screenshot(pg, "dashboard-phone-settings")
        pg.click("#settings-toggle")
        pg.set_viewport_size({"width": 1280, "height": 800})

        pg.click("#pause")
        st = _wait(app, "window.appState.phase === 'paused'", "paused")
        out["paused_label"] = pg.text_content("#phase")
        out["pause_button"] = pg.text_content("#pause")
        t0, before = time.monotonic(), st
        screenshot(pg, "dashboard-paused-1280")
        time.sleep(PAUSED_S)
        out["paused_steps"] = (before, _state(pg), time.monotonic() - t0)
        pg.click("#pause")  # Resume
        st = _wait(app, f"window.appState.phase === 'training' && "
                        f"window.appState.progress.step > {before['step']}", "resumed")
        out["resumed_step"] = st["step"]
        _wait(app, "window.appState.epochs.length >= 1", "first epoch")
        pg.click("#stop")
        out["after_stop"] = pg.evaluate("""() => ({pill: document.getElementById('phase')
            .textContent, stop: document.getElementById('stop').textContent,
            stopDisabled: document.getElementById('stop').disabled, phase: appState.phase})""")
        screenshot(pg, "dashboard-stopping-1280")
        _wait(app, "window.appState.phase === 'done'", "done after Stop")
        out["unload_done"] = pg.evaluate(
            "!window.dispatchEvent(new Event('beforeunload', {cancelable: true}))")
        out["last"] = pg.evaluate("({stopped: lastRun.stopped, steps: lastRun.steps})")
        pg.locator("#chart-val").scroll_into_view_if_needed()
        screenshot(pg, "dashboard-stopped-1280")
        pg.evaluate("window.scrollTo(0, 0)")
        out["charts"] = pg.evaluate("""() => Object.fromEntries(Object.entries(window.charts)
            .map(([k, u]) => [k, u.data.map((a) => Array.from(a))]))""")
        out["app_steps"] = pg.evaluate("window.appState.steps")
        out["app_epochs"] = pg.evaluate("window.appState.epochs")
        out["app_validations"] = pg.evaluate("window.appState.validations")
        out["progress"] = pg.evaluate("window.appState.progress")
        out["memory"] = pg.evaluate("window.appState.memoryBytes")
        out["stats"] = {i: pg.text_content(f"#stat-{i}") for i in
                        ("ips", "ms", "gflops", "memory", "adapter", "browser")}
        out["tables"] = {}
        for chart in ("chart-steps", "chart-val", "chart-lr"):
            pg.click(f"details.chart-table[data-chart={chart}] summary")
            # the details' toggle event (which fills the table) is dispatched as a task
            pg.wait_for_selector(f"details.chart-table[data-chart={chart}] tbody tr")
            out["tables"][chart] = pg.evaluate(f"""() => [...document.querySelectorAll(
                'details.chart-table[data-chart={chart}] tbody tr')].map(tr =>
                [...tr.cells].map(td => td.textContent))""")
        out["errors"] = [c for c in app.console if c.startswith(("error", "pageerror"))]
        yield out
    finally:
        app.close()


def test_charts_receive_the_run(run):
    charts, steps = run["charts"], run["app_steps"]
    n = len(steps)
    assert n >= PER_EPOCH + 1 and [s["step"] for s in steps] == list(range(1, n + 1))
    assert charts["steps"][0] == list(range(1, n + 1))
    assert charts["steps"][1] == pytest.approx([s["loss"] for s in steps], rel=1e-6)
    assert charts["steps"][3] == pytest.approx([100 * s["acc"] for s in steps], rel=1e-6)
    assert not run["errors"], run["errors"]


def test_smoothed_loss_is_the_debiased_moving_average(run):
    """ema_t = 0.9 ema_(t-1) + 0.1 loss_t from 0, shown as ema_t / (1 - 0.9^t) (numpy): the
    first point is the first loss itself, not a tenth of it."""
    losses = np.asarray([s["loss"] for s in run["app_steps"]], np.float64)
    ema, want = 0.0, []
    for t, loss in enumerate(losses, 1):
        ema = SMOOTHING * ema + (1 - SMOOTHING) * loss
        want.append(ema / (1 - SMOOTHING ** t))
    got = np.asarray(run["charts"]["steps"][2], np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-9)
    assert got[0] == pytest.approx(losses[0], rel=1e-12)
    # without the correction the third point would be 0.271 x the losses: far below them
    assert got[2] >= 0.9 * losses[:3].min()


def test_validation_points_inside_the_epoch(run):
    """Three points inside the first epoch (steps 4, 8, 12; the first 64 held-out images) and
    the epoch's end (step 16, all of them), charted against steps; each point's train side is
    the mean of the steps since the previous point."""
    vals, ep = run["app_validations"], run["app_epochs"][0]
    first = [v for v in vals if v["epoch"] == 1]
    assert [(v["step"], v["images"]) for v in first] == [(s, VAL_PART) for s in VAL_POINTS]
    assert ep["step"] == PER_EPOCH
    xs = run["charts"]["val"][0]
    want_x = sorted([v["step"] for v in vals] + [e["step"] for e in run["app_epochs"]])
    assert xs == want_x and xs[:4] == VAL_POINTS + [PER_EPOCH]
    assert run["charts"]["val"][2][3] == pytest.approx(ep["val_loss"], rel=1e-9)
    assert run["charts"]["val"][4][3] == pytest.approx(100 * ep["val_acc"], rel=1e-9)
    for k, v in enumerate(first):
        assert run["charts"]["val"][2][k] == pytest.approx(v["val_loss"], rel=1e-9)
        assert 0 < v["val_loss"] < 10 and 0 <= v["val_acc"] <= 1
    losses = {s["step"]: s["loss"] for s in run["app_steps"]}
    bounds = [0] + VAL_POINTS + [PER_EPOCH]
    for k in range(4):
        window = [losses[t] for t in range(bounds[k] + 1, bounds[k + 1] + 1)]
        assert run["charts"]["val"][1][k] == pytest.approx(np.mean(window), rel=1e-9)


def test_chart_data_tables(run):
    """Each chart has its data as a table (the charts' text alternative): the rows equal the
    page's metrics (loss to 4 decimals, learning rate to 4 significant digits)."""
    steps, tables = run["app_steps"], run["tables"]
    assert [int(r[0]) for r in tables["chart-steps"]] == [s["step"] for s in steps][-200:]
    assert [float(r[1]) for r in tables["chart-steps"]] == pytest.approx(
        [s["loss"] for s in steps][-200:], abs=5e-5)
    assert [float(r[1]) for r in tables["chart-lr"]] == pytest.approx(
        [s["lr"] for s in steps][-200:], rel=1e-3)
    rows = tables["chart-val"]
    assert len(rows) == len(run["app_epochs"]) + len(run["app_validations"])
    assert [int(r[0]) for r in rows[:4]] == VAL_POINTS + [PER_EPOCH]
    assert [r[2] for r in rows[:4]] == [str(VAL_PART)] * 3 + ["all"]
    assert float(rows[3][5]) == pytest.approx(run["app_epochs"][0]["val_loss"], abs=5e-5)


def test_learning_rate_curve_is_the_schedule(run):
    lr_steps, lrs = run["charts"]["lr"]
    n = len(run["app_steps"])
    want = schedulers.StepLR(LR, STEP_SIZE, GAMMA, interval="step")
    assert lr_steps == list(range(1, n + 1))
    assert lrs == pytest.approx([want.lr_at(t) for t in lr_steps], rel=1e-12)
    assert lrs[0] == LR and lrs[STEP_SIZE] == pytest.approx(LR * GAMMA)


def test_pause_resume_stop(run):
    before, after, waited = run["paused_steps"]
    assert waited >= PAUSED_S
    assert (after["phase"], after["step"], after["nsteps"]) == ("paused", before["step"],
                                                               before["nsteps"])
    assert run["paused_label"] == "paused" and run["pause_button"] == "Resume"
    assert run["resumed_step"] > before["step"]
    assert run["last"]["stopped"] is True
    # Stop: the pill says "evaluating" at once; a second press would cut the evaluation short
    assert run["after_stop"] == {"pill": "evaluating", "stop": "Stop evaluating",
                                 "stopDisabled": False, "phase": "training"}
    assert PER_EPOCH <= run["last"]["steps"] < EPOCHS * PER_EPOCH
    assert run["unload_training"] is True, "no leave-page warning while training"
    assert run["unload_done"] is False, "leave-page warning after the run"


def test_speed_and_machine(run, server):
    with urllib.request.urlopen(f"{server}/api/models/seednet/summary") as r:
        macs = json.load(r)["totals"]["macs"]
    ips = run["progress"]["images_per_s"]
    stats = run["stats"]
    assert float(stats["gflops"]) == pytest.approx(6 * macs * ips / 1e9, abs=0.006)
    assert float(stats["ms"]) == pytest.approx(1000 * BATCH / ips, abs=0.06)
    params = 376_870 + 40  # SeedNet's trainable parameters and a few BatchNorm buffers
    assert run["memory"] >= 2 * 4 * params + 10_000 * 785 + TRAIN_IMAGES * 785
    assert run["memory"] < 2 ** 30
    assert stats["memory"].endswith("MB"), stats
    assert stats["adapter"] not in ("", "–")
    assert "Chrom" in stats["browser"], stats


def test_layout_first_screen(run):
    assert run["layout_1280"] == {"#start": True, "#chart-steps": True}, run["layout_1280"]
    assert all(run["layout_phone"].values()), run["layout_phone"]
    boxes = run["boxes_phone"]
    assert boxes["#progress-card"]["height"] <= RUNBAR_PHONE_PX, boxes
    assert boxes[".tabs"]["y"] < TABS_PHONE_Y, boxes
    assert boxes["#settings"]["y"] < boxes[".tabs"]["y"] and boxes["#settings"]["height"] < 100
    assert boxes["#chart-steps"]["y"] + 100 < 844, boxes  # the loss chart on the first screen
    assert run["folded_phone"] == ("false", False) and run["unfolded_phone"] == ("true", True)


def test_zoom_and_reset(run):
    pg = run["app"].page
    pg.click("#tab-dashboard")
    over = pg.locator("#chart-steps .u-over").bounding_box()
    y = over["y"] + over["height"] / 2
    pg.mouse.move(over["x"] + over["width"] * 0.2, y)
    pg.mouse.down()
    pg.mouse.move(over["x"] + over["width"] * 0.5, y, steps=5)
    pg.mouse.up()
    scales = "['steps', 'lr'].map((k) => [charts[k].scales.x.min, charts[k].scales.x.max])"
    zoomed = pg.evaluate(scales)
    assert zoomed[0][0] > 0.5 and zoomed[0] == pytest.approx(zoomed[1]), zoomed
    assert pg.is_visible("#reset-zoom")
    pg.dblclick("#chart-steps .u-over")
    assert pg.evaluate(scales)[0][0] == 0
    assert not pg.is_visible("#reset-zoom")
    pg.mouse.move(over["x"] + over["width"] * 0.3, y)
    pg.mouse.down()
    pg.mouse.move(over["x"] + over["width"] * 0.6, y, steps=5)
    pg.mouse.up()
    pg.click("#reset-zoom")
    assert pg.evaluate(scales)[1][0] == 0


def test_eta_format(run):
    got = run["app"].page.evaluate("""async () => {
        const { duration } = await import('/lib/util.js');
        return [0, 42.4, 59.6, 187, 3599, 3600, 86399, 3 * 86400 + 4 * 3600 + 100,
                16781334 * 60, null, -1, NaN].map(duration);
    }""")
    assert got == ["0 s", "42 s", "1:00", "3:07", "59:59", "1:00:00", "23:59:59", "3 d 4 h",
                   "11653 d 16 h", "–", "–", "–"]


def test_help_on_the_controls(run, server):
    pg = run["app"].page
    with urllib.request.urlopen(f"{server}/api/config/schema") as r:
        helps = {f["id"]: f["help"] for f in json.load(r)["fields"]}
    for fid in ("lr", "batch-size", "epochs", "seed"):
        pg.click(f"#{fid}-field .tip")
        assert pg.is_visible(f"#{fid}-help")
        assert helps[fid] in pg.text_content(f"#{fid}-help")
        pg.keyboard.press("Escape")
        assert not pg.is_visible(f"#{fid}-help")
    pg.click("#tab-model")
    for sel, words in (("#train-head", "head"), ("#macs-label", "Multiply-adds")):
        tip = pg.locator(f"{sel} + .tip")
        tip.click()
        note = pg.locator(f"#{tip.get_attribute('aria-controls')}")
        assert note.is_visible() and words in note.text_content()
    pg.click("#tab-dashboard")


def test_share_link_round_trip(run, chromium, server):
    pg = run["app"].page
    pg.select_option("#scheduler", "none")
    pg.fill("#seed", "7")
    pg.fill("#lr", "0.02")
    pg.fill("#momentum", "0.8")
    pg.click("#share")
    link = pg.input_value("#share-url")
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(link).query))
    # what differs from the defaults, plus the model and the seed
    assert query == {"model": "seednet", "optimizer": "sgd", "lr": "0.02", "momentum": "0.8",
                     "seed": "7", "batch_size": str(BATCH), "epochs": str(EPOCHS),
                     "train_images": str(TRAIN_IMAGES), "eval_images": str(EVAL_IMAGES)}, query
    want = pg.evaluate("window.readFormForTests()")
    other = chromium.new_context(viewport={"width": 1280, "height": 800})
    try:
        p2 = other.new_page()
        p2.goto(link)
        p2.wait_for_function("window.appState && document.querySelector('#lr') && "
                             "document.querySelector('#model').value === 'seednet'",
                             timeout=60_000)
        got = p2.evaluate("window.readFormForTests()")
        assert got == want
        # a bad link: every problem marked, nothing dropped silently, Start disabled
        p2.goto(f"{server}/?lr=abc&optimizer=lion&bogus=1&epochs=0")
        p2.wait_for_function("document.querySelector('#lr') && "
                             "document.querySelector('#lr').getAttribute('aria-invalid')",
                             timeout=60_000)
        p2.wait_for_function("document.querySelector('#epochs').getAttribute('aria-invalid')",
                             timeout=10_000)
        assert "abc" in p2.text_content("#lr-error")
        assert "lion" in p2.text_content("#optimizer-error")
        assert "bogus" in p2.text_content("#config-errors")
        assert p2.is_disabled("#start")
        p2.fill("#lr", "0.01")
        p2.wait_for_function("!document.querySelector('#lr').hasAttribute('aria-invalid')",
                             timeout=10_000)
    finally:
        other.close()


def test_kernel_profile_on_demand(run):
    """Issue 12: "Profile the kernels" times every dispatch of one training step of the current
    settings; the table lists the slowest, sorted, with shares that add up over all kernels."""
    pg = run["app"].page
    pg.click("#tab-dashboard")
    pg.click("#profile-run")
    pg.wait_for_function("window.appState.profile && !window.appState.busy.profiling",
                         timeout=WAIT_MS)
    prof = pg.evaluate("window.appState.profile")
    rows = prof["rows"]
    assert len(rows) > 20 and all(r["ms"] > 0 for r in rows)
    assert [r["ms"] for r in rows] == sorted((r["ms"] for r in rows), reverse=True)
    assert prof["total"] == pytest.approx(sum(r["ms"] for r in rows), rel=1e-9)
    phases = {r["phase"] for r in rows}
    assert {"forward", "backward", "optimizer"} <= phases
    shown = pg.locator("#profile-out tbody tr").count()
    assert shown == min(15, len(rows))
    first = pg.locator("#profile-out tbody tr").first.locator("td").all_text_contents()
    assert first[1] == rows[0]["kernel"]
    assert not pg.is_visible("#error")

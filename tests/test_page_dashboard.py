"""The dashboard and the run bar (issue 10, item 1) in headless Chromium with real WebGPU
(SwiftShader here), on one module-scoped page that trains SeedNet briefly:

- Start -> the charts receive points (read through window.charts, the uPlot instances): the
  loss chart's steps and losses are the worker's, the learning-rate chart has StepLR's values
  of engine/schedulers.py for every step, the train-vs-validation chart gets the epoch's point;
- Pause: the phase reads "paused" and the step count stays put for PAUSED_S seconds; Resume:
  it continues; Stop ends the run (``lastRun.stopped``); leaving the page asks first while a
  run trains (beforeunload), not after;
- the speed card: GFLOP/s = 3 x 2 x the summary's mult-adds x images/s / 1e9, ms/step =
  1000 x batch / images/s, the GPU memory covers the weights, gradients and uploaded data;
- the layout: at 1280x800 Start and the loss chart are on the first screen; at 390x844 Start
  and the progress bar are;
- zoom: a drag on the loss chart zooms it and the learning-rate chart, double-click resets;
- the share link round trip, and a bad link's values marked inline (Start disabled);
- the (i) help of learning rate, batch, epochs, seed, head and mult-adds;
- the ETA's format (util.js duration).
Screenshots: dashboard-training-1280, dashboard-phone, dashboard-paused-1280,
dashboard-stopped-1280 (the epoch, learning-rate and speed cards).
"""

import json
import time
import urllib.parse
import urllib.request

import pytest
from e2e_fixtures import Page, screenshot

from webgpu_trainer.engine import schedulers

pytestmark = pytest.mark.e2e

LR, STEP_SIZE, GAMMA, MOMENTUM = 0.05, 3, 0.5, 0.9
BATCH, TRAIN_IMAGES, EPOCHS, EVAL_IMAGES, SEED = 32, 512, 2, 64, 3
PER_EPOCH = TRAIN_IMAGES // BATCH
PAUSED_S = 3.0
WAIT_MS = 240_000


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
        screenshot(pg, "dashboard-phone")
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
        _wait(app, "window.appState.phase === 'done'", "done after Stop")
        out["unload_done"] = pg.evaluate(
            "!window.dispatchEvent(new Event('beforeunload', {cancelable: true}))")
        out["last"] = pg.evaluate("({stopped: lastRun.stopped, steps: lastRun.steps})")
        pg.locator("#chart-epochs").scroll_into_view_if_needed()
        screenshot(pg, "dashboard-stopped-1280")
        pg.evaluate("window.scrollTo(0, 0)")
        out["charts"] = pg.evaluate("""() => Object.fromEntries(Object.entries(window.charts)
            .map(([k, u]) => [k, u.data.map((a) => Array.from(a))]))""")
        out["app_steps"] = pg.evaluate("window.appState.steps")
        out["app_epochs"] = pg.evaluate("window.appState.epochs")
        out["progress"] = pg.evaluate("window.appState.progress")
        out["memory"] = pg.evaluate("window.appState.memoryBytes")
        out["stats"] = {i: pg.text_content(f"#stat-{i}") for i in
                        ("ips", "ms", "gflops", "memory", "adapter", "browser")}
        out["tables"] = {}
        for chart in ("chart-steps", "chart-epochs", "chart-lr"):
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
    # the smoothed loss: the exponential moving average of charts.js (0.9)
    ema = []
    for s in steps:
        ema.append(s["loss"] if not ema else 0.9 * ema[-1] + 0.1 * s["loss"])
    assert charts["steps"][2] == pytest.approx(ema, rel=1e-6)
    # the first epoch's train and validation point
    ep = run["app_epochs"][0]
    assert charts["epochs"][0][0] == 1
    assert charts["epochs"][1][0] == pytest.approx(ep["train_loss"], rel=1e-6)
    assert charts["epochs"][2][0] == pytest.approx(ep["val_loss"], rel=1e-6)
    assert charts["epochs"][4][0] == pytest.approx(100 * ep["val_acc"], rel=1e-6)
    assert not run["errors"], run["errors"]


def test_chart_data_tables(run):
    """Each chart has its data as a table (the charts' text alternative): the rows equal the
    page's metrics (loss to 4 decimals, learning rate to 4 significant digits)."""
    steps, tables = run["app_steps"], run["tables"]
    assert [int(r[0]) for r in tables["chart-steps"]] == [s["step"] for s in steps][-200:]
    assert [float(r[1]) for r in tables["chart-steps"]] == pytest.approx(
        [s["loss"] for s in steps][-200:], abs=5e-5)
    assert [float(r[1]) for r in tables["chart-lr"]] == pytest.approx(
        [s["lr"] for s in steps][-200:], rel=1e-3)
    epochs = tables["chart-epochs"]
    assert len(epochs) == len(run["app_epochs"]) and int(epochs[0][0]) == 1
    assert float(epochs[0][3]) == pytest.approx(run["app_epochs"][0]["val_loss"], abs=5e-5)


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
        const { duration } = await import('/util.js');
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

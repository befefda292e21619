"""The page's GPU self-check (web/selfcheck.js, worker/main.py's ``_selfcheck``): before its first
training run the worker checks every op family and optimizer on the browser's adapter
(SwiftShader here) against the committed float64 references, and the page warns, naming the
wrong ops, when some check fails (training stays allowed)."""

import time

import pytest

pytestmark = pytest.mark.e2e

REPORT = []


def test_selfcheck_runs_before_the_first_run_and_passes(app):
    app.wait_ready()
    app.configure(max_steps=1, eval_images=64, val_images=64)
    page = app.page
    page.click("#start")
    t0 = time.monotonic()
    page.wait_for_function("window.selfCheck || window.appState.phase === 'error'",
                           timeout=180_000)
    check = page.evaluate("window.selfCheck")
    assert check, f"no selfcheck message\n{app.diagnostics()}"
    assert app.state()["nsteps"] == 0, "the self-check runs before the first training step"
    wrong = check["wrong"]
    assert check["ok"] and not wrong, f"self-check WRONG on {check['adapter']}: {wrong}"
    assert len(check["rows"]) >= 30 and all(r["ok"] for r in check["rows"])
    assert page.is_hidden("#selfcheck-warning")
    worst = max(check["rows"], key=lambda r: r["error"])
    REPORT.append(f"browser self-check: {len(check['rows'])} checks in {check['seconds']:.1f} s "
                  f"in the worker ({time.monotonic() - t0:.1f} s after Start), worst "
                  f"{worst['case']} {worst['check']} {worst['error']:.1e}")
    print(REPORT[-1])
    page.wait_for_function("window.appState.phase === 'done' || window.appState.phase === "
                           "'error'", timeout=180_000)
    assert app.state()["phase"] == "done", app.diagnostics()


def test_warning_names_the_wrong_ops(app):
    app.wait_ready()
    app.page.evaluate("""async () => {
        const m = await import("/page/selfcheck.js");
        m.showSelfCheck({ok: false, rows: [], seconds: 1.0, adapter: {},
                         wrong: [
                           "layout/chain_slice_steps backward (Conv, Slice, Reshape, Gemm)"]});
    }""")
    banner = app.page.locator("#selfcheck-warning")
    assert banner.is_visible()
    assert "layout/chain_slice_steps backward (Conv, Slice" in banner.inner_text()
    assert app.page.is_enabled("#start"), "training stays allowed"

"""Resume after the run's model was deleted on the server after the page loaded (headless
Chromium on SwiftShader, the real server). Was: the page still listed the model, the worker's
load got a 404 and the page said "RuntimeError: model: HTTP 404 from /api/models/...". Now
Resume asks the server first and says "Cannot resume: the model X is no longer on the server;
the checkpoint is kept." (the picker drops the model), and when the model goes between that
check and the worker's load, the worker's 404 (``worker/load.py`` ModelGone) is said the same
way. Either way the phase is back to ready, the resume banner is offered again and the
IndexedDB checkpoint is the same record, weights bytes and all."""

import httpx
import pytest
from e2e_fixtures import REPO
from test_page_storage import configure, open_page, start, wait, wait_checkpoint

pytestmark = pytest.mark.e2e

EPOCHS = 12  # of 4 steps: the reload lands inside the run
# the stored record, its weights and optimizer state as SHA-256 (crypto.subtle)
FINGERPRINT = """async () => {
  const m = await import("/page/checkpoints.js");
  const r = await m.stored();
  if (!r) return null;
  const hex = async (b) => [...new Uint8Array(await crypto.subtle.digest("SHA-256", b))]
    .map((x) => x.toString(16).padStart(2, "0")).join("");
  const bytes = (v) => v instanceof ArrayBuffer ? v : new Uint8Array(v).buffer;
  return { model: r.model, epoch: r.epoch, step: r.step, savedAt: r.savedAt,
    finished: r.finished ?? false, weights: await hex(bytes(r.weights)),
    optimizer: JSON.stringify(r.optimizer, (k, v) => v instanceof ArrayBuffer ||
      ArrayBuffer.isView(v) ? `${v.byteLength} bytes` : v),
    metrics: JSON.stringify(r.metrics) };
}"""


def _models(server) -> list:
    return [m["name"] for m in httpx.get(f"{server}/api/models", timeout=30).json()]


def _stopped_run_of_an_upload(chromium, server, seed):
    """A page (reloaded) offering to resume a run of an uploaded copy of SeedNet that the
    server still has; returns (app, model name, the checkpoint's fingerprint)."""
    data = (REPO / "models" / "seednet.onnx").read_bytes()
    r = httpx.post(f"{server}/api/models/upload?filename=gone-{seed}.onnx", content=data,
                   headers={"Origin": server}, timeout=60)
    assert r.status_code == 200, r.text
    name = r.json()["name"]
    app = open_page(chromium, server)
    configure(app, epochs=EPOCHS, seed=seed, model=name)
    start(app)
    wait_checkpoint(app, 1)
    app.page.reload()  # the run stops; its last checkpoint is kept
    app.wait_ready()
    app.page.wait_for_selector("#resume-banner", state="visible", timeout=30_000)
    before = app.page.evaluate(FINGERPRINT)
    assert before["model"] == name and before["epoch"] >= 1 and len(before["weights"]) == 64
    assert name in [o for o in app.page.eval_on_selector_all(
        "#model option", "os => os.map((o) => o.value)")]
    return app, name, before


def _delete(server, name):
    r = httpx.delete(f"{server}/api/models/{name}", headers={"Origin": server}, timeout=30)
    assert r.status_code < 300, r.text
    assert name not in _models(server)


def _said_and_kept(app, name, before):
    pg = app.page
    pg.wait_for_selector("#error:not([hidden])", timeout=60_000)
    text = pg.inner_text("#error-text")
    assert text == (f"Cannot resume: the model {name} is no longer on the server; the "
                    "checkpoint is kept."), app.diagnostics()
    assert "HTTP" not in text and "RuntimeError" not in text
    wait(app, "appState.phase === 'ready'", 30, "the phase back to ready")
    assert pg.is_visible("#resume-banner")
    assert pg.evaluate("appState.checkpoint.model") == name
    assert pg.evaluate(FINGERPRINT) == before  # the stored checkpoint, byte for byte


def test_resume_of_a_model_deleted_after_the_page_loaded(chromium, server):
    app, name, before = _stopped_run_of_an_upload(chromium, server, seed=7)
    try:
        _delete(server, name)
        app.page.click("#resume-run")
        _said_and_kept(app, name, before)
        options = app.page.eval_on_selector_all("#model option",
                                                "os => os.map((o) => o.value)")
        assert name not in options and "seednet" in options  # the list read again
    finally:
        app.close()


def test_model_deleted_between_the_check_and_the_workers_load(chromium, server):
    """The page's model list answers from before the deletion (routed), so the check passes
    and the worker's GET /api/models/{name}/graph.json is the real 404."""
    app, name, before = _stopped_run_of_an_upload(chromium, server, seed=8)
    try:
        stale = httpx.get(f"{server}/api/models", timeout=30).text
        _delete(server, name)
        app.page.route("**/api/models", lambda route: route.fulfill(
            status=200, content_type="application/json", body=stale))
        app.page.click("#resume-run")
        _said_and_kept(app, name, before)
    finally:
        app.close()

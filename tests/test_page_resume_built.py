"""A run of a network built in the page resumes after its model file is gone (the uploads keep
the 64 newest built models, host/build_routes.py): the checkpoint keeps the layers and the
dataset's shape, Resume builds the same model again (the same name: a hash of them) and the
run continues to its end; when the build fails, Resume says why and keeps the checkpoint
(headless Chromium on SwiftShader, the real server)."""

import httpx
import pytest
from test_page_storage import configure, open_page, start, wait, wait_checkpoint, wait_done

pytestmark = pytest.mark.e2e

LAYERS = [{"op": "conv", "out_channels": 4, "kernel_size": 3}, {"op": "relu"},
          {"op": "maxpool"}, {"op": "flatten"}, {"op": "linear", "out_features": "classes"}]
EPOCHS = 12  # of 2 steps: the reload lands inside the run


def _models(server) -> list:
    return [m["name"] for m in httpx.get(f"{server}/api/models", timeout=30).json()]


def _stopped_run_of_a_gone_model(chromium, server, seed):
    """A page whose stored checkpoint (epoch >= 1, unfinished) is of a built model that the
    server no longer has; returns (page, model name)."""
    r = httpx.post(f"{server}/api/models/build", headers={"Origin": server}, timeout=60, json={
        "layers": LAYERS, "input": [1, 28, 28],
        "classes": 10, "save": True})
    assert r.status_code == 200 and r.json()["ok"], r.text
    name = r.json()["name"]
    app = open_page(chromium, server)
    configure(app, epochs=EPOCHS, train_images=128, seed=seed, model=name)
    start(app)
    wait_checkpoint(app, 1)
    r = httpx.delete(f"{server}/api/models/{name}", headers={"Origin": server}, timeout=30)
    assert r.status_code < 300, r.text
    assert name not in _models(server)
    app.page.reload()  # the run stops; its last checkpoint is kept
    app.wait_ready()
    app.page.wait_for_selector("#resume-banner", state="visible", timeout=30_000)
    return app, name


def test_resume_builds_the_gone_network_again(chromium, server):
    app, name = _stopped_run_of_a_gone_model(chromium, server, seed=5)
    try:
        app.page.click("#resume-run")
        wait(app, "appState.phase === 'training' || appState.phase === 'done'", 60,
             "the resumed run")
        assert name in _models(server)
        assert app.page.input_value("#model") == name
        wait_done(app, "the resumed run")
        steps = app.page.evaluate("appState.steps.map((s) => s.step)")
        assert steps == list(range(1, 2 * EPOCHS + 1))
    finally:
        app.close()


def test_resume_says_why_when_the_network_cannot_be_built(chromium, server):
    app, name = _stopped_run_of_a_gone_model(chromium, server, seed=6)
    try:
        app.page.route("**/api/models/build", lambda route: route.fulfill(
            status=503, content_type="application/json", body='{"error": "test"}'))
        app.page.click("#resume-run")
        app.page.wait_for_selector("#error:not([hidden])", timeout=30_000)
        assert app.page.inner_text("#error-text").startswith(
            f"Cannot resume: the model {name} is no longer on the server and could not be "
            "built again from its layers; the checkpoint is kept.")
        assert app.page.is_visible("#resume-banner")
        assert app.page.evaluate("appState.phase") == "ready"
        assert app.page.evaluate("appState.checkpoint.model") == name
    finally:
        app.close()

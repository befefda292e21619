"""The page says the GPU memory of the chosen model at the chosen batch under the batch size,
before Start (headless Chromium on SwiftShader): the bytes the trainer's own estimate counts,
the largest batch within this adapter's buffer limits, and a batch that does not fit in red
with the tensor and the limit named."""

import pytest
from e2e_fixtures import REPO, Page, screenshot

from webgpu_trainer import onnx_io
from webgpu_trainer.engine.train import memory

pytestmark = pytest.mark.e2e

SHOWN = "document.getElementById('batch-size-memory')"


def _said(page, batch):
    """Type ``batch`` and wait for the hint that answers it; (text, the estimate, red)."""
    page.fill("#batch-size", str(batch))
    page.dispatch_event("#batch-size", "change")
    page.wait_for_function(f"{SHOWN} && !{SHOWN}.hidden && appState.memoryEstimate && "
                           f"appState.memoryEstimate.batch === {batch}", timeout=30_000)
    return (page.text_content("#batch-size-memory"), page.evaluate("appState.memoryEstimate"),
            page.evaluate(f"{SHOWN}.classList.contains('fit-error')"))


def test_memory_at_the_batch_and_the_largest_that_fits(app):
    app.wait_ready()
    page = app.page
    if page.get_attribute("#settings-toggle", "aria-expanded") == "false":
        page.click("#settings-toggle")
    page.select_option("#model", "seednet")
    limits = page.evaluate("""async () => { const l = (await navigator.gpu.requestAdapter())
        .limits; return {max_storage_buffer_binding_size: l.maxStorageBufferBindingSize,
        max_buffer_size: l.maxBufferSize}; }""")
    graph, _ = onnx_io.load_bundle(REPO / "models" / "seednet.onnx")
    optimizer = page.input_value("#optimizer")
    top = memory.largest_batch(graph, limits, optimizer=optimizer)
    want = memory.estimate(graph, 64, optimizer=optimizer)

    text, est, red = _said(page, 64)
    assert est["bytes"] == want["bytes"] and est["max_batch"] == top and not red
    assert text.startswith("GPU memory at batch 64: ")
    assert text.endswith(f". Up to {top:,} fits this GPU.")
    page.locator("#batch-size-memory").scroll_into_view_if_needed()
    screenshot(page, "memory-batch-64")

    text, est, red = _said(page, top + 1)
    assert red and est["problems"]
    big, most = est["largest"], min(limits.values())
    assert big["bytes"] > most
    assert text == (f"Batch {top + 1:,} does not fit this GPU: {big['name']} needs "
                    f"{big['bytes']:,} bytes, one buffer holds at most {most:,}. "
                    f"Up to {top:,} fits this GPU.")
    page.locator("#batch-size-memory").scroll_into_view_if_needed()
    screenshot(page, "memory-too-large")
    _said(page, 64)


@pytest.fixture(scope="module")
def memory_page(chromium, server):
    """One ready page of the app for the batch-typing cases (each boot is ~5 s of Pyodide): each
    case first sets SeedNet at batch 64 and waits for that hint, so it starts from the same
    state whichever case ran before, and leaves no request pending (it ends on a hint)."""
    page = Page(chromium, server)
    page.wait_ready()
    yield page
    page.close()


@pytest.mark.parametrize("typed", ["1", "0x10", "1e9", "64.5", "70000"])
def test_no_hint_and_no_request_for_a_batch_that_cannot_run(memory_page, typed):
    """Was: "1" (the schema's minimum is 2) and "0x10" (read as the text; Number() made it 16)
    got a memory hint for a batch Start refuses, and a batch past the route's 65,536 a 400
    in the console on every edit. Now the hint hides, no request goes out and nothing is
    logged; a valid batch gets its hint again."""
    app = memory_page
    page = app.page
    if page.get_attribute("#settings-toggle", "aria-expanded") == "false":
        page.click("#settings-toggle")
    page.select_option("#model", "seednet")
    _said(page, 64)
    asked = []

    def on_request(r):
        if "/memory?" in r.url:
            asked.append(r.url)
    page.on("request", on_request)
    try:
        logged = len(app.console)
        page.fill("#batch-size", typed)
        page.dispatch_event("#batch-size", "change")
        page.wait_for_function(f"{SHOWN}.hidden && appState.memoryEstimate === null",
                               timeout=10_000)
        page.wait_for_timeout(1500)  # past the 400 ms debounce and a request's round trip
        assert page.evaluate(f"{SHOWN}.hidden") and asked == []
        assert [m for m in app.console[logged:] if "400" in m or m.startswith("error")] == []
    finally:
        page.remove_listener("request", on_request)
    text, est, _ = _said(page, 32)
    assert est["batch"] == 32 and text.startswith("GPU memory at batch 32: ")


def test_a_batch_too_large_for_32_bit_offsets_is_said_in_red(app, server):
    """Was: the route's 422 of raw shader text hid the hint. A ~15M-parameter network built
    with the Build route (tests/test_memory_route.py's BIG) at batch 20,000: red, the tensor
    and its bytes named, and the largest batch within this adapter's limits."""
    import httpx
    from test_memory_route import BIG, PER_SAMPLE
    r = httpx.post(f"{server}/api/models/build", headers={"Origin": server}, timeout=120,
                   json={"layers": BIG, "input": [3, 64, 64], "classes": 10, "save": True})
    assert r.status_code == 200 and r.json()["ok"], r.text
    name = r.json()["name"]
    app.wait_ready()
    page = app.page
    page.evaluate("import('/page/models.js').then((m) => m.loadModels())")
    page.wait_for_function(f"[...document.querySelectorAll('#model option')].some((o) => "
                           f"o.value === '{name}')", timeout=30_000)
    if page.get_attribute("#settings-toggle", "aria-expanded") == "false":
        page.click("#settings-toggle")
    page.select_option("#model", name)
    limits = page.evaluate("""async () => { const l = (await navigator.gpu.requestAdapter())
        .limits; return {max_storage_buffer_binding_size: l.maxStorageBufferBindingSize,
        max_buffer_size: l.maxBufferSize}; }""")
    most = min(limits.values())
    text, est, red = _said(page, 20000)
    assert red and est["bytes"] is None and len(est["problems"]) == 1
    assert "32-bit buffer offsets" in est["problems"][0]
    assert est["largest"] == {"name": "d/layers.0/output_1", "bytes": 4 * PER_SAMPLE * 20000}
    top = est["max_batch"]
    assert 0 < top and 4 * PER_SAMPLE * top <= most < 4 * PER_SAMPLE * (top + 1)
    # the route's reason itself (not "one buffer holds at most": that limit may be larger)
    assert text == (f"Batch 20,000 does not fit this GPU: {est['problems'][0].rstrip('.')}. "
                    f"Up to {top:,} fits this GPU.")
    assert "d/layers.0/output_1" in text and f"{4 * PER_SAMPLE * 20000:,} bytes" in text
    assert "shader" not in text and "u32" not in text

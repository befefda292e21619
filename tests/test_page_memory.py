"""The page says the GPU memory of the chosen model at the chosen batch under the batch size,
before Start (headless Chromium on SwiftShader): the bytes the trainer's own estimate counts,
the largest batch within this adapter's buffer limits, and a batch that does not fit in red
with the tensor and the limit named."""

import pytest
from e2e_fixtures import REPO, screenshot

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

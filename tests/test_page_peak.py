"""Achieved GFLOP/s and % of the adapter's peak on the dashboard (issue 20, item 6).

- natively: the model summary's multiply-adds of SeedNet against torch's own FLOP counter
  (``torch.utils.flop_counter.FlopCounterMode``): forward FLOPs = 2 x MACs, and a training step
  (forward + backward with the input's gradient) = 3 x forward = 6 x MACs, the factor the page
  uses (web/page/dashboard.js);
- in the browser: web/page/peak.js's table matches known adapters (H200: 67 TFLOP/s fp32, the
  H100 PCIe before the H100), leaves SwiftShader and unknown GPUs unknown; the speed card
  shows GFLOP/s = 6 x MACs x images/s / 1e9 and its percentage of 67 TFLOP/s for an H200
  adapter, "peak unknown" on this machine's SwiftShader. Screenshot: dashboard-peak-1280.
"""

import sys
from pathlib import Path

import pytest
import torch
from e2e_fixtures import Page, screenshot
from torch.utils.flop_counter import FlopCounterMode

from webgpu_trainer import onnx_io
from webgpu_trainer.engine.tools.summary import summarize

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from make_seednet import SeedNet  # noqa: E402

H200 = {"vendor": "nvidia", "architecture": "hopper", "device": "", "description":
        "NVIDIA H200"}


def _seednet_macs() -> int:
    graph, _ = onnx_io.load_bundle(REPO / "models" / "seednet.onnx")
    return summarize(graph)["totals"]["macs"]


def test_summary_macs_match_torch_flop_counter():
    macs = _seednet_macs()
    net = SeedNet().eval()
    x = torch.zeros(1, 1, 28, 28)
    with FlopCounterMode(display=False) as fwd:
        net(x)
    # the summary counts the multiplying layers (Conv, Gemm); torch's counter the same ops
    assert 2 * macs == fwd.get_total_flops()
    assert macs == 8 * 26 * 26 * 9 + 16 * 24 * 24 * 72 + 24 * 22 * 22 * 144 + 11616 * 32 + 320
    net.train()
    x = torch.zeros(4, 1, 28, 28, requires_grad=True)
    with FlopCounterMode(display=False) as step:
        net(x).sum().backward()
    assert step.get_total_flops() == 3 * 2 * macs * 4  # the page's FLOPS_PER_MAC_TRAINING


@pytest.fixture(scope="module")
def page(chromium, server):
    app = Page(chromium, server)
    try:
        app.wait_ready()
        app.page.wait_for_function("window.appState.summary && window.appState.adapter",
                                   timeout=60_000)
        yield app
    finally:
        app.close()


@pytest.mark.e2e
def test_peak_table(page):
    got = page.page.evaluate("""async (h200) => {
        const { peakOf, percentOfPeak } = await import('/page/peak.js');
        const infos = [h200, {vendor: 'nvidia', description: 'NVIDIA H100 PCIe'},
            {vendor: 'nvidia', device: 'NVIDIA H100 80GB HBM3'},
            {vendor: 'nvidia', architecture: 'ampere', description: ''},
            {vendor: 'google', architecture: 'swiftshader', description: 'SwiftShader Device'},
            {}, null];
        return {peaks: infos.map((i) => peakOf(i) && peakOf(i).tflops),
                pct: percentOfPeak(670, peakOf(h200)), none: percentOfPeak(670, null)};
    }""", H200)
    assert got["peaks"] == [67, 51, 67, None, None, None, None]
    assert got["pct"] == pytest.approx(1.0, rel=1e-12)
    assert got["none"] is None


@pytest.mark.e2e
def test_speed_card_percent_of_peak(page):
    pg = page.page
    # this machine's adapter (SwiftShader) is in no table
    assert pg.text_content("#stat-peak") == "peak unknown"
    macs = _seednet_macs()
    assert pg.evaluate("appState.summary.totals.macs") == macs
    ips, batch = 12_345.0, 64
    pg.evaluate("""async ([info, ips, batch]) => {
        const { renderStats } = await import('/page/dashboard.js');
        appState.adapter = info;
        appState.config = {...(appState.config || {}), batch_size: batch};
        appState.progress = {step: 10, images_per_s: ips};
        renderStats();
    }""", [H200, ips, batch])
    gflops = 6 * macs * ips / 1e9  # = 6 x MACs x batch / (ms per step) / 1e6
    ms = 1000 * batch / ips
    assert gflops == pytest.approx(6 * macs * batch / ms / 1e6, rel=1e-12)
    pct = 100 * gflops / 67_000
    assert float(pg.text_content("#stat-gflops")) == pytest.approx(gflops, abs=0.006)
    assert pg.text_content("#stat-peak") == f"{pct:.2f}% of 67 TFLOP/s (NVIDIA H200)"
    assert "datasheet" in pg.get_attribute("#stat-peak", "title")
    pg.click("#tab-dashboard")
    pg.locator("#perf-title").scroll_into_view_if_needed()
    screenshot(pg, "dashboard-peak-1280")

"""Build a network in the page (issue 19 item 6, web/page/builder.js): in headless Chromium
(SwiftShader) the Build tab starts from a small conv net for MNIST's 1x28x28 and 10 classes,
its shape / parameter / mult-add table follows an edit, a bad value is named with its layer and
field and holds "Use this network"; the built model trains a few steps, downloads as .onnx
that onnx.checker passes and that onnxruntime runs as the float64 numpy engine computes it;
the share link carries the layers and a fresh page rebuilds the same model from it, while a
hostile link's layers are refused with a message."""

import json
from urllib.parse import parse_qs, quote, urlsplit

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from e2e_fixtures import Page, run_training, screenshot

from webgpu_trainer import onnx_io
from webgpu_trainer.cpu.engine import Engine, params_from_blob

pytestmark = pytest.mark.e2e


def cells(page, index):
    """(shape, params, macs) texts of the builder's row ``index``."""
    return page.evaluate("""(i) => { const tr = document.querySelector(
        `#builder-table tr[data-index="${i}"]`);
        return ["shape", "params", "macs"].map((c) => tr.querySelector("." + c).textContent); }""",
                         index)


def wait_cell(page, index, column, text):
    page.wait_for_function("""([i, c, t]) => document.querySelector(
        `#builder-table tr[data-index="${i}"] .${c}`)?.textContent === t""",
                           arg=[index, column, text], timeout=15_000)


def test_build_train_download_and_share(app, server, chromium, tmp_path):
    page = app.page
    app.wait_ready()
    page.click("#tab-build")
    # the starter for MNIST: conv(8, 3, padding 1), ReLU, MaxPool 2, Flatten, Linear(classes)
    wait_cell(page, "4", "params", "15,690")  # 8*14*14 = 1568 features -> 10 classes
    assert cells(page, "0") == ["[8, 28, 28]", "80", "56,448"]
    assert "1x28x28" in page.text_content("#builder-input").replace(", ", "x").replace(
        "[", "").replace("]", "")
    page.fill('input[aria-label="layer 0 out_channels"]', "4")
    wait_cell(page, "4", "params", "7,850")  # 4*14*14 = 784 -> 10
    assert cells(page, "0") == ["[4, 28, 28]", "40", "28,224"]
    assert cells(page, "3")[0] == "[784]"
    page.fill('input[aria-label="layer 0 kernel_size"]', "0")
    page.wait_for_selector("#builder-errors:not([hidden])")
    assert page.text_content("#builder-errors").startswith(
        "layer 0 (conv) kernel_size: 0 is outside 1..15")
    assert page.is_disabled("#builder-use")
    assert page.get_attribute('input[aria-label="layer 0 kernel_size"]', "aria-invalid") == "true"
    page.fill('input[aria-label="layer 0 kernel_size"]', "3")
    wait_cell(page, "4", "params", "7,850")
    page.wait_for_function("!document.querySelector('#builder-use').disabled", timeout=15_000)
    screenshot(page, "tab-build")
    page.click("#builder-use")
    page.wait_for_function("document.querySelector('#model').value.startsWith('built-')",
                           timeout=30_000)
    name = page.input_value("#model")

    app.configure(model=None, optimizer="sgd", lr="0.05", batch=32, max_steps=3,
                  eval_images=64, val_images=0)
    run_training(app, 3, 300, "builder")
    losses = page.evaluate("window.appState.steps.map((s) => s.loss)")
    assert len(losses) >= 1 and all(0 < v < 10 for v in losses), losses
    page.click("#tab-results")
    page.wait_for_function("!document.querySelector('#download').disabled", timeout=10_000)
    with page.expect_download(timeout=60_000) as dl:
        page.click("#download")
    out = tmp_path / "trained.onnx"
    dl.value.save_as(out)
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    graph, blob = onnx_io.load_bundle(out)  # the download imports again
    x = np.random.default_rng(0).standard_normal((3, 1, 28, 28)).astype(np.float32)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    eng = Engine(graph, params_from_blob(graph, blob))
    want = eng.forward(x)[0][eng.output]
    assert got.shape == (3, 10)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()

    page.click("#share")
    link = page.input_value("#share-url")
    layers = json.loads(parse_qs(urlsplit(link).query)["layers"][0])
    assert layers[0] == {"op": "conv", "out_channels": 4, "kernel_size": 3, "stride": 1,
                         "padding": 1}
    assert layers[-1] == {"op": "linear", "out_features": "classes"}
    # the server forgets the model: only the link's layers can give it back, rebuilt
    assert page.evaluate("n => fetch('/api/models/' + n, {method: 'DELETE'}).then(r => "
                         "r.status)", name) == 200
    other = Page(chromium, link)  # a fresh page: the link's layers give the same model
    try:
        other.page.wait_for_function(f"document.querySelector('#model').value === '{name}'",
                                     timeout=60_000)
        assert "not built" not in other.page.text_content("#builder-note")
        assert other.page.evaluate("n => fetch('/api/models').then(r => r.json()).then(ms => "
                                   "ms.some(m => m.name === n))", name)
    finally:
        other.close()
    bad = json.dumps([{"op": "conv", "out_channels": 10 ** 6}, {"op": "constructor"}])
    hostile = Page(chromium, f"{server}/?layers={quote(bad)}&model=seednet")
    try:
        hostile.page.wait_for_function(
            "document.querySelector('#builder-note').textContent.includes('not built')",
            timeout=60_000)
        note = hostile.page.text_content("#builder-note")
        assert "layer 0 (conv) out_channels: 1000000 is outside 1..4096" in note, note
        assert "layer 1 op: 'constructor': expected one of" in note, note
        hostile.page.wait_for_function("document.querySelector('#model').value === 'seednet'",
                                       timeout=30_000)
    finally:
        hostile.close()


def test_dataset_switch_hint_and_layers_from_the_model(chromium, server, server_data_root):
    """Layers edited for MNIST, then a table dataset (6 features, 3 classes): the errors start
    with a hint naming both inputs and "Start over", which resets the layers for the table. A
    network built there keeps its layers in its file: a fresh page that chooses the model
    (no share link's layers, nothing of the first page) shows them in the builder."""
    from test_dataset_table import write_table
    write_table(server_data_root, "tbl")
    first = Page(chromium, server)
    try:
        page = first.page
        first.wait_ready()
        page.click("#tab-build")
        wait_cell(page, "4", "params", "15,690")
        page.fill('input[aria-label="layer 0 out_channels"]', "4")
        wait_cell(page, "4", "params", "7,850")
        if page.get_attribute("#settings-toggle", "aria-expanded") == "false":
            page.click("#settings-toggle")
        page.select_option("#dataset", "tbl")
        page.wait_for_selector("#builder-errors .builder-hint", timeout=15_000)
        errors = page.eval_on_selector_all("#builder-errors li", "ls => ls.map(l => l.textContent)")
        assert errors[0] == ("These layers were edited for samples [1, 28, 28]; this dataset's "
                             "are [6] with 3 classes. “Start over” resets the layers for this "
                             "dataset."), errors
        assert "layer 0 (conv): its input is [6]" in errors[1], errors
        page.click("#builder-reset")
        page.wait_for_selector("#builder-errors", state="hidden", timeout=15_000)
        wait_cell(page, "2", "shape", "[3]")
        page.fill('input[aria-label="layer 0 out_features"]', "12")
        wait_cell(page, "0", "shape", "[12]")
        page.wait_for_function("!document.querySelector('#builder-use').disabled",
                               timeout=15_000)
        page.click("#builder-use")
        page.wait_for_function("document.querySelector('#model').value.startsWith('built-')",
                               timeout=30_000)
        name = page.input_value("#model")
    finally:
        first.close()
    fresh = Page(chromium, f"{server}/?dataset=tbl&model={name}")
    try:
        page = fresh.page
        page.wait_for_function(f"document.querySelector('#model').value === '{name}'",
                               timeout=60_000)
        page.wait_for_function("document.querySelector('input[aria-label=\"layer 0 "
                               "out_features\"]')?.value === '12'", timeout=15_000)
        wait_cell(page, "0", "shape", "[12]")
        assert page.input_value('input[aria-label="layer 2 out_features"]') == "classes"
    finally:
        fresh.close()

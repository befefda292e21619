"""The page and a tokens dataset (headless Chromium): the picker lists it as token ids, and the
page refuses it before any work (Start disabled, the reason naming the dataset and the CLI
command that trains it), since its live views and Try it show images or features."""

import pytest
from e2e_fixtures import screenshot

from webgpu_trainer.host.datasets import store, tokens

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def markers(server_data_root):
    """A small "markers" tokens dataset in the module server's data root."""
    store.write_dataset(server_data_root, "markers", tokens.markers(train=64, test=16),
                        log=lambda s: None)


def test_tokens_dataset_refused_in_page(markers, app):
    app.wait_ready()
    page = app.page
    if page.get_attribute("#settings-toggle", "aria-expanded") == "false":
        page.click("#settings-toggle")
    page.select_option("#dataset", "markers")
    page.wait_for_selector("#dataset-fit:not([hidden])", timeout=10_000)
    assert page.text_content("#dataset-hint").startswith(
        "16 token ids (trained from the command line) · classes: marker 1, marker 2, "
        "marker 3, marker 4 · 64 training + 16 test")
    want = ("Dataset markers holds token ids: the page does not train tokens datasets yet; "
            "train it with `webgpu-trainer train MODEL.onnx --data markers`.")
    assert page.text_content("#dataset-fit") == want
    assert page.is_disabled("#start") and page.get_attribute("#start", "title") == want
    screenshot(page, "datasets-tokens-refused")
    page.select_option("#dataset", "mnist")
    page.wait_for_selector("#dataset-fit", state="hidden")
    page.wait_for_function("!document.getElementById('start').disabled")

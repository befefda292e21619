"""The page's words when the chosen model does not take the chosen dataset's samples (in
headless Chromium): for a CSV table (before: "choose a model made for 2 or another dataset")
what the model must take is said in the dataset's own terms, "2 features" ("1 feature"),
"3x8x8 images" for images (tests/test_page_datasets.py), and the Build tab is named as the
way to make one."""

import urllib.request

import pytest

pytestmark = pytest.mark.e2e

WAIT_MS = 60_000


def upload_csv(server: str, name: str, features: int) -> None:
    """Prepare dataset ``name`` from a CSV of ``features`` feature columns and a label."""
    rows = "".join(",".join(str((r * 3 + i) % 7) for i in range(features)) + f",{r % 2}\n"
                   for r in range(40))
    head = ",".join(f"f{i}" for i in range(features)) + ",label\n"
    req = urllib.request.Request(f"{server}/api/datasets?name={name}&file={name}.csv",
                                 data=(head + rows).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 201


@pytest.mark.parametrize("name,features,words", [
    ("pair", 2, "2 features, [N, 2]): choose a model made for 2 features"),
    ("single", 1, "1 feature, [N, 1]): choose a model made for 1 feature"),  # not "1 features"
])
def test_table_misfit_names_features_and_the_build_tab(bare_page, server, name, features,
                                                       words):
    page = bare_page
    upload_csv(server, name, features)
    page.goto(server)
    page.wait_for_function(f"document.querySelector('#dataset option[value={name}]') && "
                           "document.querySelector('#model').value === 'seednet'",
                           timeout=WAIT_MS)
    page.select_option("#dataset", name)
    page.wait_for_selector("#dataset-fit:not([hidden])", timeout=WAIT_MS)
    fit = page.text_content("#dataset-fit")
    assert fit == (f"Model seednet: input 'input' [N, 1, 28, 28] does not fit dataset {name} "
                   f"({words}, make one in the Build tab, or choose another dataset."), fit
    assert page.text_content("#summary-fit") == fit
    assert page.is_disabled("#start") and page.get_attribute("#start", "title") == fit
    assert not page.errors, page.errors

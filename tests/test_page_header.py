"""The page's header names the chosen dataset as the picker does (its title: "Fashion-MNIST"),
in headless Chromium: nothing before the dataset list is there (before: "MNIST" whatever the
link chose), the link's dataset once it is, and each dataset the user switches to; a title
written as markup (a user's own dataset is named by its user) shows as literal text."""

import time

import pytest
from dataset_fixtures import RGB_CLASSES, colour_blobs, write_image_dataset

pytestmark = pytest.mark.e2e

WAIT_MS = 60_000
HOSTILE = "<img src=x onerror=alert(1)>"
NEUTRAL = "Train a neural network on your GPU, in the browser"


def header(title: str) -> str:
    return f"Train a neural network on {title} on your GPU, in the browser"


@pytest.fixture(scope="module")
def titled(server_data_root):
    """Two tiny RGB datasets in the server's data root: "fashion" titled Fashion-MNIST and
    "evil" titled as an HTML element with an onerror handler."""
    for name, title in (("fashion", "Fashion-MNIST"), ("evil", HOSTILE)):
        write_image_dataset(server_data_root, name, {"train": colour_blobs(8, 8),
                                                     "test": colour_blobs(4, 8, seed=1)},
                            RGB_CLASSES, title=title)


def test_header_names_the_chosen_dataset(titled, bare_page, server):
    pg = bare_page
    dialogs = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    held = []  # GET /api/datasets, answered when the test says
    pg.route("**/api/datasets", lambda route: held.append(route))
    pg.goto(f"{server}/?dataset=fashion")
    deadline = time.monotonic() + WAIT_MS / 1000
    while not held and time.monotonic() < deadline:
        pg.wait_for_timeout(50)
    assert held, "the page never asked for /api/datasets"
    assert pg.text_content("#tagline") == NEUTRAL  # no dataset named before the list
    held[0].continue_()
    pg.wait_for_function("window.appState?.dataset?.name === 'fashion'", timeout=WAIT_MS)
    assert pg.text_content("#tagline") == header("Fashion-MNIST")
    shown = pg.eval_on_selector_all("#dataset option", "os => os.map((o) => o.textContent)")
    assert "Fashion-MNIST (3x8x8 images, 3 classes)" in shown, shown
    for name, title in (("evil", HOSTILE), ("mnist", "MNIST"), ("fashion", "Fashion-MNIST")):
        pg.select_option("#dataset", name)
        assert pg.text_content("#tagline") == header(title), name
    pg.select_option("#dataset", "evil")
    assert pg.text_content("#tagline") == header(HOSTILE)
    assert pg.eval_on_selector_all(".topbar img", "es => es.length") == 0
    pg.wait_for_timeout(500)  # an onerror handler, had an <img> been made, would have run
    assert dialogs == [] and not pg.errors, (dialogs, pg.errors)

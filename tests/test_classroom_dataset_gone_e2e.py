"""A class session's dataset deleted from the server after the session was made, in headless
Chromium against the real ``webgpu-trainer classroom`` server: the student's page says so in
the class card (before, it waited for a dataset option that never came and Start failed on a
404 later) and Start stays disabled once the engine is ready, the reason as its title and in
the status line; the teacher's dashboard names it where it names the session's dataset.
Screenshot: classroom-dataset-gone-1280."""

from __future__ import annotations

import shutil
import time

import pytest
from e2e_fixtures import screenshot
from test_classroom_dataset import GONE, TEST
from test_classroom_dataset_e2e import bands_server
from test_classroom_e2e import TOKEN, Server, class_browser, js_wait, open_page  # noqa: F401

pytestmark = pytest.mark.e2e



@pytest.fixture(scope="module")
def server(mnist_cache, tmp_path_factory):
    with bands_server(tmp_path_factory.mktemp("classroom-gone"), mnist_cache) as srv:
        shutil.copytree(srv.tmp / "datasets" / "bands", srv.tmp / "bands-copy")
        yield srv


def gone_session(server) -> str:
    """A session on dataset "bands", then "bands" deleted from the server."""
    bands = server.tmp / "datasets" / "bands"
    if not bands.exists():
        shutil.copytree(server.tmp / "bands-copy", bands)
    sid = server.session(dataset="bands", batch_size=8, eval_images=TEST, val_images=4)
    shutil.rmtree(bands)
    return sid


PICKED = """(() => { const s = document.getElementById("dataset");
  return [s.value, s.selectedOptions[0]?.textContent, s.selectedOptions[0]?.disabled];
})()"""


def assert_picker_names_gone(page):
    """The dataset picker shows the session's dataset as not on the server (before, it showed
    the server's default, MNIST), chosen, not choosable; the hint and header name no other."""
    js_wait(page, "[...document.getElementById('dataset').options].some((o) => "
            "o.textContent.endsWith(' classes)'))", 60, "the server's dataset list")
    js_wait(page, "document.getElementById('dataset').value === 'bands'", 60,
            "the picker on the session's dataset")
    assert page.evaluate(PICKED) == ["bands", "bands (not on this server)", True]
    assert page.text_content("#dataset-hint") == ""
    assert page.text_content("#tagline") == \
        "Train a neural network on bands on your GPU, in the browser"


def test_deleted_dataset_is_said_to_student_and_teacher(class_browser, server):  # noqa: F811
    sid = gone_session(server)
    page = open_page(class_browser, f"{server.url}/?class={sid}")
    teacher = open_page(class_browser, f"{server.url}/teacher#token={TOKEN}")
    try:
        page.wait_for_selector("#classroom [role=alert]", timeout=60000)
        assert page.text_content("#classroom [role=alert]") == GONE
        assert_picker_names_gone(page)
        js_wait(page, "window.appState.workerReady || window.appState.noWebGPU", 180,
                "the student's engine ready")
        assert page.evaluate("appState.workerReady") is True
        assert page.is_disabled("#start")
        assert page.get_attribute("#start", "title") == GONE
        assert page.text_content("#status") == f"Start is disabled: {GONE}"
        assert_picker_names_gone(page)
        screenshot(page, "classroom-dataset-gone-1280")
        js_wait(teacher, f"window.teacherState.session?.id === {sid!r} && document."
                         "getElementById('session-dataset').textContent.startsWith('This class')",
                60, "the teacher's session naming the missing dataset")
        assert teacher.text_content("#session-dataset") == GONE
        assert not [m for m in page.console + teacher.console if m.startswith("pageerror")]
    finally:
        page.context.close()
        teacher.context.close()


@pytest.mark.parametrize("late", ["**/api/datasets", "**/api/config/schema"])
def test_deleted_dataset_named_when_the_list_comes_after_the_session(
        class_browser, server, late):  # noqa: F811
    """The dataset list answered after the session (delayed 2 s): loading it chose the
    default, MNIST; the picker goes back to the session's dataset, named as gone. The settings
    schema answered late: the settings check the dataset's choice asks for waits for it
    (before: a TypeError in form.js reading a field the schema had not given yet)."""
    sid = gone_session(server)
    ctx = class_browser.new_context(ignore_https_errors=True,
                                    viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))

    def slow(route):
        time.sleep(2)
        route.continue_()
    page.route(late, slow)
    try:
        page.goto(f"{server.url}/?class={sid}")
        page.wait_for_selector("#classroom [role=alert]", timeout=60000)
        assert_picker_names_gone(page)
        assert page.get_attribute("#start", "title") == GONE
        js_wait(page, "window.appState.workerReady", 180, "the student's engine ready")
        assert page.text_content("#status") == f"Start is disabled: {GONE}"
        assert not errors
    finally:
        ctx.close()


# the status line's box: not cut (its text as wide as the box), on screen, inside the run bar
STATUS_BOX = """(() => { const s = document.getElementById("status");
  const r = s.getBoundingClientRect(), bar = s.closest(".runbar").getBoundingClientRect();
  return {cut: s.scrollWidth > s.clientWidth + 1 || s.scrollHeight > s.clientHeight + 1,
          width: r.width, height: r.height, inside: r.left >= bar.left && r.right <= bar.right
            && r.top >= bar.top && r.bottom <= bar.bottom + 0.5,
          lines: Math.round(r.height / parseFloat(getComputedStyle(s).lineHeight))}; })()"""


@pytest.mark.parametrize("width", [1280, 390])
def test_start_disabled_reason_shown_whole_in_the_run_bar(class_browser, server,  # noqa: F811
                                                          width):
    """The long reason Start is disabled wraps in the run bar (before: cut off with an ellipsis
    at 1280 px, hidden for screen readers only at 390 px). Screenshots:
    classroom-start-disabled-1280, classroom-start-disabled-390."""
    sid = gone_session(server)
    page = open_page(class_browser, f"{server.url}/?class={sid}", width=width, height=800)
    try:
        js_wait(page, "window.appState.workerReady || window.appState.noWebGPU", 180,
                "the student's engine ready")
        assert page.text_content("#status") == f"Start is disabled: {GONE}"
        page.evaluate("window.scrollTo(0, 0)")
        box = page.evaluate(STATUS_BOX)
        screenshot(page, f"classroom-start-disabled-{width}")
        assert not box["cut"], box
        assert box["inside"] and box["width"] > 200 and box["lines"] >= 2, box
        # a normal status stays one line (the bar does not jump while training)
        page.evaluate("window.appState.blocked = null; "
                      "document.dispatchEvent(new Event('state-changed'))")
        page.evaluate("document.getElementById('status').textContent = 'Ready'")
        assert page.evaluate(STATUS_BOX)["lines"] <= 1
    finally:
        page.context.close()


def test_new_session_dialog_says_the_sessions_dataset_is_gone(class_browser,  # noqa: F811
                                                              server):
    """The teacher's New-session dialog opened on a session whose dataset is gone: its
    dataset select shows one the server has (the first), and says the session's is not there
    (before: the first dataset, without a word)."""
    sid = gone_session(server)
    teacher = open_page(class_browser, f"{server.url}/teacher?session={sid}#token={TOKEN}")
    try:
        js_wait(teacher, f"window.teacherState.session?.id === {sid!r}", 60,
                "the teacher's dashboard on the session")
        teacher.click("#new-session")
        teacher.wait_for_selector("#s-dataset", state="visible")
        first = teacher.evaluate("document.querySelector('#s-dataset').options[0].value")
        assert first != "bands"
        assert teacher.input_value("#s-dataset") == first
        assert teacher.text_content("#s-dataset-gone") == \
            f"bands (this session's) is not on this server: {first} is chosen instead."
        assert teacher.get_attribute("#s-dataset", "aria-describedby") == "s-dataset-gone"
        assert teacher.query_selector("#s-model-gone") is None  # its model is there
        assert not [m for m in teacher.console if m.startswith("pageerror")]
    finally:
        teacher.context.close()

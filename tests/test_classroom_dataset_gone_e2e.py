"""A class session's dataset deleted from the server after the session was made, in headless
Chromium against the real ``webgpu-trainer classroom`` server: the student's page says so in
the class card (before, it waited for a dataset option that never came and Start failed on a
404 later) and Start stays disabled once the engine is ready, the reason as its title and in
the status line; the teacher's dashboard names it where it names the session's dataset.
Screenshot: classroom-dataset-gone-1280."""

from __future__ import annotations

import shutil

import pytest
from e2e_fixtures import screenshot
from test_classroom_dataset import GONE, TEST
from test_classroom_dataset_e2e import bands_server
from test_classroom_e2e import TOKEN, Server, class_browser, js_wait, open_page  # noqa: F401

pytestmark = pytest.mark.e2e



@pytest.fixture(scope="module")
def server(mnist_cache, tmp_path_factory):
    with bands_server(tmp_path_factory.mktemp("classroom-gone"), mnist_cache) as srv:
        yield srv


def test_deleted_dataset_is_said_to_student_and_teacher(class_browser, server):  # noqa: F811
    sid = server.session(dataset="bands", batch_size=8, eval_images=TEST, val_images=4)
    shutil.rmtree(server.tmp / "datasets" / "bands")
    page = open_page(class_browser, f"{server.url}/?class={sid}")
    teacher = open_page(class_browser, f"{server.url}/teacher#token={TOKEN}")
    try:
        page.wait_for_selector("#classroom [role=alert]", timeout=60000)
        assert page.text_content("#classroom [role=alert]") == GONE
        js_wait(page, "window.appState.workerReady || window.appState.noWebGPU", 180,
                "the student's engine ready")
        assert page.evaluate("appState.workerReady") is True
        assert page.is_disabled("#start")
        assert page.get_attribute("#start", "title") == GONE
        assert page.text_content("#status") == f"Start is disabled: {GONE}"
        screenshot(page, "classroom-dataset-gone-1280")
        js_wait(teacher, f"window.teacherState.session?.id === {sid!r} && document."
                         "getElementById('session-dataset').textContent.startsWith('This class')",
                60, "the teacher's session naming the missing dataset")
        assert teacher.text_content("#session-dataset") == GONE
        assert not [m for m in page.console + teacher.console if m.startswith("pageerror")]
    finally:
        page.context.close()
        teacher.context.close()

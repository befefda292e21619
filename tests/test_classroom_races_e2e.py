"""Classroom pages whose data arrives in another order than usual, and dialog fields left
empty, in headless Chromium against the real ``webgpu-trainer classroom`` server:

- the student's page: the session answered before the settings schema (the form is drawn
  from it): the teacher's pinned values still end up in the form, locked (a guard: the
  model list, loaded after the form, keeps ``applyConfig`` retrying until the form is there);
- the teacher's session picker: a session chosen, then another before the first one's details
  came: the late answer replaced the one chosen last (the picker named one session, the
  dashboard showed and streamed the other);
- the teacher's New-session dialog: a number field left empty (or holding no number) was sent
  as 0 (a seed of 0, no momentum, whole epochs) without a word; now the dialog names the field
  and sends nothing.
"""

from __future__ import annotations

import time

import pytest
from test_classroom_e2e import TOKEN, class_browser, js_wait, server  # noqa: F401

pytestmark = pytest.mark.e2e


def _page(browser, url, late: str | None = None, width=1280, init: str | None = None):
    """A page of ``url`` whose ``late`` route (a glob) answers 2 s late; ``init``: a script
    run before the page's own."""
    ctx = browser.new_context(ignore_https_errors=True, viewport={"width": width, "height": 800})
    page = ctx.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    if late:
        def slow(route):
            time.sleep(2)
            route.continue_()
        page.route(late, slow)
    if init:
        page.add_init_script(init)
    page.goto(url)
    return page


def test_pinned_settings_applied_when_the_schema_comes_after_the_session(
        class_browser, server):  # noqa: F811
    """The settings schema answered 2 s late: the session's pinned batch size and max steps
    still end up in the form, locked, and its unpinned learning rate too."""
    sid = server.session(max_steps=7, batch_size=16, lr=0.0125)
    page = _page(class_browser, f"{server.url}/?class={sid}", late="**/api/config/schema")
    try:
        page.wait_for_selector("#classroom-name", timeout=60000)
        js_wait(page, "!!document.querySelector('#settings [name=batch_size]')", 60,
                "the settings form")
        js_wait(page, "document.querySelector('#settings [name=batch_size]').value === '16'",
                20, "the pinned batch size in the form")
        got = page.evaluate("""['batch_size', 'max_steps', 'lr'].map((k) => {
            const f = document.querySelector(`#settings [name=${k}]`);
            return [k, f.value, f.disabled]; })""")
        assert got == [["batch_size", "16", True], ["max_steps", "7", True],
                       ["lr", "0.0125", False]]
        assert not page.errors
    finally:
        page.context.close()


@pytest.mark.parametrize("field, typed", [("seed", ""), ("momentum", ""),
                                          ("max_steps", "")])
def test_session_dialog_refuses_an_empty_number(class_browser, server, field,  # noqa: F811
                                                typed):
    """A number field emptied in the New-session dialog: the dialog stays open naming the
    field, and no session is made (before: the session got 0 for it)."""
    page = _page(class_browser, f"{server.url}/teacher#token={TOKEN}")
    try:
        page.wait_for_selector("#new-session", state="visible", timeout=60000)
        before = len(server.api("GET", "/api/classroom/sessions",
                                headers=server.teacher).json())
        page.click("#new-session")
        page.wait_for_selector("#s-optimizer", state="visible")
        page.select_option("#s-optimizer", "sgd")  # momentum applies to SGD
        page.fill("#s-name", f"Empty {field}")
        page.fill(f"#s-{field}", typed)
        page.click("#session-form button[type=submit]")
        page.wait_for_selector("#s-error", state="visible", timeout=10000)
        label = page.text_content(f"label[for=s-{field}]")
        assert page.text_content("#s-error") == f"{label}: enter a number"
        assert page.evaluate("document.getElementById('session-dialog').open")
        assert page.evaluate("document.activeElement.id") == f"s-{field}"
        after = server.api("GET", "/api/classroom/sessions", headers=server.teacher).json()
        assert len(after) == before
        assert not page.errors
    finally:
        page.context.close()


# the page's fetch of one session's details (GET /api/classroom/sessions/ID) answered 1.5 s late
SLOW_SESSION = """(() => { const f = window.fetch;
  window.fetch = async (url, ...rest) => {
    const res = await f(url, ...rest);
    if (String(url).endsWith("/sessions/" + %r)) await new Promise((r) => setTimeout(r, 1500));
    return res; }; })()"""


def test_teacher_picks_a_session_then_another_before_it_came(
        class_browser, server):  # noqa: F811
    """Session A chosen (its details 1.5 s late), then B at once: the dashboard stays on B,
    the one chosen last, the picker too (before: A's late answer took over)."""
    a = server.session(max_steps=3)
    b = server.session(max_steps=4)
    page = _page(class_browser, f"{server.url}/teacher?session={b}#token={TOKEN}",
                 init=SLOW_SESSION % a)
    try:
        js_wait(page, f"window.teacherState.session?.id === {b!r} && "
                      "window.teacherState.connected", 60, "the dashboard on session B")
        page.select_option("#session-select", a)
        page.select_option("#session-select", b)
        page.wait_for_timeout(2500)
        assert page.evaluate("window.teacherState.session.id") == b
        assert page.input_value("#session-select") == b
        assert page.evaluate("location.search") == f"?session={b}"
        assert "max_steps 4" in page.text_content("#pinned-text")
        assert not page.errors
    finally:
        page.context.close()

"""The page's quality checks in headless Chromium (issue 10, item 7): axe-core (vendored from npm
as a dev dependency of web/, injected by the test; the server never serves it) finds no serious
or critical violation on any tab, at 1280x800 and at phone width (390x844), and none on Results
after a real (tiny) run, whose wrong digits are buttons named by their visible text; every
request stays on the page's own origin; no console error; every control is reachable and
named.

axe-core's rules: https://github.com/dequelabs/axe-core/blob/develop/doc/rule-descriptions.md
(WCAG 2.1 A/AA tags, plus best practices).
"""

from urllib.parse import urlparse

import pytest
from e2e_fixtures import REPO, Page, run_training, screenshot

pytestmark = pytest.mark.e2e

AXE = REPO / "web" / "node_modules" / "axe-core" / "axe.min.js"
TABS = ["dashboard", "model", "build", "results", "try", "kernels", "work"]
SERIOUS = {"serious", "critical"}
VIEWPORTS = {"1280": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}


def axe_violations(page) -> list[dict]:
    """axe-core's violations on the page as it is now: [{id, impact, help, nodes: [target]}]."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(content=AXE.read_text())
    return page.evaluate("""async () => {
        const r = await axe.run(document, {resultTypes: ['violations']});
        return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.slice(0, 5).map(n => n.target.join(' '))}));
    }""")


@pytest.fixture(scope="module", params=sorted(VIEWPORTS))
def booted(request, chromium, server):
    """A ready page at one viewport, with every request and console error recorded."""
    app = Page(chromium, server)
    app.page.set_viewport_size(VIEWPORTS[request.param])
    requests = []
    app.page.on("request", lambda r: requests.append(r.url))
    app.wait_ready()
    app.page.wait_for_function("document.querySelector('#model').value !== ''")
    yield app, request.param, requests
    app.close()


def test_no_serious_axe_violation_on_any_tab(booted):
    app, size, _ = booted
    found = {}
    for tab in TABS:
        app.page.click(f"#tab-{tab}")
        bad = [v for v in axe_violations(app.page) if v["impact"] in SERIOUS]
        if bad:
            found[tab] = bad
        screenshot(app.page, f"tab-{tab}-{size}")
    app.page.click("#tab-dashboard")
    assert not found, "axe-core: serious/critical violations:\n" + "\n".join(
        f"{tab}: {v['id']} ({v['impact']}): {v['help']} at {v['nodes']}"
        for tab, vs in found.items() for v in vs)


def test_every_request_stays_on_localhost_and_no_console_error(booted, server):
    app, _, requests = booted
    origin = urlparse(server).netloc
    outside = [u for u in requests if urlparse(u).scheme in ("http", "https", "ws", "wss")
               and urlparse(u).netloc != origin]
    assert not outside, f"requests leaving {origin}: {outside[:10]}"
    errors = [c for c in app.console if c.startswith(("error:", "pageerror:"))]
    assert not errors, "console errors:\n" + "\n".join(errors)


def test_start_is_on_the_first_screen(booted):
    """Issue 10: at 1280x800 the Start button and the first chart are visible without scrolling;
    on a phone, Start and the progress bar are."""
    app, size, _ = booted
    page = app.page
    page.evaluate("window.scrollTo(0, 0)")
    height = VIEWPORTS[size]["height"]
    box = page.locator("#start").bounding_box()
    assert box and box["y"] + box["height"] <= height, f"Start at y={box} of {height}"
    box = page.locator("#progress").bounding_box()
    assert box and box["y"] + box["height"] <= height, f"progress bar at {box}"
    if size == "1280":
        box = page.locator("#chart-steps").bounding_box()
        assert box and box["y"] < height - 100, f"loss chart at {box}"


def test_every_control_has_a_name_and_is_keyboard_reachable(booted):
    """Every visible button, input, select and link has an accessible name; names of checkboxes
    are unique (not all "weight" / "bias"); Tab reaches Start."""
    page = booted[0].page
    page.click("#tab-model")
    dup = page.evaluate("""() => {
        const names = {};
        for (const el of document.querySelectorAll('input[type=checkbox]')) {
            if (!el.offsetParent) continue;
            const label = el.getAttribute('aria-label') || el.labels?.[0]?.textContent.trim() || '';
            (names[label] ||= []).push(el.id || el.name);
        }
        return Object.entries(names).filter(([, ids]) => ids.length > 1);
    }""")
    page.click("#tab-dashboard")
    assert not dup, f"checkboxes sharing one name: {dup}"
    page.evaluate("document.activeElement?.blur(); window.scrollTo(0, 0)")
    for _ in range(60):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement?.id") == "start":
            break
    else:
        pytest.fail("Tab never reached the Start button")


# a run that makes mistakes to show: 3 Adam steps on 96 images, 256 test images
TINY_RUN = dict(optimizer="adam", lr="0.001", batch=32, epochs=1, seed=0, max_steps=3,
                train_images=96, val_images=64, eval_images=256)


def test_results_after_a_run_have_no_serious_violation(booted):
    """Results after a real run (confusion matrix, per-digit table, the wrong digits' grid):
    no serious or critical axe violation; each wrong digit's button is named by its visible
    text (no aria-label that differs from it: label-content-name-mismatch)."""
    app, size, _ = booted
    page = app.page
    app.configure(**TINY_RUN)
    run_training(app, TINY_RUN["max_steps"], 300, f"a11y-{size}")
    page.wait_for_selector("#evaluation[data-images='drawn']", state="attached", timeout=60_000)
    page.click("#tab-results")
    buttons = page.eval_on_selector_all("#wrong-grid button.wrong", """bs => bs.map(b =>
        ({label: b.getAttribute('aria-label'), text: b.textContent}))""")
    assert len(buttons) > 0, "3 steps leave wrong digits to show"
    assert all(b["label"] is None and b["text"].startswith("test image ") for b in buttons)
    violations = axe_violations(page)
    bad = [v for v in violations if v["impact"] in SERIOUS]
    page.evaluate("document.getElementById('wrong-grid').scrollIntoView()")
    screenshot(page, f"results-after-run-{size}")
    page.click("#tab-dashboard")
    assert not bad, "axe-core on Results after a run:\n" + "\n".join(
        f"{v['id']} ({v['impact']}): {v['help']} at {v['nodes']}" for v in bad)
    assert not [v for v in violations if v["id"] == "label-content-name-mismatch"]

"""The page's settings drawn from the run configuration's schema (issue 8), in headless Chromium:
all six optimizers, each optimizer's own parameters, the schedulers and losses, torch's
defaults following the optimizer, presets, and bad values marked inline (aria-invalid and the
validator's message next to the field) with Start disabled; Enter never starts training.
No training runs here (tests/test_e2e.py trains)."""

import pytest

pytestmark = pytest.mark.e2e

BOOT_TIMEOUT_S = 180


@pytest.fixture()
def page(chromium, server):
    ctx = chromium.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(server)
    pg.wait_for_function("window.appState && (window.appState.workerReady || "
                         "window.appState.phase === 'error')", timeout=BOOT_TIMEOUT_S * 1000)
    pg.wait_for_function("!document.querySelector('#start').disabled", timeout=30_000)
    yield pg
    assert not errors, errors
    ctx.close()


def visible(pg, field_id: str) -> bool:
    return pg.is_visible(f"#{field_id}-field")


def marked(pg, field_id: str, needle: str) -> None:
    """Wait until the field is marked invalid with ``needle`` in its message."""
    pg.wait_for_function(
        f"document.querySelector('#{field_id}').getAttribute('aria-invalid') === 'true' && "
        f"document.querySelector('#{field_id}-error').textContent.includes({needle!r})",
        timeout=10_000)
    assert pg.is_visible(f"#{field_id}-error")
    assert pg.is_disabled("#start")


def clean(pg, field_id: str) -> None:
    pg.wait_for_function(f"!document.querySelector('#{field_id}').hasAttribute('aria-invalid')",
                         timeout=10_000)
    pg.wait_for_function("!document.querySelector('#start').disabled", timeout=10_000)


def test_all_optimizers_and_their_parameters(page):
    pg = page
    values = pg.eval_on_selector_all("#optimizer option", "os => os.map(o => o.value)")
    assert values == ["sgd", "adam", "adamw", "adagrad", "rmsprop", "adadelta"]
    own = {"sgd": ["momentum", "dampening", "nesterov"],
           "adam": ["betas", "eps", "amsgrad"],
           "adamw": ["betas", "eps", "amsgrad"],
           "adagrad": ["lr-decay", "initial-accumulator-value", "eps"],
           "rmsprop": ["alpha", "centered", "momentum", "eps"],
           "adadelta": ["rho", "eps"]}
    every = sorted({f for names in own.values() for f in names})
    for name, fields in own.items():
        pg.select_option("#optimizer", name)
        for f in every:
            assert visible(pg, f) == (f in fields), (name, f)
        assert visible(pg, "lr") and visible(pg, "weight-decay")  # every optimizer's
    # torch's defaults follow the optimizer while the field is untouched
    pg.select_option("#optimizer", "adadelta")
    assert pg.input_value("#lr") == "1" and pg.input_value("#eps") == "0.000001"
    pg.select_option("#optimizer", "adamw")
    assert pg.input_value("#lr") == "0.001" and pg.input_value("#weight-decay") == "0.01"
    pg.fill("#lr", "0.02")
    pg.select_option("#optimizer", "adagrad")
    assert pg.input_value("#lr") == "0.02"  # edited: kept
    # schedulers and losses, with their own fields (Advanced)
    pg.evaluate("document.querySelector('#advanced').open = true")
    assert pg.eval_on_selector_all("#scheduler option", "os => os.map(o => o.value)") == \
        ["none", "steplr", "exponential", "cosine", "onecycle"]
    assert pg.eval_on_selector_all("#loss option", "os => os.map(o => o.value)") == \
        ["auto", "cross_entropy", "nll", "nll_log", "mse", "bce_with_logits"]
    pg.select_option("#optimizer", "sgd")
    pg.select_option("#scheduler", "onecycle")
    assert visible(pg, "total-steps") and visible(pg, "pct-start") and not visible(pg, "gamma")
    pg.select_option("#scheduler", "steplr")
    assert visible(pg, "gamma") and pg.input_value("#gamma") == "0.1"
    pg.select_option("#loss", "mse")
    assert not visible(pg, "label-smoothing") and not visible(pg, "class-weights")
    cfg = pg.evaluate("readFormForTests()")
    assert cfg["optimizer"] == "sgd" and cfg["scheduler"] == "steplr" and "betas" not in cfg
    assert cfg["momentum"] == 0 and cfg["gamma"] == 0.1 and "label_smoothing" not in cfg


def test_bad_values_are_marked_inline_and_block_start(page):
    pg = page
    pg.fill("#lr", "0")
    marked(pg, "lr", "must be a number > 0, got 0")
    pg.press("#lr", "Enter")  # never starts training, valid or not
    pg.wait_for_timeout(500)
    assert pg.evaluate("window.appState.phase") == "ready"
    pg.fill("#lr", "0.001")
    clean(pg, "lr")
    for field, value, needle in (
            ("seed", "1.5", "must be an integer in [0, 4,294,967,295], got 1.5"),
            ("epochs", "1001", "must be an integer in [1, 1000], got 1001"),
            ("batch-size", "100000", "must be an integer in [2, 65,536], got 100000"),
            ("batch-size", "1", "must be an integer in [2, 65,536], got 1")):
        old = pg.input_value(f"#{field}")
        pg.fill(f"#{field}", value)
        marked(pg, field, needle)
        pg.fill(f"#{field}", old)
        clean(pg, field)
    # a field of the Advanced section against the data: more images per batch than it has
    pg.evaluate("document.querySelector('#advanced').open = true")
    pg.fill("#train-images", "500")
    pg.fill("#batch-size", "1000")
    marked(pg, "batch-size", "at most the 500 training images")
    pg.press("#batch-size", "Enter")
    pg.wait_for_timeout(500)
    assert pg.evaluate("window.appState.phase") == "ready"
    pg.fill("#train-images", "0")
    clean(pg, "batch-size")
    assert "steps per epoch" in pg.text_content("#run-steps")


def test_huge_integers_are_named_as_typed(page):
    """Integers past 2**53 at the boundary of 20 digits: "99999999999999999999" (20 digits) was
    read as the JS number 1e20 and the message said "an integer of 21 digits"; now the field
    sends the digits typed and the message quotes them. 1e19 and 1e20 are the numbers they
    write (20 and 21 digits)."""
    pg = page
    old = pg.input_value("#batch-size")
    for value, needle in (
            ("1e19", "must be an integer in [2, 65,536], got 10000000000000000000"),
            ("99999999999999999999", "must be an integer in [2, 65,536], got "
                                     "'99999999999999999999'"),
            ("1e20", "must be an integer in [2, 65,536], got an integer of 21 digits")):
        pg.fill("#batch-size", value)
        marked(pg, "batch-size", needle)
        pg.fill("#batch-size", old)
        clean(pg, "batch-size")


def test_presets_come_from_the_schema(page):
    pg = page
    assert pg.get_attribute("#preset-fast", "aria-pressed") == "true"
    pg.click("#preset-seed")
    assert (pg.input_value("#optimizer"), pg.input_value("#lr"), pg.input_value("#batch-size"),
            pg.input_value("#epochs")) == ("adagrad", "1", "1000", "8")
    assert pg.get_attribute("#preset-seed", "aria-pressed") == "true"
    assert pg.get_attribute("#preset-fast", "aria-pressed") == "false"
    assert pg.is_visible("#lr-decay-field") and not pg.is_visible("#betas-field")
    pg.wait_for_function("document.querySelector('#run-steps').textContent.includes("
                         "'55 steps per epoch')", timeout=10_000)  # 55,000 images: 5,000 held out

"""Hostile settings input on the page (issue 16), in headless Chromium: share links whose keys
are Object.prototype's names (?constructor=2 bricked the page), duplicates, 0x10, 1e999, a
setting of another optimizer, many unknown names, the fine-tuning selection (`trainable`) in
a link; number fields that keep what was typed (strict decimal numbers); settings imports with
numbers that are not finite or `trainable` names the model lacks, which change nothing. Each
case asserts the exact message. No training runs here (the Diverged advice is Python:
tests/test_evaluation.py)."""

import json
import urllib.parse
from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parents[1] / "models"  # what the e2e server serves

pytestmark = pytest.mark.e2e

BOOT_TIMEOUT_S = 180
WAIT_MS = 60_000
BLOCKED = "Fix the settings marked in red first"  # #start's title while a check failed
# the builder's layer kinds, as the server's message lists them (host/build_routes.py)
OPS = ("conv, maxpool, avgpool, global_avgpool, flatten, linear, batchnorm, dropout, "
       "leaky_relu, residual, relu, gelu, tanh, sigmoid, elu")

# JS: the texts the page shows for the settings: inline per field and the list below the form
MARKS = """() => ({
  inline: Object.fromEntries([...document.querySelectorAll('#settings .field-error')]
    .filter((e) => !e.hidden).map((e) => [e.closest('[data-field]').dataset.field,
                                          e.textContent])),
  rest: [...document.querySelectorAll('#config-errors li')].map((li) => li.textContent),
  models: [...document.querySelectorAll('#model option')].map((o) => o.value),
  start: document.querySelector('#start').title})"""


def open_link(pg, server, query, needle):
    """Open ``server/?query``; wait for the model list and ``needle`` among the marks."""
    pg.goto(f"{server}/?{query}")
    pg.wait_for_function(
        "(needle) => document.querySelector('#model option[value=seednet]') && "
        "[...document.querySelectorAll('.field-error:not([hidden]), #config-errors li')]"
        ".some((e) => e.textContent === needle)", arg=needle, timeout=WAIT_MS)
    marks = pg.evaluate(MARKS)
    # exactly the server's models (models/*.onnx): a link adds none
    assert sorted(marks["models"]) == sorted(p.stem for p in MODELS.glob("*.onnx")), marks
    assert not pg.errors, pg.errors
    return marks


IGNORED = "link: ignored a name that is no setting of this page: "
HOSTILE_LINKS = [
    # Object.prototype's names: no lookup through an inherited key (before: TypeError at boot,
    # the model list empty, "Loading..." for ever)
    ("constructor=2", {}, [IGNORED + "“constructor”"]),
    ("__proto__=1", {}, [IGNORED + "“__proto__”"]),
    ("toString=1", {}, [IGNORED + "“toString”"]),
    ("hasOwnProperty=x", {}, [IGNORED + "“hasOwnProperty”"]),
    ("lr=0.01&valueOf=3", {}, [IGNORED + "“valueOf”"]),
    # a tracking parameter a newsletter adds: a notice, never a blocked Start
    ("utm_source=newsletter", {}, [IGNORED + "“utm_source”"]),
    # before: momentum dropped silently
    ("optimizer=adam&momentum=0.9", {}, ["momentum: “0.9” from the link does not apply to "
                                         "optimizer Adam (only to SGD, RMSprop); ignored"]),
    ("optimizer=adam&momentum=abc", {}, ["momentum: “abc” from the link does not apply to "
                                         "optimizer Adam (only to SGD, RMSprop); ignored"]),
    # before: 16
    ("lr=0x10", {"lr": "lr: “0x10” from the link is not a decimal number"}, []),
    # before: 0.2, silently
    ("lr=0.1&lr=0.2", {"lr": "lr: the link gives it 2 times (“0.1”, “0.2”); using the first, "
                             "“0.1”"}, []),
    # before: "must be a number > 0, got ''"
    ("lr=1e999", {"lr": "lr: “1e999” from the link is not a finite number"}, []),
    ("betas=0.9,x&optimizer=adam",
     {"betas": "betas: “0.9,x” from the link is not a list of numbers (it has “x”, which is "
               "not a number)"}, []),
    ("a=1&b=2&c=3&d=4&e=5&f=6&g=7", {}, ["link: ignored 7 names that are no setting of this "
                                         "page: “a”, “b”, “c”, “d”, “e” and 2 more"]),
    ("model=seednet&model=x", {}, ["model: the link gives it 2 times (“seednet”, “x”); using "
                                   "the first, “seednet”"]),
    ("trainable=fc2.weight,nope", {}, ["trainable: the link names 1 tensor(s) that seednet has "
                                       "no parameter of: “nope”; every parameter trains"]),
]
# links whose only marks are notices (names ignored: no setting, another optimizer's setting):
# listed, and Start may go (a link with ?utm_source=... must not block a run)
NOTICES_ONLY = {q for q, inline, rest in HOSTILE_LINKS
                if not inline and all(" ignored" in r for r in rest)}
assert len(NOTICES_ONLY) == 9
# what the form holds after each link (readFormForTests), where it matters
FORM_AFTER = {"lr=0.01&valueOf=3": {"lr": 0.01}, "lr=0x10": {"lr": "0x10"},
              "lr=0.1&lr=0.2": {"lr": 0.1}, "lr=1e999": {"lr": "1e999"},
              "optimizer=adam&momentum=0.9": {"optimizer": "adam", "momentum": None},
              "trainable=fc2.weight,nope": {"trainable": None}}


def test_hostile_share_links(bare_page, server):
    """Every hostile link opens: the model list is filled, each problem is marked with the
    link's value and Start waits (names ignored are notices: Start may go); then a link of them
    all boots to a ready worker with Start enabled, and an edit drops the notice."""
    pg = bare_page
    for query, inline, rest in HOSTILE_LINKS:
        marks = open_link(pg, server, query, next(iter(inline.values()), None) or rest[0])
        start = "" if query in NOTICES_ONLY else BLOCKED
        assert (marks["inline"], marks["rest"], marks["start"]) == (inline, rest, start), \
            query
        form = pg.evaluate("window.readFormForTests()")
        for k, v in FORM_AFTER.get(query, {}).items():
            assert form.get(k) == v, (query, k, form)
    everything = "constructor=2&__proto__=1&toString=1&hasOwnProperty=x&valueOf=3&lr=0.02"
    open_link(pg, server, everything, "link: ignored 5 names that are no setting of this page: "
              "“constructor”, “__proto__”, “toString”, “hasOwnProperty”, “valueOf”")
    pg.wait_for_function("window.appState.workerReady || window.appState.phase === 'error'",
                         timeout=BOOT_TIMEOUT_S * 1000)
    assert pg.evaluate("window.appState.phase") == "ready"
    # the ignored names are a notice: Start may go at once, the notice stays until an edit
    pg.wait_for_function("!document.querySelector('#start').disabled", timeout=WAIT_MS)
    assert len(pg.evaluate(MARKS)["rest"]) == 1
    pg.fill("#epochs", "2")
    pg.wait_for_function("document.querySelectorAll('#config-errors li').length === 0",
                         timeout=WAIT_MS)
    assert not pg.is_disabled("#start")
    assert pg.evaluate("window.readFormForTests()")["lr"] == 0.02
    assert not pg.errors, pg.errors


NOT_BUILT = "layers: the link's network was not built ("
# what Start waits for, and what the picker shows meanwhile (before: "; using seednet", as if
# the run went ahead with it while Start waited)
CHOOSE_MODEL = ": choose a model (seednet is selected)"
UNKNOWN_DATASET = ("dataset: the link's dataset “{}” is not on this server: choose one "
                   "(MNIST is selected)")
# share-link parameters the page could not use (before: a line in the log at most, the link's
# network or dataset replaced by the default silently) -> the marks below the form (a message
# ending in "…" is a prefix: V8's JSON.parse words) and what the form keeps of the rest
UNUSED_PARAMS = [
    ("layers=" + urllib.parse.quote('[{"op":"nope"}]') + "&lr=0.02&optimizer=adam&epochs=3",
     [f"{NOT_BUILT}layer 0 op: 'nope': expected one of {OPS}){CHOOSE_MODEL}"],
     {"lr": 0.02, "optimizer": "adam", "epochs": 3}),
    ("layers=" + urllib.parse.quote('[{"op":"conv"') + "&seed=7",
     [NOT_BUILT + "not JSON (…"], {"seed": 7}),
    ("layers=__proto__&lr=0.05", [NOT_BUILT + "not JSON (…"], {"lr": 0.05}),
    ("layers=" + urllib.parse.quote('{"constructor":1}') + "&epochs=5",
     [NOT_BUILT + 'the layer list: layers: expected a list of layers [{"op": ...}, ...]; got '
      '{"constructor": 1})' + CHOOSE_MODEL],
     {"epochs": 5}),
    ("layers=" + "[" * 40 + "]" * 40 + "&lr=0.06",  # before: "not JSON (Maximum call stack…"
     [NOT_BUILT + "arrays or objects nest more than 32 levels deep (the limit))" +
      CHOOSE_MODEL], {"lr": 0.06}),
    ("dataset=nope&lr=0.03", [UNKNOWN_DATASET.format("nope")], {"lr": 0.03}),
    ("dataset=constructor", [UNKNOWN_DATASET.format("constructor")], {}),
    ("model=&lr=0.04", ["model: the link's model “” is not on this server: choose one "
                        "(seednet is selected)"], {"lr": 0.04}),
    ("trainable=&epochs=4", ["trainable: “” from the link names no parameter; every parameter "
                             "trains"], {"epochs": 4, "trainable": None}),
]


# the run bar's status line once the engine is ready, by the link's first parameter (before:
# "Ready. Choose settings and press Start." with Start disabled, the mark out of view)
WAITS = {"layers": "layers= not built: choose a model",
         "dataset": "dataset= unknown: choose a dataset",
         "model": "model= unknown: choose a model",
         "trainable": "trainable= empty: tick what trains (Inside the model) or choose the "
                      "model again"}
READY = "Ready. Choose settings and press Start."


def test_share_link_parameters_not_used_are_marked(bare_page, server):
    """A link's `layers` that cannot be built (a bad op, not JSON, inherited names), a dataset
    or model the server lacks (or an empty one) and an empty `trainable` are marked below the
    form naming the parameter and the problem, Start waits, and the link's other settings are
    kept in the form; the run bar says why Start waits (the parameter, what to do) and its
    "Show" scrolls to the mark and focuses it; choosing a model (a dataset) by hand drops the
    mark, keeps them, and the run bar says "Ready" again."""
    pg = bare_page
    for query, want, kept in UNUSED_PARAMS:
        pg.goto(f"{server}/?{query}")
        needle = want[0].removesuffix("…")
        pg.wait_for_function(
            "(needle) => document.querySelector('#model option[value=seednet]') && "
            "[...document.querySelectorAll('#config-errors li')]"
            ".some((e) => e.textContent.startsWith(needle))", arg=needle, timeout=WAIT_MS)
        marks = pg.evaluate(MARKS)
        assert len(marks["rest"]) == len(want) and marks["inline"] == {}, (query, marks)
        for got, w in zip(marks["rest"], want):
            assert got.startswith(w[:-1]) if w.endswith("…") else got == w, (query, got)
        assert marks["start"] == BLOCKED, query
        assert pg.input_value("#model") == "seednet" and pg.input_value("#dataset") == "mnist"
        form = pg.evaluate("window.readFormForTests()")
        for k, v in kept.items():
            assert form.get(k) == v, (query, k, form)
        param = query.split("=")[0]
        pg.wait_for_function("window.appState.workerReady", timeout=BOOT_TIMEOUT_S * 1000)
        pg.wait_for_function("document.querySelector('#show-link-mark')", timeout=WAIT_MS)
        assert pg.text_content("#status") == f"Start waits. Link parameter {WAITS[param]}. Show"
        assert pg.is_disabled("#start")
        pg.evaluate("window.scrollTo(0, 0)")
        pg.click("#show-link-mark")
        focused = pg.evaluate("""() => { const e = document.activeElement;
          const r = e.getBoundingClientRect();
          return {mark: e.dataset.markFor ?? null, text: e.textContent,
                  seen: r.top >= 0 && r.bottom <= innerHeight}; }""")
        assert focused == {"mark": param, "text": marks["rest"][0], "seen": True}, query
        chooser = "#dataset" if param == "dataset" else "#model"
        pg.select_option(chooser, pg.input_value(chooser))  # chosen by hand: the mark goes
        pg.wait_for_function("document.querySelectorAll('#config-errors li').length === 0",
                             timeout=WAIT_MS)
        form = pg.evaluate("window.readFormForTests()")
        assert all(form.get(k) == v for k, v in kept.items()), (query, form)
        pg.wait_for_function("!document.querySelector('#start').disabled", timeout=WAIT_MS)
        assert pg.text_content("#status") == READY, query
    assert not pg.errors, pg.errors


def test_unknown_dataset_says_what_is_selected(bare_page, server):
    """A link's dataset the server lacks, named as markup: the mark says to choose one and which
    is selected meanwhile (before: "; using mnist" while Start waited for a choice), the name
    as literal text; the log says the same; Start waits."""
    pg = bare_page
    name = "<img src=x onerror=alert(1)>"
    dialogs = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pg.goto(f"{server}/?dataset={urllib.parse.quote(name)}")
    pg.wait_for_function("document.querySelector('#config-errors li')", timeout=WAIT_MS)
    marks = pg.evaluate(MARKS)
    assert (marks["inline"], marks["rest"], marks["start"]) == \
        ({}, [UNKNOWN_DATASET.format(name)], BLOCKED)
    assert pg.input_value("#dataset") == "mnist" and pg.is_disabled("#start")
    assert pg.eval_on_selector_all("#config-errors img, #log img", "es => es.length") == 0
    logged = pg.eval_on_selector_all("#log li.log-error", "ls => ls.map((l) => l.textContent)")
    assert [t.split(" ", 1)[1] for t in logged] == \
        [f'The dataset "{name}" is not on this server; MNIST is selected'], logged
    assert dialogs == [] and not pg.errors, (dialogs, pg.errors)


def test_share_link_parameter_shown_on_a_phone(chromium, server):
    """At phone width the settings are folded: the run bar says why Start waits (before: the
    status line hidden, the mark in folded settings) and "Show" unfolds them to the mark."""
    ctx = chromium.new_context(viewport={"width": 390, "height": 844})
    pg = ctx.new_page()
    try:
        pg.goto(f"{server}/?dataset=nope")
        pg.wait_for_function("document.querySelector('#show-link-mark')",
                             timeout=BOOT_TIMEOUT_S * 1000)
        assert pg.is_visible("#status") and pg.is_visible("#show-link-mark")
        assert pg.text_content("#status") == f"Start waits. Link parameter {WAITS['dataset']}." \
                                             " Show"
        assert pg.get_attribute("#settings-toggle", "aria-expanded") == "false"
        pg.click("#show-link-mark")
        assert pg.get_attribute("#settings-toggle", "aria-expanded") == "true"
        assert pg.evaluate("document.activeElement.dataset.markFor") == "dataset"
        assert pg.is_visible("#config-errors li[data-mark-for=dataset]")
    finally:
        ctx.close()


def test_share_link_keeps_the_fine_tuning_selection(bare_page, server):
    """"Head only" (SeedNet's last layers) goes into the share link as `trainable`; opening
    the link ticks the same parameters."""
    pg = bare_page
    pg.goto(server)
    pg.wait_for_function("window.appState && window.appState.summary", timeout=WAIT_MS)
    pg.click("#tab-model")
    pg.click("#train-head")
    pg.click("#share")
    link = pg.input_value("#share-url")
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(link).query))
    head = ["fc2.weight", "fc2.bias", "norm2.weight", "norm2.bias"]
    assert query["trainable"] == ",".join(head) and query["init"] == "finetune", query
    want = pg.evaluate("window.readFormForTests()")
    assert want["trainable"] == head
    pg.goto(link)
    pg.wait_for_function("window.readFormForTests && window.appState.summary && "
                         "window.readFormForTests().trainable !== null", timeout=WAIT_MS)
    assert pg.evaluate("window.readFormForTests()") == want
    pg.wait_for_function("document.querySelector('#start').title === ''", timeout=WAIT_MS)
    assert not pg.errors, pg.errors


NUMBERS = [  # typed into a field -> its inline message (before: lr '' or 0.01 or 10)
    ("lr", "abc", "lr: “abc” is not a number"),
    ("lr", "0.0.1", "lr: “0.0.1” is not a number"),
    ("lr", "0x10", "lr: “0x10” is not a decimal number"),
    ("lr", "1e999", "lr: “1e999” is not a finite number"),
    ("lr", "Infinity", "lr: “Infinity” is not a finite number"),
    ("seed", "12abc", "seed: “12abc” is not a number"),
    ("betas", "0.9, x", "betas: “0.9, x” is not a list of numbers (it has “x”, which is not a "
                        "number)"),
]


def import_file(pg, path, doc: str):
    path.write_text(doc)
    pg.evaluate("document.querySelector('#work-note').textContent = ''; "
                "document.querySelector('#config-import-errors').hidden = true")
    pg.set_input_files("#work-config-file", str(path))
    pg.wait_for_function("!document.querySelector('#config-import-errors').hidden || "
                         "document.querySelector('#work-note').textContent", timeout=WAIT_MS)
    return pg.evaluate("""() => ({
      errors: document.querySelector('#config-import-errors').hidden ? null
        : [...document.querySelectorAll('#config-import-errors li')].map((li) => li.textContent),
      note: document.querySelector('#work-note').textContent})""")


REFUSED = "imp.json has settings the trainer refuses, nothing was changed:"
DEEP = "imp.json is not a settings file, nothing was changed:"
TOO_DEEP = ("file: arrays or objects nest more than 32 levels deep (the limit; a settings file "
            "needs 3)")
IMPORTS = [
    # before: "Imported the settings..." with lr and seed emptied
    ('{"lr": 1e999, "seed": 1e999}',
     [REFUSED, "lr: 1e999 is not a finite number", "seed: 1e999 is not a finite number"]),
    ('{"model": "seednet", "config": {"optimizer": "adam", "betas": [0.9, -1E999]}}',
     [REFUSED, "betas[1]: -1E999 is not a finite number"]),
    ('{"lr": 1' + "0" * 400 + ', "epochs": 0}',
     [REFUSED, "lr: 1" + "0" * 38 + "… is not a finite number",
      "epochs: must be an integer in [1, 1000], got 0"]),
    ('{"trainable": ["fc2.weight", "nope"]}',
     [REFUSED, "trainable: seednet has no parameter named “nope”"]),
    ('{"model": 5, "config": {}}',
     ["imp.json does not fit here, nothing was changed:",
      "model: must be a model's name (text), got “5”"]),
    # a network built in the page that cannot be built again (before: "no model named
    # “built-x”", the reason only in the hidden Build tab)
    ('{"model": "built-x", "layers": [{"op": "nope"}], "config": {}}',
     ["imp.json does not fit here, nothing was changed:",
      f"layers: the file's network was not built: layer 0 op: 'nope': expected one of {OPS}"]),
    # before: "imp.json is not JSON", "file: Maximum call stack size exceeded"
    ('{"config": {"lr": ' + "[" * 100_000 + "]" * 100_000 + "}}", [DEEP, TOO_DEEP]),
    ('{"model": "seednet", "config": {"betas": ' + "[" * 31 + "]" * 31 + "}}",
     [DEEP, TOO_DEEP]),  # 33 levels; brackets inside strings do not count:
    ('{"config": {"lr": "' + "[" * 50 + '"}}',
     [REFUSED, "lr: must be a number > 0, got '" + "[" * 40 + "'... (50 characters)"]),
    # the server's message, its list of the known options cut here
    ('{"constructor": 1}', [REFUSED, "constructor: unknown option (known: optimizer, lr, "]),
]


def test_number_fields_and_imports(bare_page, server, tmp_path):
    """A number field keeps what was typed and names it; an import with a bad value changes
    nothing (the form's values compared before / after) and names each bad field with the
    file's value; a good one that holds a command-line setting says it was left out."""
    pg = bare_page
    pg.goto(server)
    pg.wait_for_function("window.appState && window.appState.summary && "
                         "document.querySelector('#lr')",
                         timeout=WAIT_MS)
    pg.evaluate("document.querySelector('#advanced').open = true")
    for field, typed, message in NUMBERS:
        old = pg.input_value(f"#{field}")
        pg.fill(f"#{field}", typed)
        pg.wait_for_function(f"document.querySelector('#{field}-error').textContent === "
                             f"{json.dumps(message)} && !document.querySelector("
                             f"'#{field}-error').hidden", timeout=WAIT_MS)
        assert pg.input_value(f"#{field}") == typed  # kept as typed
        assert pg.get_attribute(f"#{field}", "aria-invalid") == "true"
        assert pg.get_attribute("#start", "title") == BLOCKED
        pg.fill(f"#{field}", old)
        pg.wait_for_function(f"!document.querySelector('#{field}').hasAttribute('aria-invalid')",
                             timeout=WAIT_MS)
    pg.fill("#lr", "2.5e-3")
    pg.wait_for_function("document.querySelector('#start').title === ''", timeout=WAIT_MS)
    before = pg.evaluate("window.readFormForTests()")
    assert before["lr"] == 0.0025
    path = tmp_path / "imp.json"
    for doc, want in IMPORTS:
        got = import_file(pg, path, doc)
        assert got["errors"][:-1] == want[:-1], doc
        assert got["errors"][-1] == want[-1] or want[-1].endswith(", ") and \
            got["errors"][-1].startswith(want[-1]), (doc, got)
        assert pg.evaluate("window.readFormForTests()") == before, doc  # nothing changed
        assert pg.input_value("#lr") == "2.5e-3"
    got = import_file(pg, path, '{"lr": 0.004, "report_every": 5}')
    assert got == {"errors": None, "note": "Imported the settings of imp.json. Left out what "
                   "this page does not set (the command line's): report_every."}
    assert pg.evaluate("window.readFormForTests()") == {**before, "lr": 0.004}
    assert not pg.errors, pg.errors

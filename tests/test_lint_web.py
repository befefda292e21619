"""ESLint over web/ (web/eslint.config.mjs, eslint pinned in web/package.json and installed by
``npm ci --prefix web``, which ``./run setup`` does): no finding may remain, and the rules
still catch what they are there for (a name nothing defines, an import nothing uses, a line
over 100 columns)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

WEB = Path(__file__).resolve().parents[1] / "web"
ESLINT = WEB / "node_modules" / "eslint" / "bin" / "eslint.js"


def eslint(*args: str, stdin: str | None = None) -> list[dict]:
    """ESLint's JSON report (one entry per file) for ``args``, run from web/."""
    assert ESLINT.is_file(), f"{ESLINT} is missing: run ./run setup (npm ci --prefix web)"
    proc = subprocess.run(["node", str(ESLINT), "--format", "json", *args], cwd=WEB,
                          input=stdin, capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # 1: findings, 2: a crash
    return json.loads(proc.stdout)


def test_web_has_no_lint_findings():
    report = eslint(".")
    found = [f"web/{Path(f['filePath']).relative_to(WEB)}:{m['line']}: {m['ruleId']}: "
             f"{m['message']}" for f in report for m in f["messages"]]
    assert not found, "\n".join(found)
    linted = {str(Path(f["filePath"]).relative_to(WEB)) for f in report}
    for app in ("page/app.js", "teacher/teacher.js", "dev/parity.js", "lib/util.js",
                "lib/worker.js", "eslint.config.mjs"):
        assert app in linted, app
    assert not any(p.startswith("node_modules") for p in linted)


def test_the_rules_catch_real_bugs():
    probe = ('import { $, el } from "../lib/util.js";\n'
             "export const shown = () => $(\"status\") && statusText;\n"
             f"export const long = \"{'x' * 100}\";\n")
    report = eslint("--stdin", "--stdin-filename", "page/probe.js", stdin=probe)
    found = [(m["line"], m["ruleId"], m["message"]) for m in report[0]["messages"]]
    assert found == [
        (1, "no-unused-vars", "'el' is defined but never used."),
        (2, "no-undef", "'statusText' is not defined."),
        (3, "max-len", "This line has a length of 123. Maximum allowed is 100."),
    ]


def test_one_module_defines_the_dom_and_number_helpers():
    """`$`, `el`, `pct`, `num` and `frac` are web/lib/util.js's alone (`el` was defined 5
    times); no other module defines one at its top level: they import them."""
    import re
    helper = re.compile(r"^(?:export\s+)?(?:const|let|function)\s+(\$|el|pct|num|frac)(?![\w$])",
                        re.M)
    found = {}
    for path in sorted(WEB.glob("*/*.js")):
        if path.parts[-2] == "node_modules":
            continue
        for name in helper.findall(path.read_text()):
            found.setdefault(name, []).append(str(path.relative_to(WEB)))
    assert found == {name: ["lib/util.js"] for name in ("$", "frac", "pct", "num", "el")}


def test_node_loads_web_modules_without_a_type_warning():
    """Node (the Dawn harness, benchmarks/dawn/, imports web/lib/worker.js) reads web/'s files
    as ES modules because web/package.json says "type": "module": no MODULE_TYPELESS_PACKAGE_JSON
    warning (the reparse it announces). verdict.js: a module of web/lib with no side effects."""
    url = (WEB / "lib" / "verdict.js").as_uri()
    proc = subprocess.run(["node", "--input-type=module", "-e",
                           f"const m = await import({json.dumps(url)}); "
                           "console.log(Object.keys(m).length > 0)"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "true", proc.stderr
    assert "MODULE_TYPELESS_PACKAGE_JSON" not in proc.stderr, proc.stderr

"""The linters of the test command: ruff over every Python file (its rules: pyproject.toml's
[tool.ruff]).

A pytest test rather than a step of ./run before pytest: every way of running the suite
(./run test, .ci/run, plain pytest) runs it, a finding is one failed test listing file:line and
rule beside the other results instead of an abort before them, and ``./run test
tests/test_x.py`` alone is not blocked by a finding elsewhere. ``./run lint`` runs ruff alone.
"""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def ruff(*args, cwd=REPO) -> subprocess.CompletedProcess:
    """``ruff check`` with the repository's configuration (the test extra's pinned ruff)."""
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache",
                           "--output-format", "concise", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_ruff_finds_nothing():
    res = ruff(".")
    assert res.returncode == 0, ("ruff check found problems (fix them, or for a reason add a "
                                 "per-file ignore in pyproject.toml):\n" + res.stdout
                                 + res.stderr)


def test_ruff_applies_the_project_rules(tmp_path):
    """The configuration is the one in effect: an unused import, a 101-column line and a
    loop variable captured by a closure are each reported; 100 columns are not."""
    src = tmp_path / "bad.py"
    long = "x = 1  # " + "word " * 18 + "ab"
    assert len(long) == 101
    src.write_text("import os\n\n" + long + "\n" + long[:-1] + "\n"
                   + "fs = []\nfor i in range(3):\n    fs.append(lambda: i)\n")
    res = ruff("--config", str(REPO / "pyproject.toml"), "bad.py", cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    found = [line.split()[:2] for line in res.stdout.splitlines()
             if line.startswith("bad.py:")]
    assert found == [["bad.py:1:8:", "F401"], ["bad.py:3:101:", "E501"],
                     ["bad.py:7:23:", "B023"]], res.stdout

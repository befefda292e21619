"""The native engine computes BIT-IDENTICAL numbers to tests/fixtures/golden.json.

The fixture (tests/golden.py says what it holds; scripts/record_golden.py writes it) was
recorded before the refactor of issue 17 (op cards, engine/train + engine/tools, the worker
package, kernels bound by name, the importer as stages): that refactor must not change one bit
of SeedNet's 50-step loss curve, the self-check's results or any op case's forward and gradient
numbers. Re-record only for a change meant to change numbers (a new kernel, a bug fix, a new
case), with the reason stated in the commit message.

Bit-identity holds on the adapter that recorded the fixture (its "adapter": lavapipe on
Vulkan). On another adapter (another driver, ``--backends opengl``) float32 rounding may differ
in the last bits, so there the stored leading values of each array are compared with a
tolerance instead (``OTHER_ADAPTER_RTOL``) and the hashes are not.
"""

import json

import numpy as np
import pytest

import golden
from conftest import run

OTHER_ADAPTER_RTOL = {"cases": 1e-4, "seednet": 1e-2}
SHOWN = 8  # differences listed in a failure message


@pytest.fixture(scope="module")
def fixture():
    doc = json.loads(golden.FIXTURE.read_text())
    assert doc["format"] == golden.FORMAT, f"{golden.FIXTURE}: format {doc['format']!r}"
    return doc


def _same_adapter(device, fixture) -> bool:
    return golden.adapter(device) == fixture["adapter"]


def _canon(value) -> str:
    return json.dumps(value, sort_keys=True)  # NaN == NaN here, 0.0 != -0.0


def _numbers(value) -> list:
    """The numbers of a recorded value in a fixed order (hashes and other strings left out)."""
    if isinstance(value, dict):
        return [x for k in sorted(value) if k != "sha256" for x in _numbers(value[k])]
    if isinstance(value, list):
        return [x for v in value for x in _numbers(v)]
    return [value] if isinstance(value, (int, float)) else []


def _close(got, want, rtol) -> bool:
    """Same structure, and ``max|got - want| <= rtol * max(max|want|, 1e-6)`` over the
    numbers of each (the tests' relative error)."""
    g, w = np.array(_numbers(got), float), np.array(_numbers(want), float)
    if _canon(_shape(got)) != _canon(_shape(want)) or g.shape != w.shape:
        return False
    return not w.size or bool(np.abs(g - w).max() <= rtol * max(np.abs(w).max(), 1e-6))


def _shape(value):
    """A value's structure: keys and lengths, not numbers."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items() if k != "sha256"}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__


def _diffs(got, want, path: str) -> list:
    """``path.key: got G, want W`` for each differing leaf (a dict's key, else the value)."""
    if isinstance(got, dict) and isinstance(want, dict):
        return [d for k in sorted(got.keys() | want.keys(), key=str)
                for d in _diffs(got.get(k), want.get(k), f"{path}.{k}")]
    if _canon(got) == _canon(want):
        return []
    return [f"{path}: got {_canon(got)[:200]}, want {_canon(want)[:200]}"]


def _assert_same(what, got: dict, want: dict, exact: bool, rtol: float):
    """``got`` == ``want`` key by key (bit for bit when ``exact``, else ``_close``); the failure
    names the first differing keys and fields with both values."""
    assert got.keys() == want.keys(), (
        f"{what}: missing {sorted(want.keys() - got.keys())[:SHOWN]}, "
        f"new {sorted(got.keys() - want.keys())[:SHOWN]}")
    same = (lambda g, w: _canon(g) == _canon(w)) if exact else (
        lambda g, w: _close(g, w, rtol))
    bad = [k for k in want if not same(got[k], want[k])]
    shown = [d for k in bad[:SHOWN] for d in _diffs(got[k], want[k], str(k))][:SHOWN]
    assert not bad, (f"{what}: {len(bad)} of {len(want)} differ from {golden.FIXTURE.name} "
                     f"({'bit for bit' if exact else f'rtol {rtol:g}'}), e.g.\n  "
                     + "\n  ".join(shown))


@pytest.mark.parametrize("name", golden.FAMILIES)
def test_op_cases(device, fixture, name):
    """Every recorded case of family ``name``: loss, output, named activations and gradients,
    the gradient and weight buffers. Cases added after the recording are not compared (record
    again to cover them); a recorded case that no longer exists fails."""
    cases = golden.family(name).CASES
    want = {k: v for k, v in fixture["cases"].items() if k.split("/", 1)[0] == name}
    assert want, f"{name}: no recorded case"
    got = run(golden.op_cases(device, [c for c in cases if c.id in want]))
    _assert_same(f"op cases of {name}", got, want, _same_adapter(device, fixture),
                 OTHER_ADAPTER_RTOL["cases"])


def test_selfcheck(device, fixture):
    """The self-check's rows (case, check, error against the float64 references). On another
    adapter: the same rows, each within its tolerance (the self-check's own verdict)."""
    rows = run(golden.selfcheck_rows(device))
    if _same_adapter(device, fixture):
        _assert_same("self-check", dict(enumerate(rows)), dict(enumerate(fixture["selfcheck"])),
                     True, 0.0)
    else:
        assert [r[:2] for r in rows] == [r[:2] for r in fixture["selfcheck"]]
        worst = max(r[2] / golden.selfcheck.TOLERANCES[r[1]] for r in rows)
        assert worst <= 1.0, f"self-check: an error {worst:.2f} times its tolerance"


def test_seednet_50_steps(device, fixture):
    """SeedNet's 50-step loss curve (loss, accuracy, lr per step), its test loss and accuracy
    and the sha256 of its trained weights."""
    assert fixture["seednet_config"] == golden.SEEDNET, "SEEDNET changed: record again"
    steps, after = run(golden.seednet(device))
    assert [s[0] for s in steps] == list(range(1, 51))
    if _same_adapter(device, fixture):
        _assert_same("SeedNet steps", {s[0]: s for s in steps},
                     {s[0]: s for s in fixture["seednet_steps"]}, True, 0.0)
        _assert_same("SeedNet after training", after, fixture["seednet"], True, 0.0)
    else:  # the losses only: one image more or less right moves an accuracy by 1/16
        _assert_same("SeedNet losses", {s[0]: s[1] for s in steps},
                     {s[0]: s[1] for s in fixture["seednet_steps"]}, False,
                     OTHER_ADAPTER_RTOL["seednet"])


def test_other_adapter_comparison():
    """The tolerance comparison used on another adapter: within ``rtol`` of the largest value
    passes, a value off by more or a changed structure fails; hashes are not compared."""
    want = {"output": {"n": 3, "sha256": "aa", "head": [2.0, -1.0, 0.5]}, "loss": 0.25}
    near = {"output": {"n": 3, "sha256": "bb", "head": [2.0 + 1e-4, -1.0, 0.5]}, "loss": 0.25}
    assert _close(near, want, 1e-4) and not _close(near, want, 1e-5)
    assert not _close({**near, "loss": 0.26}, want, 1e-4)
    assert not _close({"output": {**near["output"], "head": [2.0, -1.0]}, "loss": 0.25}, want,
                      1e-4)
    assert not _close({"output": near["output"]}, want, 1e-4)

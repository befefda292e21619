"""The case lists follow the ops: one list per op family of engine/ops (tests/cases/<family>.py)
with a test file running every case natively, every registered op type in its family's cases
and in the browser's, unique case ids; every op's card declares its ONNX attribute defaults
(ATTRS) and every op has a row in README.md's op table."""

import pathlib
import re

import pytest

from cases import FAMILIES, browser_cases, family
from webgpu_trainer.engine import ops

TESTS = pathlib.Path(__file__).parent
# Families that are not op modules: the plan between the ops, the optimizers (browser only).
EXTRA = {"plan": "test_plan.py", "optim": "test_parity.py"}
OP_MODULES = sorted({m.__name__.rsplit(".", 1)[1] for m in ops.OPS.values()} | {"losses"})


def _op_types(cases):
    return {n["op_type"] for c in cases for n in c.graph["nodes"]}


def test_one_family_per_op_module():
    assert sorted(set(FAMILIES) - set(EXTRA)) == OP_MODULES
    for name in FAMILIES:
        test_file = EXTRA.get(name, f"test_ops_{name}.py")
        assert (TESTS / test_file).is_file(), f"{name}: no {test_file}"
        assert (TESTS / "cases" / f"{name}.py").is_file()


@pytest.mark.parametrize("name", sorted(set(FAMILIES) - set(EXTRA) - {"losses"}))
def test_every_op_type_in_its_family(name):
    types = {t for t, m in ops.OPS.items() if m.__name__.endswith("." + name)}
    assert types <= _op_types(family(name).CASES), f"{name}: no case for {types}"


def test_every_op_type_runs_in_the_browser():
    in_browser = set().union(*(_op_types(browser_cases(name)) for name in FAMILIES))
    assert set(ops.OPS) <= in_browser, sorted(set(ops.OPS) - in_browser)
    losses = {c.loss["loss"] for c in browser_cases("losses") if isinstance(c.loss, dict)
              and "loss" in c.loss}
    assert losses == {"cross_entropy", "nll", "mse", "bce_with_logits"}


def test_case_ids_unique_and_prefixed():
    seen = set()
    for name in FAMILIES:
        cases = family(name).CASES
        assert cases, name
        for c in cases:
            assert c.id.startswith(name + "/") and c.id not in seen, c.id
            seen.add(c.id)


def test_every_op_has_a_card():
    """Each op type the engine runs has ATTRS on its own module (the importer's defaults), and
    the importer maps exactly the ops of the cards (IMPORT_OPS = OPS | IMPORT_ONLY)."""
    from webgpu_trainer.onnx_io.constants import IMPORT_ONLY, IMPORT_OPS
    for t, m in ops.OPS.items():
        assert t in getattr(m, "ATTRS", {}), f"{t}: no ATTRS in {m.__name__}"
        assert ops.CARDS[t] is m, t
    assert IMPORT_OPS == set(ops.OPS) | IMPORT_ONLY == set(ops.CARDS)
    assert not IMPORT_ONLY & set(ops.OPS)


def test_every_op_has_a_readme_row():
    """README.md's op table (the rows between "| family | ops |" and the blank line after it)
    names every op type the engine runs, and the "cannot train yet" list none of them (the
    list is there exactly when the importer maps ops the engine cannot train)."""
    from webgpu_trainer.onnx_io.constants import IMPORT_ONLY
    text = (TESTS.parent / "README.md").read_text()
    table = text.split("| family | ops |", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"[A-Z][A-Za-z0-9]+", table))  # ReduceL2
    assert set(ops.OPS) <= named, sorted(set(ops.OPS) - named)
    assert ("engine cannot train yet (" in text) == bool(IMPORT_ONLY), sorted(IMPORT_ONLY)
    if IMPORT_ONLY:
        refused = text.split("engine cannot train yet (", 1)[1].split(")", 1)[0]
        assert not set(re.findall(r"[A-Z][A-Za-z0-9]+", refused)) & set(ops.OPS)


def _filled(op, opset, attrs=None, shapes=None, outputs=("y",)):
    node = {"name": "n", "op_type": op, "inputs": ["x", "w"], "outputs": list(outputs),
            "attrs": dict(attrs or {})}
    problems = ops.fill_defaults(node, opset, lambda name: (shapes or {}).get(name))
    return node["attrs"], problems


def test_card_defaults_by_opset_and_rank():
    """The cards' ONNX defaults: rank from the Conv weight, auto_pad SAME_UPPER on a 7 x 9
    input with stride 2 (pads 1,1 / 1,1: ONNX's formula by hand), AveragePool dilations only
    from opset 19, BatchNormalization's training_mode from its outputs before opset 14,
    Softmax's axis 1 before opset 13 (a problem for a 4-D input), Concat without axis."""
    attrs, problems = _filled("Conv", 13, {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
                              {"x": [1, 3, 7, 9], "w": [4, 3, 3, 3]})
    assert attrs == {"auto_pad": "NOTSET", "strides": [2, 2], "kernel_shape": [3, 3],
                     "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": 1} and not problems
    assert "dilations" not in _filled("AveragePool", 18, {"kernel_shape": [2, 2]})[0]
    assert _filled("AveragePool", 19, {"kernel_shape": [2, 2]})[0]["dilations"] == [1, 1]
    assert _filled("BatchNormalization", 9, outputs=("y", "m", "v"))[0]["training_mode"] == 1
    assert _filled("BatchNormalization", 14, outputs=("y", "m", "v"))[0]["training_mode"] == 0
    attrs, problems = _filled("Softmax", 11, shapes={"x": [2, 3, 4, 5]})
    assert attrs == {"axis": 1} and problems == [
        "node n (Softmax): opset 11 Softmax flattens its 4-D input; re-export with opset >= 13"]
    assert _filled("Softmax", 13)[0] == {"axis": -1}
    assert _filled("Concat", 13) == ({}, ["node n (Concat) has no axis attribute"])
    assert _filled("Softsign", 13) == ({}, [])

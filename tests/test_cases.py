"""The case lists follow the ops: one list per op family of engine/ops (tests/cases/<family>.py)
with a test file running every case natively, every registered op type in its family's cases
and in the browser's, unique case ids."""

import pathlib

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

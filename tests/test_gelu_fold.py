"""engine/rewrites/gelu.py: the TorchScript exporter's erf GELU (Div, Erf, Add, Mul, Mul) folded
into one Gelu node. The unary case of that pattern (tests/cases/unary.py) trained folded
(nothing kept) against the float64 numpy engine of the five ops, with fewer dispatches; what is
not folded."""

import copy

import pytest

from cases import by_id, unary
from harness import compare, one_step, op_types, oracle
from conftest import run
from webgpu_trainer.engine import builder
from webgpu_trainer.engine.rewrites import gelu
from webgpu_trainer.engine.graph import Graph

CASE = by_id(unary.CASES, "gelu_torchscript_pattern_7")


def test_fold_is_one_gelu_named_after_the_erf():
    g = Graph(CASE.graph)
    folded = gelu.fold(g, g.shapes(2))
    ops = op_types(folded)
    assert "Gelu" in ops and not {"Div", "Erf", "Mul"} & set(ops)
    node = next(n for n in folded.nodes if n["op_type"] == "Gelu")
    assert node["inputs"] == ["h"] and node["outputs"] == ["u"] and node["name"] == "/Erf_e"
    assert node["attrs"] == {"approximate": "none"}


def test_folded_gelu_trains_like_the_fiveop_types(device, monkeypatch):
    """Folded (nothing kept) against the numpy engine's five ops: loss, output, every
    parameter gradient; at least 6 fewer dispatches than op by op."""
    res = run(one_step(device, CASE.graph, CASE.blob, CASE.x, CASE.labels))
    compare(CASE.id, res, oracle(CASE))
    assert "Gelu" in op_types(res["plan"].graph)
    monkeypatch.setattr(builder.Builder, "FOLD_GELU", False)
    off = run(one_step(device, CASE.graph, CASE.blob, CASE.x, CASE.labels))
    assert "Gelu" not in op_types(off["plan"].graph)
    n_on, n_off = (len(r["plan"].fwd_train) + len(r["plan"].bwd) for r in (res, off))
    assert n_on <= n_off - 6, (n_on, n_off)


@pytest.mark.parametrize("change", ["constant", "second_reader", "kept"])
def test_not_folded(change):
    """Another constant (x / 2), a second reader of Erf's output, or a kept intermediate
    leave the five ops as they are."""
    graph = copy.deepcopy(CASE.graph)
    keep = ()
    if change == "constant":
        graph["constants"]["sqrt2"]["values"] = [2.0]
    elif change == "second_reader":
        graph["nodes"].append({"name": "/Add_x", "op_type": "Add", "inputs": ["e", "u"],
                               "outputs": ["x2"], "attrs": {}})
    else:
        keep = {"a"}
    g = Graph(graph)
    assert gelu.fold(g, g.shapes(2), keep) is g


def _dynamo_order(graph):
    """The pattern as the dynamo exporter writes it: Mul(., 0.5) before Mul(x, .)."""
    graph = copy.deepcopy(graph)
    nodes = graph["nodes"]
    mx = next(n for n in nodes if n["op_type"] == "Mul" and n["outputs"] == ["m"])
    mh = next(n for n in nodes if n["op_type"] == "Mul" and n["outputs"] == ["u"])
    mx.update(inputs=["half", "a"], outputs=["m"])  # 0.5 * (1 + erf)
    mh.update(inputs=["h", "m"])                     # x * that
    return graph


def test_dynamo_order_folds_and_trains_like_the_five_ops(device):
    """0.5 * (1 + erf) first, then x (torch.onnx.export(dynamo=True)): one Gelu as well, whose
    step matches the float64 numpy engine of the five ops in that order."""
    import dataclasses
    dyn = dataclasses.replace(CASE, graph=_dynamo_order(CASE.graph))
    g = Graph(dyn.graph)
    folded = gelu.fold(g, g.shapes(2))
    assert op_types(folded).count("Gelu") == 1
    assert not {"Div", "Erf", "Mul"} & set(op_types(folded))
    res = run(one_step(device, dyn.graph, dyn.blob, dyn.x, dyn.labels))
    assert "Gelu" in op_types(res["plan"].graph)
    compare("gelu dynamo order", res, oracle(dyn))

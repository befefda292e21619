"""engine/rewrites/gather_joins.py: an LSTM's / GRU's W, R and B Gathers (weight_layouts' gate
reorders, over neighbouring weights) joined into one Gather and views of its parts. The
torch-exported fixtures joined and not: the same floats, 2 dispatches fewer each way, the guard
and the optimizer's mask unchanged; what must not join stays apart. Training the joined layers
against torch in float64: tests/test_rnn_models.py (every LSTM / GRU there is joined)."""

from pathlib import Path

import numpy as np
import pytest

from conftest import make_graph, node, run
from harness import one_step
from webgpu_trainer import onnx_io
from webgpu_trainer.engine import builder
from webgpu_trainer.engine.graph import Graph
from webgpu_trainer.engine.rewrites import gather_joins

ZOO = Path(__file__).parent / "fixtures" / "zoo"


@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_rnn_weight_gathers_join_to_the_same_floats(device, name, monkeypatch):
    from webgpu_trainer.engine.train.guard import Guard, watched
    graph, blob = onnx_io.load_bundle(ZOO / f"{name}-ts.onnx")
    dims = [d for d in graph["inputs"][0]["shape"][1:]]
    rng = np.random.default_rng(9)
    x = rng.standard_normal((5, *dims)).astype(np.float32)
    labels = rng.integers(0, 10, 5)
    res = {}
    for join in (True, False):
        monkeypatch.setattr(builder.Builder, "JOIN_WEIGHT_GATHERS", join)
        res[join] = run(one_step(device, graph, blob, x, labels))
    on, off = res[True], res[False]
    assert on["loss"] == off["loss"]
    out = off["plan"].graph.output
    assert np.array_equal(on["acts"][out], off["acts"][out])
    assert on["grads"].keys() == off["grads"].keys() == {t["name"] for t in graph["tensors"]}
    for w in off["grads"]:
        assert np.array_equal(on["grads"][w], off["grads"][w]), w
    g = on["plan"].graph
    spans = [t for t in g.tensors.values() if "members" in t]
    assert [[m.split(".")[-1] for m in t["members"]] for t in spans] == [
        ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]]
    weight_gathers = [n for n in g.nodes if n["op_type"] == "Gather" and n["inputs"][0] in
                      g.tensors]
    assert [n["inputs"][0] for n in weight_gathers] == [spans[0]["name"]]
    for part in ("fwd_train", "bwd"):
        assert len(getattr(on["plan"], part)) == len(getattr(off["plan"], part)) - 2, part
    plan = on["plan"]
    assert sorted(t for t, _ in watched(plan.graph, plan.trainable)) == sorted(on["grads"])
    assert plan.owners() == off["plan"].owners()
    assert run(Guard.build(plan)).tensors == run(Guard.build(off["plan"])).tensors


def _two_gathers(sizes=(64, 64), outside=False, shared=False):
    """Weights a [sizes[0]] and b [sizes[1]], next to each other, each reversed by a Gather
    over its flat view; both read by one Concat added to the input. ``outside``: a also
    read by a Mul (a reader beyond the Gathers); ``shared``: the Gathers' outputs also read
    by a second Concat before the first (two LSTMs sharing one W / R / B, as a common
    subexpression pass over an export leaves them)."""
    def flat(w):
        return node("Reshape", [w, "m1"], [f"{w}::flat"])

    def rev(n):
        return {"dtype": "int64", "shape": [n], "values": list(range(n))[::-1]}
    nodes = [flat("a"), node("Gather", ["a::flat", "ia"], ["ga"], axis=0),
             flat("b"), node("Gather", ["b::flat", "ib"], ["gb"], axis=0)]
    if shared:
        nodes.append(node("Concat", ["gb", "ga"], ["cat2"], axis=0))
    nodes += [node("Concat", ["ga", "gb"], ["cat"], axis=0), node("Add", ["input", "cat"], ["y"])]
    if outside:
        nodes.append(node("Mul", ["a", "a"], ["z"]))
    n = sum(sizes)
    tensors = [("a", np.zeros(sizes[0], np.float32), "param"),
               ("b", np.zeros(sizes[1], np.float32), "param")]
    graph, _ = make_graph(nodes, tensors, [("input", ["N", n])], [("y", ["N"])],
                          constants={"m1": {"dtype": "int64", "shape": [1], "values": [-1]},
                                     "ia": rev(sizes[0]), "ib": rev(sizes[1])})
    return Graph(graph)


def test_join_indices_and_what_stays_apart():
    """Joined: one Gather over a span of a and b whose indices are each part's, offset by its
    weight's place in the span; a Split and Reshapes give the old names back. Apart: a first
    part that is not a multiple of 64 floats (its view would not start at 256 bytes), and a
    weight something else reads too, and Gathers that another node reads as well (a join per
    reader wrote the same names twice and summed their gradients twice)."""
    g = _two_gathers()
    j = gather_joins.fold(g, g.shapes(2))
    ops = [n["op_type"] for n in j.nodes]
    assert ops == ["Gather", "Split", "Reshape", "Reshape", "Concat", "Add"]
    gather = j.nodes[0]
    start_b = g.tensors["b"]["offset"] // 4
    want = list(range(64))[::-1] + [start_b + i for i in range(64)[::-1]]
    assert j.constants[gather["inputs"][1]]["values"] == want
    assert [n["outputs"][0] for n in j.nodes[2:4]] == ["ga", "gb"]
    assert j.shapes(2)["cat"] == g.shapes(2)["cat"] == [128]
    g = _two_gathers((60, 68))
    assert gather_joins.fold(g, g.shapes(2)) is g
    g = _two_gathers((64, 64), outside=True)
    assert gather_joins.fold(g, g.shapes(2)) is g
    g = _two_gathers((64, 64), shared=True)  # joined twice, it doubled their gradients
    assert gather_joins.fold(g, g.shapes(2)) is g

"""engine/rewrites/weight_layouts.py: chains of Slice / Concat / Transpose / views over one weight
folded into one Gather each. The fold's indices against numpy doing the same ops to an arange;
the torch-exported LSTM and GRU (tests/fixtures/zoo, the gate reorder) folded and not: the same
floats, far fewer dispatches. The folded case's numbers against the float64 numpy engine:
tests/test_ops_views.py (``weight_rearranged``)."""

from pathlib import Path

import numpy as np
import pytest

from cases import by_id, views
from cases.blocks import shape_const
from conftest import make_graph, node, run
from harness import one_step
from webgpu_trainer import onnx_io
from webgpu_trainer.engine import builder
from webgpu_trainer.engine.rewrites import weight_layouts
from webgpu_trainer.engine.graph import Graph

ZOO = Path(__file__).parent / "fixtures" / "zoo"
MOVES = ("Concat", "Slice", "Transpose")


def _chain_graph():
    """w [2, 3, 4] -> Transpose(2, 0, 1) -> (Slice reversed along 0, Slice 1:3 along 2) ->
    Concat(axis 2) [4, 2, 5] -> Unsqueeze -> Reshape [40] -> Mul with the input [N, 40]."""
    nodes = [node("Transpose", ["w"], ["t"], perm=[2, 0, 1]),
             node("Slice", ["t", "m1", "m5", "a0", "m1"], ["rev"]),
             node("Slice", ["t", "c1", "c3", "a2"], ["mid"]),
             node("Concat", ["rev", "mid"], ["cat"], axis=2),
             node("Unsqueeze", ["cat", "a0"], ["u"]),
             node("Reshape", ["u", "flat"], ["r"]),
             node("Mul", ["input", "r"], ["y"])]
    consts = {"m1": shape_const([-1]), "m5": shape_const([-5]), "a0": shape_const([0]),
              "c1": shape_const([1]), "c3": shape_const([3]), "a2": shape_const([2]),
              "flat": shape_const([40])}
    w = np.zeros((2, 3, 4), np.float32)
    graph, _ = make_graph(nodes, [("w", w, "param")], [("input", ["N", 40])], [("y", ["N"])],
                          constants=consts)
    return Graph(graph)


def test_fold_indices_are_numpys_rearrangement():
    """The Gather's indices are what numpy's transpose, slices and concatenate do to
    arange(24); nothing of the chain is left but views."""
    g = _chain_graph()
    folded = weight_layouts.fold(g, g.shapes(3))
    assert [n["op_type"] for n in folded.nodes] == ["Reshape", "Gather", "Mul"]
    gather = folded.nodes[1]
    assert gather["outputs"] == ["r"] and folded.nodes[0]["inputs"][0] == "w"
    t = np.arange(24).reshape(2, 3, 4).transpose(2, 0, 1)
    want = np.concatenate([t[::-1], t[:, :, 1:3]], axis=2).reshape(-1)
    assert folded.constants[gather["inputs"][1]]["values"] == want.tolist()
    assert folded.shapes(3)["r"] == [40]


def test_kept_names_stay():
    """A tensor of the chain a caller reads (``keep``) is still produced: folded into a
    Gather of its own (it costs 2 dispatches) beside the root's."""
    g = _chain_graph()
    folded = weight_layouts.fold(g, g.shapes(3), keep={"rev"})
    outs = {n["outputs"][0]: n["op_type"] for n in folded.nodes}
    assert outs["rev"] == "Gather" and outs["r"] == "Gather"
    t = np.arange(24).reshape(2, 3, 4).transpose(2, 0, 1)
    rev = next(n for n in folded.nodes if n["outputs"] == ["rev"])
    assert folded.constants[rev["inputs"][1]]["values"] == t[::-1].reshape(-1).tolist()


def test_one_dispatch_chains_and_activations_are_left_alone():
    """A chain of one dispatch (a lone Transpose of a weight) is not folded, nor is a Concat
    of a weight with an activation: ``fold`` returns the graph itself."""
    g = Graph(by_id(views.CASES, "weight_view").graph)
    assert weight_layouts.fold(g, g.shapes(2)) is g
    nodes = [node("Transpose", ["w"], ["t"], perm=[1, 0]),
             node("Concat", ["t", "input"], ["y"], axis=0)]
    graph, _ = make_graph(nodes, [("w", np.zeros((3, 2), np.float32), "param")],
                          [("input", ["N", 3])], [("y", ["N"])])
    g = Graph(graph)
    assert weight_layouts.fold(g, g.shapes(2)) is g


@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_torch_rnn_gate_reorder_folds_to_the_same_floats(device, name, monkeypatch):
    """torch.onnx.export's LSTM / GRU (TorchScript fixture): one training step with the fold
    and without gives bit-identical loss, output and weight gradients, with at least 30 fewer
    dispatches in the forward and backward."""
    graph, blob = onnx_io.load_bundle(ZOO / f"{name}-ts.onnx")
    dims = [d for d in graph["inputs"][0]["shape"][1:]]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, *dims)).astype(np.float32)
    labels = rng.integers(0, 10, 4)
    res = {}
    monkeypatch.setattr(builder.Builder, "JOIN_WEIGHT_GATHERS", False)  # test_gather_joins
    for fold in (True, False):
        monkeypatch.setattr(builder.Builder, "FOLD_WEIGHT_LAYOUTS", fold)
        res[fold] = run(one_step(device, graph, blob, x, labels))
    on, off = res[True], res[False]
    assert on["loss"] == off["loss"]
    out = off["plan"].graph.output
    assert np.array_equal(on["acts"][out], off["acts"][out])
    assert on["grads"].keys() == off["grads"].keys() and on["grads"]
    for w in off["grads"]:
        assert np.array_equal(on["grads"][w], off["grads"][w]), w
    gathers = [n for n in on["plan"].graph.nodes if n["op_type"] == "Gather"]
    assert len(gathers) >= 3
    assert not any(n["op_type"] in MOVES and n["inputs"][0] in graph_weights(graph)
                   for n in on["plan"].graph.nodes)

    def count(r):
        return len(r["plan"].fwd_train) + len(r["plan"].bwd)
    assert count(on) <= count(off) - 30, (count(on), count(off))


def graph_weights(graph) -> set:
    return {t["name"] for t in graph["tensors"]}


def _bias_graph(between=False, read_outside=False):
    """Two biases b1, b2 [6] (a third weight between them when ``between``), each reversed by
    a Slice, Concat-ed [12] and added to the input [N, 12]; ``read_outside``: b1 also added to
    the result (a reader outside the chain)."""
    nodes = [node("Slice", ["b1", "m1", "big", "a0", "m1"], ["r1"]),
             node("Slice", ["b2", "m1", "big", "a0", "m1"], ["r2"]),
             node("Concat", ["r1", "r2"], ["cat"], axis=0),
             node("Add", ["input", "cat"], ["y"])]
    if read_outside:
        nodes += [node("Concat", ["b1", "b1"], ["b11"], axis=0), node("Add", ["y", "b11"], ["z"])]
    consts = {"m1": shape_const([-1]), "big": shape_const([-100]), "a0": shape_const([0])}
    rng = np.random.default_rng(3)
    tensors = [("b1", rng.standard_normal(6), "param")]
    if between:
        tensors.append(("other", rng.standard_normal(12), "param"))
        nodes.append(node("Mul", [nodes[-1]["outputs"][0], "other"], ["o"]))
    tensors.append(("b2", rng.standard_normal(6), "param"))
    out = nodes[-1]["outputs"][0]
    return make_graph(nodes, tensors, [("input", ["N", 12])], [(out, ["N", 12])],
                      constants=consts)


def _spans(g):
    return [t for t in g.tensors.values() if "members" in t]


def test_adjacent_weights_join_in_one_span():
    graph, _ = _bias_graph()
    g = Graph(graph)
    out = weight_layouts.fold(g, g.shapes(2))
    (span,) = _spans(out)
    assert span["members"] == ["b1", "b2"] and span["name"] == "b1::span"
    assert span["offset"] == g.tensors["b1"]["offset"]
    assert span["offset"] + span["nbytes"] == g.tensors["b2"]["offset"] + 24
    (gather,) = [n for n in out.nodes if n["op_type"] == "Gather"]
    assert gather["inputs"][0] == "b1::span"
    pad = (g.tensors["b2"]["offset"] - g.tensors["b1"]["offset"]) // 4  # b2's first element
    assert out.constants[gather["inputs"][1]]["values"] == [5, 4, 3, 2, 1, 0] + [
        pad + 5 - k for k in range(6)]


@pytest.mark.parametrize("kw", [dict(between=True), dict(read_outside=True)],
                         ids=["another_weight_between", "a_member_read_outside"])
def test_spans_not_taken(kw, monkeypatch):
    graph, _ = _bias_graph(**kw)
    g = Graph(graph)
    assert not _spans(weight_layouts.fold(g, g.shapes(2)))
    monkeypatch.setattr(builder.Builder, "WEIGHT_SPANS", False)
    graph, _ = _bias_graph()
    assert not _spans(weight_layouts.fold(Graph(graph), Graph(graph).shapes(2)))


@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_rnn_biases_in_one_span_same_bits(device, name, monkeypatch):
    """The torch-exported LSTM / GRU: its two biases' reorder and Concat read one span, the
    same floats as without it, 3 dispatches fewer each way; the guard watches the members and
    the optimizer's mask covers the members alone."""
    from webgpu_trainer.engine.train.guard import watched
    graph, blob = onnx_io.load_bundle(ZOO / f"{name}-ts.onnx")
    dims = [d for d in graph["inputs"][0]["shape"][1:]]
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, *dims)).astype(np.float32)
    labels = rng.integers(0, 10, 4)
    res = {}
    monkeypatch.setattr(builder.Builder, "JOIN_WEIGHT_GATHERS", False)  # test_gather_joins
    for spans in (True, False):
        monkeypatch.setattr(builder.Builder, "WEIGHT_SPANS", spans)
        res[spans] = run(one_step(device, graph, blob, x, labels))
    on, off = res[True], res[False]
    (span,) = _spans(on["plan"].graph)
    assert [m.split(".")[-1] for m in span["members"]] == ["bias_ih_l0", "bias_hh_l0"]
    assert not _spans(off["plan"].graph)
    assert len(on["plan"].fwd_train) == len(off["plan"].fwd_train) - 3
    assert len(on["plan"].bwd) == len(off["plan"].bwd) - 3
    assert on["loss"] == off["loss"]
    assert on["grads"].keys() == off["grads"].keys() == set(graph_weights(graph))
    for w in off["grads"]:
        assert np.array_equal(on["grads"][w], off["grads"][w]), w
    plan = on["plan"]
    names = [t for t, _ in watched(plan.graph, plan.trainable)]
    assert sorted(names) == sorted(graph_weights(graph)) and span["name"] not in names
    shift, owners = plan.owners()
    words = np.frombuffer(owners, np.uint32)
    assert shift == 6 and set(words >> 7) <= {0, 1}
    assert (words & 127).sum() == sum(t["nbytes"] // 4 for t in graph["tensors"])
    from webgpu_trainer.engine.train.guard import Guard
    guard = run(Guard.build(plan))  # the tensors and nodes the numpy engine's guard names
    assert guard.tensors == watched(Graph(graph), set(graph_weights(graph)))

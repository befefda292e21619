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

"""engine/rewrites/splits.py: Gathers that take every index of an activation's axis, one
constant index each (nn.MultiheadAttention's packed q/k/v), folded into one Split. The gather
case of that pattern trained folded against the float64 numpy engine, with fewer dispatches
than Gather by Gather; what is not folded."""

import copy

import pytest

from cases import by_id, gather
from conftest import run
from harness import compare, one_step, op_types, oracle
from webgpu_trainer.engine import builder
from webgpu_trainer.engine.graph import Graph
from webgpu_trainer.engine.rewrites import splits

CASE = by_id(gather.CASES, "packed_qkv_all_axis0")


def test_fold_is_one_split_and_a_view_per_part():
    g = Graph(CASE.graph)
    folded = splits.fold(g, g.shapes(2))
    assert "Gather" not in op_types(folded) and op_types(folded).count("Split") == 1
    split = next(n for n in folded.nodes if n["op_type"] == "Split")
    assert split["inputs"] == ["t"] and split["attrs"] == {"axis": 0, "split": [1, 1, 1]}
    views = {n["outputs"][0]: n for n in folded.nodes if n["inputs"][:1] and
             n["inputs"][0] in split["outputs"]}
    assert {o: (v["op_type"], split["outputs"].index(v["inputs"][0]))
            for o, v in views.items()} == {"q": ("Squeeze", 0), "k1": ("Identity", 1),
                                           "v": ("Squeeze", 2)}
    assert folded.shapes(2)["q"] == g.shapes(2)["q"] and \
        folded.shapes(2)["k1"] == g.shapes(2)["k1"]


def test_folded_split_trains_like_the_gathers(device, monkeypatch):
    """Folded (nothing kept) against the numpy engine's Gathers: loss, output, every parameter
    gradient; fewer dispatches backward than the three scatters and their sum."""
    res = run(one_step(device, CASE.graph, CASE.blob, CASE.x, CASE.labels))
    compare(CASE.id, res, oracle(CASE))
    assert "Split" in op_types(res["plan"].graph)
    monkeypatch.setattr(builder.Builder, "FOLD_SPLITS", False)
    off = run(one_step(device, CASE.graph, CASE.blob, CASE.x, CASE.labels))
    assert "Split" not in op_types(off["plan"].graph)
    assert len(res["plan"].bwd) < len(off["plan"].bwd), (len(res["plan"].bwd),
                                                         len(off["plan"].bwd))


@pytest.mark.parametrize("change", ["missing_index", "repeated_index", "other_axis",
                                    "weight", "constant"])
def test_not_folded(change):
    """An index left out or taken twice, a Gather on another axis, or a weight or a constant
    gathered (a [3, 2, 4] parameter or constant in place of t) leave the Gathers as they
    are."""
    graph = copy.deepcopy(CASE.graph)
    shapes = Graph(CASE.graph).shapes(2)  # fold reads the gathered tensor's shape only
    if change == "missing_index":  # packed_qkv_axis0: 0 and 2 only
        graph = copy.deepcopy(by_id(gather.CASES, "packed_qkv_axis0").graph)
        shapes = Graph(graph).shapes(2)
    elif change == "repeated_index":
        graph["constants"]["im1"]["values"] = [0]
    elif change == "other_axis":
        next(n for n in graph["nodes"] if n["op_type"] == "Gather")["attrs"]["axis"] = 2
    else:
        if change == "weight":
            graph["tensors"].append({"name": "w3", "shape": [3, 2, 4], "offset": 0,
                                     "nbytes": 96})
        else:
            graph["constants"]["w3"] = {"dtype": "float32", "shape": [3, 2, 4],
                                        "values": [0.5] * 24}
        for n in graph["nodes"]:
            if n["op_type"] == "Gather":
                n["inputs"][0] = "w3"
        shapes = Graph(graph).shapes(2)
    g = Graph(graph)
    assert splits.fold(g, shapes) is g
    control = Graph(CASE.graph)  # the case itself folds
    assert splits.fold(control, Graph(CASE.graph).shapes(2)) is not control

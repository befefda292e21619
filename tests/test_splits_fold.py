"""engine/rewrites/splits.py: Gathers that take every index of an activation's axis, one
constant index each (nn.MultiheadAttention's packed q/k/v), folded into one Split. The gather
case of that pattern trained folded against the float64 numpy engine, with fewer dispatches
than Gather by Gather; what is not folded."""

import copy

import pytest

from cases import by_id, gather
from cases.blocks import gemm_pre
from conftest import f32, node, rng_for, run
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


def _aligned(relu=False):
    """packed_qkv_all_axis0 with 64 features a part: h [2, 192] -> [2, 3, 64] -> Transpose
    [3, 2, 64], each part 128 floats (512 bytes, a multiple of WebGPU's 256-byte binding
    alignment), so the folded Split's parts are views of t and their gradients views of dt
    (``fusion.split_offsets``). ``relu``: q goes through a Relu first (then not in place: t's
    other parts share its buffer)."""
    rng = rng_for("gather_qkv_views", relu)
    pre, tensors = gemm_pre(7, 192, rng)
    q = "q"
    extra = []
    if relu:
        extra, q = [node("Relu", ["q"], ["qr"])], "qr"
    nodes = pre + [node("Reshape", ["h", "s3"], ["r"]),
                   node("Transpose", ["r"], ["t"], perm=[1, 0, 2]),
                   node("Gather", ["t", "i0"], ["q"], axis=0),
                   node("Gather", ["t", "i1"], ["k1"], axis=0),
                   node("Squeeze", ["k1"], ["k"], axes=[0]),
                   node("Gather", ["t", "im1"], ["v"], axis=0)] + extra + \
        [node("Add", [q, "k"], ["qk"]), node("Mul", ["qk", "v"], ["y"])]
    x = f32(rng.standard_normal((gather.BATCH, 7)))
    ints = gather._ints
    return gather.gather_case(f"packed_qkv_views_relu{int(relu)}", nodes, tensors, x, 64,
                              {"s3": ints([0, 3, 64]), "i0": ints([0], []), "i1": ints([1]),
                               "im1": ints([-1], [])},
                              acts=("t", "q", "k1", "v"), dacts=("h", "t", "q", "k1", "v"))


def _views(res):
    """{part: (activation offset - t's, gradient offset - dt's)} of the Split's outputs that
    share t's buffer (and dt's)."""
    plan = res["plan"]
    split = next(n for n in plan.graph.nodes if n["op_type"] == "Split")
    t, dt = plan.acts["t"], plan.grads["t"]
    return {o: (plan.acts[o].offset - t.offset, plan.grads[o].offset - dt.offset)
            for o in split["outputs"]
            if plan.acts[o].buf is t.buf and plan.grads[o].buf is dt.buf}


@pytest.mark.parametrize("relu", [False, True])
def test_aligned_split_parts_are_views(device, monkeypatch, relu):
    """Against the float64 numpy engine and bit for bit against the copying Split
    (SPLIT_VIEWS False): the parts and their gradients at byte offsets 0, 512, 1024 of t and
    dt, three dispatches fewer forward and backward; a Relu on a part is not done in place."""
    case = _aligned(relu)
    res = run(one_step(device, case.graph, case.blob, case.x, case.labels,
                       keep=("t", "q", "k1", "v")))
    compare(case.id, res, oracle(case), acts=("t", "q", "k1", "v"), dacts=("t", "q", "k1"))
    assert sorted(_views(res).values()) == [(0, 0), (512, 512), (1024, 1024)]
    if relu:
        assert res["plan"].acts["qr"].buf is not res["plan"].acts["t"].buf
    shared = res
    # the dispatch counts of the Split's views alone: without the residual Add's gradient
    # shared through views (k = Squeeze(k1) -> Add), which the copying plan takes too
    monkeypatch.setattr(builder.Builder, "GRAD_THROUGH_VIEWS", False)
    res = run(one_step(device, case.graph, case.blob, case.x, case.labels,
                       keep=("t", "q", "k1", "v")))
    for name, v in res["grads"].items():
        assert (shared["grads"][name] == v).all(), name
    monkeypatch.setattr(builder.Builder, "SPLIT_VIEWS", False)
    off = run(one_step(device, case.graph, case.blob, case.x, case.labels,
                       keep=("t", "q", "k1", "v")))
    assert _views(off) == {}
    assert len(off["plan"].fwd_train) - len(res["plan"].fwd_train) == 3
    # (with the Relu, the copying plan's in-place Relu costs one more backward dispatch)
    assert len(off["plan"].bwd) - len(res["plan"].bwd) == 3 + relu
    for part in ("grads", "dacts"):  # (the copying plan's in-place Relu overwrites dqr)
        for name, v in off[part].items():
            assert name == "qr" or (res[part][name] == v).all(), (part, name)
    assert (res["acts"]["y"] == off["acts"]["y"]).all()


def test_unaligned_split_parts_are_copies(device):
    """packed_qkv_all_axis0's parts (8 floats, 32 bytes) cannot start a binding: copies."""
    res = run(one_step(device, CASE.graph, CASE.blob, CASE.x, CASE.labels))
    assert _views(res) == {}

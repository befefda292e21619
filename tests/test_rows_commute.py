"""Transposes of row axes moved through row-wise Gemms (engine/rewrites/rows.py, with
``transposes._commute`` composing what meets): which move and which stay on small graphs, and
seq-first models (a Linear between two Transposes, nn.TransformerEncoderLayer both ways) from
both torch exporters trained one step on both kernel paths against torch in float64, with the
Transposes gone (or one per attention layer left) where the rewrite is on."""

import pytest

from harness import builder_patch, count_transposes_left
from webgpu_trainer.engine.graph import Graph
from webgpu_trainer.engine.rewrites import rows, transposes

torch = pytest.importorskip("torch")
nn = torch.nn


def _shape(values):
    return {"dtype": "int64", "shape": [len(values)], "values": list(values)}


def _node(op, ins, outs, name=None, **attrs):
    return {"name": name or outs[0], "op_type": op, "inputs": ins, "outputs": outs,
            "attrs": attrs}


# x [5, 6, 4] -> t = Transpose [1, 0, 2] -> [6, 5, 4] -> r [30, 4] -> Gemm -> g [30, 3]
#   -> y [6, 5, 3] (down) ; or x -> r -> Gemm -> g -> y [5, 6, 3] -> Transpose (up)
SHAPES = {"x": [5, 6, 4], "t": [6, 5, 4], "r": [30, 4], "g": [30, 3], "y": [6, 5, 3],
          "w": [3, 4], "b": [3], "b2": [30, 3], "yu": [5, 6, 3], "z": [6, 5, 3],
          "tt": [5, 4, 6]}
CONSTS = {"rows": _shape([30, 4]), "back": _shape([6, 5, 3]), "backu": _shape([5, 6, 3])}


def _graph(nodes, out=None, extra_inputs=(), consts=None):
    return Graph({"name": "m", "nodes": nodes, "tensors": [], "constants": consts or CONSTS,
                  "inputs": [{"name": "x", "dims": [5, 6, 4]}] + [
                      {"name": n, "dims": SHAPES[n]} for n in ("w", "b", "b2", *extra_inputs)],
                  "outputs": [{"name": out or nodes[-1]["outputs"][0], "dims": [1]}],
                  "opset": 17})


def _down(gemm_in=("r", "w", "b"), perm=(1, 0, 2), **gemm):
    return [_node("Transpose", ["x"], ["t"], perm=list(perm)),
            _node("Reshape", ["t", "rows"], ["r"]),
            _node("Gemm", list(gemm_in), ["g"], transB=1, **gemm),
            _node("Reshape", ["g", "back"], ["y"])]


def _up(perm=(1, 0, 2)):
    return [_node("Reshape", ["x", "rows"], ["r"]),
            _node("Gemm", ["r", "w", "b"], ["g"], transB=1),
            _node("Reshape", ["g", "backu"], ["yu"]),
            _node("Transpose", ["yu"], ["z"], perm=list(perm))]


def _ops(g):
    return [n["op_type"] for n in g.nodes]


def test_down_moves_the_transpose_after_the_gemm():
    g, shapes = rows.commute(_graph(_down()), SHAPES)
    assert _ops(g) == ["Reshape", "Gemm", "Reshape", "Transpose"]
    r1, gemm, r2, t = g.nodes
    assert r1["inputs"][0] == "x" and g.constants[r1["inputs"][1]]["values"] == [30, 4]
    assert gemm["inputs"][1:] == ["w", "b"] and gemm["outputs"] == ["g::unpermuted"]
    assert shapes[r2["outputs"][0]] == [5, 6, 3] and t["attrs"]["perm"] == [1, 0, 2]
    assert t["outputs"] == ["y"]  # the name whose values did not change


def test_up_moves_the_transpose_before_the_gemm():
    """(Gemm 4 -> 6 here: the copy before it is no wider.)"""
    wide = {**SHAPES, "w": [6, 4], "b": [6], "g": [30, 6], "yu": [5, 6, 6], "z": [6, 5, 6]}
    g, shapes = rows.commute(_graph(_up(), consts={**CONSTS, "backu": _shape([5, 6, 6])}),
                             wide)
    assert _ops(g) == ["Transpose", "Reshape", "Gemm", "Reshape"]
    t, _, gemm, r2 = g.nodes
    assert t["inputs"] == ["x"] and shapes[t["outputs"][0]] == [6, 5, 4]
    assert gemm["outputs"] == ["g::permuted"] and r2["outputs"] == ["z"]
    assert g.constants[r2["inputs"][1]]["values"] == [6, 5, 6]


def test_a_narrower_gemm_keeps_a_lone_transpose_after_it():
    g = _graph(_up())  # Gemm 4 -> 3: moved before it the copy would be wider, and meet nothing
    assert rows.commute(g, SHAPES)[0] is g


def test_transposes_that_undo_each_other_become_a_view():
    """... an Identity, which the Reshape before it then takes in (``_collapse_views``)."""
    nodes = _down() + [_node("Transpose", ["y"], ["z"], perm=[1, 0, 2])]
    g = transposes.fold(_graph(nodes), {**SHAPES, "z": [5, 6, 3]})
    assert _ops(g) == ["Reshape", "Gemm", "Reshape"]
    assert g.nodes[-1]["outputs"] == ["z"] and g.nodes[0]["inputs"][0] == "x"
    assert g.constants[g.nodes[-1]["inputs"][1]]["values"] == [5, 6, 3]


@pytest.mark.parametrize("nodes, extra, keep", [
    (_down(perm=(0, 2, 1)), (), ()),  # it moves K: not row-wise
    (_down(transA=1), (), ()),
    (_down(gemm_in=("r", "w", "b2")), (), ()),  # a bias row per row
    (_down(), (), ("t",)),  # the caller reads the transposed tensor
    (_down(), (), ("g",)),
    (_down() + [_node("Relu", ["g"], ["g2"])], (), ()),  # the Gemm's rows read twice
    (_up(), (), ("yu",)),
    (_up() + [_node("Relu", ["yu"], ["yr"])], (), ()),
], ids=["perm_moves_k", "transA", "bias_per_row", "keep_t", "keep_g", "gemm_read_twice",
        "keep_before_up", "read_before_up"])
def test_what_stays(nodes, extra, keep):
    out = nodes[-1]["outputs"][0] if nodes[-1]["op_type"] != "Relu" else nodes[-2]["outputs"][0]
    g = _graph(nodes, out=out, extra_inputs=extra)
    after, _ = rows.commute(g, SHAPES, keep)
    assert after is g


class SeqFirst(nn.Module):
    """28 rows as tokens, seq-first: Transpose -> Linear (28 -> 16) -> Transpose back -> ReLU
    -> the mean over tokens -> Linear to 10."""

    def __init__(self):
        super().__init__()
        self.inp, self.fc = nn.Linear(28, 16), nn.Linear(16, 10)

    def forward(self, x):
        h = self.inp(x.squeeze(1).transpose(0, 1)).transpose(0, 1)
        return self.fc(torch.relu(h).mean(1))


class Encoder(nn.Module):
    """28 rows as tokens -> Linear (28 -> 16) -> nn.TransformerEncoderLayer (2 heads, ff 32,
    dropout 0) -> the mean over tokens -> Linear to 10. Seq-first, the residual stream is
    transposed: the Transposes into and out of the layer stay (the first is read twice, by
    in_proj and by the residual Add), the qkv one too: 3 of 6."""

    def __init__(self, batch_first):
        super().__init__()
        self.batch_first = batch_first
        self.inp, self.fc = nn.Linear(28, 16), nn.Linear(16, 10)
        self.layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0,
                                                batch_first=batch_first)
        with torch.no_grad():  # distinct values (LayerNorm's ones, zero biases) to match by
            for p in self.parameters():
                p.add_(torch.randn_like(p), alpha=0.1)

    def forward(self, x):
        h = self.inp(x.squeeze(1))
        if not self.batch_first:
            h = h.transpose(0, 1)
        h = self.layer(h)
        if not self.batch_first:
            h = h.transpose(0, 1)
        return self.fc(h.mean(1))


@pytest.mark.parametrize("tiled", [False, True], ids=["cpu_kernels", "gpu_kernels"])
@pytest.mark.parametrize("dynamo", [False, True], ids=["ts", "dynamo"])
@pytest.mark.parametrize("model, most", [("seq_first", 0), ("encoder_seq_first", 3),
                                          ("encoder_batch_first", 1)])
def test_seq_first_models_train_like_torch(device, tmp_path, monkeypatch, tiled, dynamo,
                                           model, most):
    from torch_models import export_and_step
    if dynamo:
        pytest.importorskip("onnxscript")
    left = count_transposes_left(monkeypatch)
    for commute in (False, True):
        torch.manual_seed(5)
        net = SeqFirst() if model == "seq_first" else Encoder(model.endswith("batch_first"))
        with builder_patch({"TILED": tiled, "COMMUTE_TRANSPOSES": commute}):
            export_and_step(device, net, tmp_path / f"m{commute}.onnx", dynamo,
                            17 if not dynamo else 18, f"{model} {'dynamo' if dynamo else 'ts'}",
                            batch=3, dynamic=True)
    assert left[True] <= most < left[False], left


def test_a_wider_copy_moves_only_to_meet_a_transpose():
    """Gemm 4 -> 12: moved after it, the Transpose would copy 3x the values, so it moves only
    when a Transpose waits there (through views) to compose with."""
    shapes = {**SHAPES, "w": [12, 4], "b": [12], "g": [30, 12], "y": [6, 5, 12],
              "y2": [6, 5, 3, 4], "z": [5, 6, 3, 4], "yr": [6, 5, 12]}
    consts = {**CONSTS, "back": _shape([6, 5, 12]), "split": _shape([6, 5, 3, 4])}

    def graph(tail):
        nodes = _down() + tail
        return Graph({"name": "m", "nodes": nodes, "tensors": [], "constants": consts,
                      "inputs": [{"name": n, "dims": shapes[n]} for n in ("x", "w", "b")],
                      "outputs": [{"name": nodes[-1]["outputs"][0], "dims": [1]}],
                      "opset": 17})
    alone = graph([_node("Relu", ["y"], ["yr"])])
    assert rows.commute(alone, shapes)[0] is alone
    meets = graph([_node("Reshape", ["y", "split"], ["y2"]),
                   _node("Transpose", ["y2"], ["z"], perm=[1, 0, 2, 3])])
    out = transposes.fold(meets, shapes)
    assert [n["op_type"] for n in out.nodes] == ["Reshape", "Gemm", "Reshape"]


def test_a_transpose_next_to_its_partner_stays():
    """MatMul -> Transpose -> [rows] -> Gemm (4 -> 3, narrower) -> Reshape: the Transpose
    already meets the product (which then writes it permuted, _perm_y), so it does not move
    down, and nothing moves back and forth between the fixpoint loop's rounds."""
    shapes = {**SHAPES, "q": [5, 6, 2], "k": [5, 2, 4], "m": [5, 6, 4], "t": [6, 5, 4],
              "y": [6, 5, 3], "yr": [6, 5, 3]}
    nodes = [_node("MatMul", ["q", "k"], ["m"]),
             _node("Transpose", ["m"], ["t"], perm=[1, 0, 2]),
             *_down()[1:], _node("Relu", ["y"], ["yr"])]
    g = Graph({"name": "m", "nodes": nodes, "tensors": [], "constants": CONSTS,
               "inputs": [{"name": n, "dims": shapes[n]} for n in ("q", "k", "w", "b")],
               "outputs": [{"name": "yr", "dims": [1]}], "opset": 17})
    assert rows.commute(g, shapes)[0] is g
    out = transposes.fold(g, shapes)
    assert [n["op_type"] for n in out.nodes] == ["MatMul", "Reshape", "Gemm", "Reshape", "Relu"]
    assert out.nodes[0]["attrs"]["_perm_y"] == [1, 0, 2]

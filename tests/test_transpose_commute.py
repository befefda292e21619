"""Transposes moved past the Reshapes that split their dims and composed with the Transposes
after them (engine/rewrites/transposes._commute), so that the fold puts them into the MatMuls'
strides: nn.MultiheadAttention's head split. The rewrite on small graphs (which fold, which
stay), and nn.MultiheadAttention exported by both torch exporters trained one step on the CPU
adapters' kernels and on the GPU adapters' against torch in float64, with fewer Transposes
left than without the rewrite."""

import pytest

from conftest import node
from harness import builder_patch, count_transposes_left
from webgpu_trainer.engine.graph import Graph
from webgpu_trainer.engine.rewrites import transposes

torch = pytest.importorskip("torch")
nn = torch.nn


def _graph(nodes, constants):
    return Graph({"name": "m", "nodes": nodes, "tensors": [], "constants": constants,
                  "inputs": [{"name": "x", "dims": ["N", 32, 16]}],
                  "outputs": [{"name": nodes[-1]["outputs"][0], "dims": ["N"]}],
                  "opset": 17})


def _shape(values):
    return {"dtype": "int64", "shape": [len(values)], "values": list(values)}


SHAPES = {"x": [6, 8, 16], "t": [8, 6, 16], "r": [2, 4, 6, 16], "w": [2, 4, 16, 6],
          "y": [2, 4, 6, 6], "z": [2, 4, 6, 6]}


def test_transpose_then_split_folds_into_the_product():
    """x [6, 8, 16] -> Transpose [1, 0, 2] -> Reshape [2, 4, 6, 16] -> MatMul: a Reshape of x
    to [6, 2, 4, 16] (a view), the product reading it through perm [1, 2, 0, 3]."""
    nodes = [node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             node("Reshape", ["t", "s"], ["r"]), node("MatMul", ["r", "w"], ["y"]),
             node("Relu", ["y"], ["z"])]
    out = transposes.fold(_graph(nodes, {"s": _shape([2, 4, 6, 16])}), SHAPES)
    assert [n["op_type"] for n in out.nodes] == ["Reshape", "MatMul", "Relu"]
    pre, m = out.nodes[0], out.nodes[1]
    assert pre["inputs"][0] == "x" and out.constants[pre["inputs"][1]]["values"] == [6, 2, 4, 16]
    assert m["inputs"] == [pre["outputs"][0], "w"] and m["attrs"]["_perm0"] == [1, 2, 0, 3]


def test_two_transposes_compose():
    """Transpose [1, 0, 2] -> Reshape (split) -> Transpose [0, 1, 3, 2] -> MatMul as B: one
    perm, [1, 2, 3, 0] of the split x."""
    nodes = [node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             node("Reshape", ["t", "s"], ["r"]),
             node("Transpose", ["r"], ["rt"], perm=[0, 1, 3, 2]),
             node("MatMul", ["y0", "rt"], ["y"]), node("Relu", ["y"], ["z"])]
    shapes = {**SHAPES, "rt": [2, 4, 16, 6], "y0": [2, 4, 6, 6], "y": [2, 4, 6, 6]}
    out = transposes.fold(_graph(nodes, {"s": _shape([2, 4, 6, 16])}), shapes)
    assert [n["op_type"] for n in out.nodes] == ["Reshape", "MatMul", "Relu"]
    assert out.nodes[1]["attrs"]["_perm1"] == [1, 2, 3, 0]


@pytest.mark.parametrize("perm, axis, index, folds", [
    ([1, 0, 2], 1, {"dtype": "int64", "shape": [], "values": [-1]}, True),  # out[:, -1]
    ([1, 0, 2], 0, {"dtype": "int64", "shape": [], "values": [2]}, True),
    ([2, 0, 1], 2, {"dtype": "int64", "shape": [], "values": [0]}, False),  # rest reordered
    ([1, 0, 2], 1, {"dtype": "int64", "shape": [1], "values": [3]}, False),  # not a scalar
], ids=["last_step", "axis_0", "others_reordered", "index_list"])
def test_transpose_into_a_scalar_gather(perm, axis, index, folds):
    """Transpose then Gather of one scalar index: the Gather along the input's axis perm[axis]
    when the Transpose keeps the other dims' order."""
    nodes = [node("Transpose", ["x"], ["t"], perm=perm),
             node("Gather", ["t", "i"], ["g"], axis=axis), node("Relu", ["g"], ["z"])]
    shapes = {"x": [6, 8, 16], "t": [SHAPES["x"][q] for q in perm]}
    out = transposes.fold(_graph(nodes, {"i": index}), shapes)
    ops = [n["op_type"] for n in out.nodes]
    assert ops == (["Gather", "Relu"] if folds else ["Transpose", "Gather", "Relu"])
    if folds:
        g = out.nodes[0]
        assert g["inputs"] == ["x", "i"] and g["attrs"]["axis"] == perm[axis]


def test_a_product_written_permuted_is_not_commuted():
    """MatMul -> Transpose [1, 0, 2] -> Reshape (split): the product writes the Transpose's
    layout itself (_perm_y); commuting would leave a Transpose of the Reshape's output."""
    nodes = [node("MatMul", ["a", "b"], ["x"]), node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             node("Reshape", ["t", "s"], ["r"]), node("Relu", ["r"], ["z"])]
    shapes = {**SHAPES, "a": [6, 8, 5], "b": [6, 5, 16], "z": [2, 4, 6, 16]}
    out = transposes.fold(_graph(nodes, {"s": _shape([2, 4, 6, 16])}), shapes)
    assert [n["op_type"] for n in out.nodes] == ["MatMul", "Reshape", "Relu"]
    assert out.nodes[0]["attrs"]["_perm_y"] == [1, 0, 2]


def test_a_product_of_a_vector_is_not_written_permuted():
    """MatMul(x [6, 8, 16, 5], w [5]) -> [6, 8, 16] -> Transpose: the product's layout code
    takes operands of rank 2 or more, so the Transpose stays."""
    nodes = [node("MatMul", ["a", "w"], ["x"]), node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             node("Relu", ["t"], ["z"])]
    shapes = {**SHAPES, "a": [6, 8, 16, 5], "w": [5], "z": [8, 6, 16]}
    out = transposes.fold(_graph(nodes, {}), shapes)
    assert [n["op_type"] for n in out.nodes] == ["MatMul", "Transpose", "Relu"]


@pytest.mark.parametrize("change", ["merge", "second_reader", "kept"])
def test_what_stays(change):
    """A Reshape that merges dims, a Transpose read twice, a kept Transpose output: no
    commuting (the Transpose stays a copy)."""
    nodes = [node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             node("Reshape", ["t", "s"], ["r"]), node("Relu", ["r"], ["z"])]
    shapes, consts, keep = dict(SHAPES), {"s": _shape([2, 4, 6, 16])}, ()
    if change == "merge":
        consts["s"] = _shape([8, 96])
        shapes["r"] = shapes["z"] = [8, 96]
    elif change == "second_reader":
        nodes.append(node("Relu", ["t"], ["z2"]))
        shapes["z2"] = [8, 6, 16]
    else:
        keep = {"t"}
    g = _graph(nodes, consts)
    out = transposes.fold(g, shapes, keep)
    assert [n["op_type"] for n in out.nodes][:2] == ["Transpose", "Reshape"]


class MHA(nn.Module):
    """28 rows as tokens -> Linear (28 -> 16) -> nn.MultiheadAttention (2 heads,
    batch_first) -> the mean over tokens -> Linear to 10."""

    def __init__(self):
        super().__init__()
        self.inp, self.fc = nn.Linear(28, 16), nn.Linear(16, 10)
        self.att = nn.MultiheadAttention(16, 2, batch_first=True)
        with torch.no_grad():  # its biases start at 0: distinct values to match by
            self.att.in_proj_bias.normal_(0, 0.3)
            self.att.out_proj.bias.normal_(0, 0.3)

    def forward(self, x):
        h = self.inp(x.squeeze(1))
        return self.fc(self.att(h, h, h, need_weights=False)[0].mean(1))


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("dynamo", [False, True])
def test_multihead_attention_trains_like_torch(device, tmp_path, monkeypatch, tiled, dynamo):
    from torch_models import export_and_step
    if dynamo:
        pytest.importorskip("onnxscript")
    left = count_transposes_left(monkeypatch)
    for commute in (False, True):
        torch.manual_seed(11)
        with builder_patch({"TILED": tiled, "COMMUTE_TRANSPOSES": commute}):
            export_and_step(device, MHA(), tmp_path / f"mha{commute}.onnx", dynamo,
                            17 if not dynamo else 18, f"MultiheadAttention "
                            f"{'dynamo' if dynamo else 'ts'}", batch=3, dynamic=True)
    assert left[True] < left[False], left


class LastColumn(nn.Module):
    """x [N, 1, 28, 28] -> [N, 28, 28] -> transpose(1, 2) -> [:, -1] (each image's last
    column: a Transpose then a scalar Gather) -> Linear to 10."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(28, 10)

    def forward(self, x):
        return self.fc(torch.relu(x.squeeze(1).transpose(1, 2)[:, -1]))


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("dynamo", [False, True])
def test_transpose_into_gather_trains_like_torch(device, tmp_path, monkeypatch, tiled, dynamo):
    from torch_models import export_and_step
    if dynamo:
        pytest.importorskip("onnxscript")
    left = []
    fold = transposes.fold

    def counting(graph, shapes, keep=()):
        out = fold(graph, shapes, keep)
        left.append(sum(n["op_type"] == "Transpose" for n in out.nodes))
        return out
    monkeypatch.setattr(transposes, "fold", counting)
    torch.manual_seed(4)
    with builder_patch({"TILED": tiled}):
        export_and_step(device, LastColumn(), tmp_path / "m.onnx", dynamo,
                        17 if not dynamo else 18, f"LastColumn {'dynamo' if dynamo else 'ts'}",
                        batch=3, dynamic=True)
    assert left and max(left) == 0, left

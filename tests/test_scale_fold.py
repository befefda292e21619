"""Scalar Muls before and after MatMul folded into the product's scale (engine/rewrites/
scales.py, shaders/matmul.wgsl ``alpha``, ops/matmul.py): which Muls fold and which stay; a
scaled attention exported by both torch exporters trained one step on the CPU adapters' kernels
and on the GPU adapters' (Builder.TILED) against torch in float64 (torch_models.export_and_step:
forward vs onnxruntime, loss and every parameter gradient), with the folds counted."""

import pytest

from conftest import node
from harness import builder_patch
from webgpu_trainer.engine.graph import Graph
from webgpu_trainer.engine.rewrites import scales

torch = pytest.importorskip("torch")
nn = torch.nn


def _graph(nodes, constants):
    """A model description of ``nodes`` on inputs q [N, 2, 5, 4] and k [N, 2, 4, 5]."""
    return Graph({"name": "m", "nodes": nodes, "tensors": [], "constants": constants,
                  "inputs": [{"name": "q", "dims": ["N", 2, 5, 4]}],
                  "outputs": [{"name": nodes[-1]["outputs"][0], "dims": ["N"]}],
                  "opset": 17})


def _scalar(v, shape=(1,)):
    return {"dtype": "float32", "shape": list(shape), "values": [v] * max(1, len(shape) and
                                                                      int(shape[0]))}


SHAPES = {"q": [3, 2, 5, 4], "k": [3, 2, 4, 5], "qs": [3, 2, 5, 4], "ks": [3, 2, 4, 5],
          "s": [3, 2, 5, 5], "y": [3, 2, 5, 5], "z": [3, 2, 5, 5]}


def _fold(nodes, constants, keep=()):
    g = _graph(nodes, constants)
    return scales.fold(g, SHAPES, keep)


def test_scales_before_and_after_fold_into_alpha():
    nodes = [node("Mul", ["q", "c1"], ["qs"]), node("Mul", ["c2", "k"], ["ks"]),
             node("MatMul", ["qs", "ks"], ["s"]), node("Mul", ["s", "c3"], ["y"]),
             node("Relu", ["y"], ["z"])]
    out = _fold(nodes, {"c1": _scalar(0.5), "c2": _scalar(0.25), "c3": _scalar(3.0)})
    ops = [n["op_type"] for n in out.nodes]
    assert ops == ["MatMul", "Relu"]
    m = out.nodes[0]
    assert m["inputs"] == ["q", "k"] and m["outputs"] == ["y"]
    assert m["attrs"]["_alpha"] == pytest.approx(0.375)


@pytest.mark.parametrize("c, folds", [(4.0, True), (0.0, False)])
def test_division_by_a_scalar_folds(c, folds):
    """(q @ k^T) / c folds as alpha 1 / c (attention written with / sqrt(d)); a division by
    zero or of the constant by the product stays."""
    for numerator in (True, False):
        div = node("Div", ["s", "c"] if numerator else ["c", "s"], ["y"])
        nodes = [node("MatMul", ["q", "k"], ["s"]), div, node("Relu", ["y"], ["z"])]
        g = _graph(nodes, {"c": _scalar(c)})
        out = scales.fold(g, SHAPES)
        if folds and numerator:
            assert [n["op_type"] for n in out.nodes] == ["MatMul", "Relu"]
            assert out.nodes[0]["outputs"] == ["y"] and out.nodes[0]["attrs"]["_alpha"] == 0.25
        else:
            assert out is g


def test_scale_before_a_transpose_folds():
    """Mul(k, c) -> Transpose -> MatMul: the Transpose reads k itself, and its output (now
    unscaled) takes a new name, so no caller reads it as the scaled one."""
    nodes = [node("Mul", ["kt", "c1"], ["ks"]), node("Transpose", ["ks"], ["k"], perm=[0, 1, 3, 2]),
             node("MatMul", ["q", "k"], ["s"]), node("Relu", ["s"], ["z"])]
    shapes = {**SHAPES, "kt": [3, 2, 5, 4], "ks": [3, 2, 5, 4]}
    out = scales.fold(_graph(nodes, {"c1": _scalar(0.5)}), shapes)
    assert [n["op_type"] for n in out.nodes] == ["Transpose", "MatMul", "Relu"]
    assert out.nodes[0]["inputs"] == ["kt"] and out.nodes[1]["attrs"]["_alpha"] == 0.5
    assert out.nodes[0]["outputs"] == ["k::unscaled"] and out.nodes[1]["inputs"][1] == \
        "k::unscaled"
    assert "k" not in out.producer


@pytest.mark.parametrize("change", ["vector", "second_reader", "kept", "output",
                                    "two_activations"])
def test_what_does_not_fold(change):
    """A constant of more than one value, a scaled tensor another node reads too, a kept
    name, the graph's output, a Mul of two activations: left as they are."""
    consts = {"c1": _scalar(0.5)}
    nodes = [node("Mul", ["q", "c1"], ["qs"]), node("MatMul", ["qs", "k"], ["s"]),
             node("Relu", ["s"], ["z"])]
    keep = ()
    if change == "vector":
        consts["c1"] = {"dtype": "float32", "shape": [4], "values": [0.5, 1, 2, 3]}
    elif change == "second_reader":
        nodes.append(node("Add", ["qs", "q"], ["y"]))
    elif change == "kept":
        keep = {"qs"}
    elif change == "output":
        nodes = [node("MatMul", ["q", "k"], ["s"]), node("Mul", ["s", "c1"], ["y"])]
        keep = {"y"}
    else:
        nodes[0] = node("Mul", ["q", "q"], ["qs"])
    g = _graph(nodes, consts)
    out = scales.fold(g, SHAPES, keep)
    if change == "output":  # the product's Mul writes a kept name: it folds (its name stays)
        assert [n["op_type"] for n in out.nodes] == ["MatMul"]
        assert out.nodes[0]["outputs"] == ["y"]
        return
    assert out is g


def _count_muls(monkeypatch) -> list:
    """A list that gets [Muls before, Muls after] of each ``scales.fold`` the plan runs."""
    counts, fold = [], scales.fold

    def counting(graph, shapes, keep=()):
        out = fold(graph, shapes, keep)
        counts.append([sum(n["op_type"] == "Mul" for n in g.nodes) for g in (graph, out)])
        return out
    monkeypatch.setattr(scales, "fold", counting)
    return counts


class ScaledAttention(nn.Module):
    """28 rows as tokens -> q, k, v Linears (28 -> 16) -> 2 heads of 8 -> q and k each scaled
    by 8^-1/4 before the product (as nn.MultiheadAttention's export), softmax, @ v, the
    product scaled by 0.5 after it, heads merged -> mean over tokens -> Linear to 10;
    ``reuse``: the scaled q also added to the result (that Mul stays)."""

    def __init__(self, reuse=False):
        super().__init__()
        # no key bias: it shifts a row of scores by a constant, its gradient is zero
        self.q, self.k = nn.Linear(28, 16), nn.Linear(28, 16, bias=False)
        self.v = nn.Linear(28, 16)
        self.fc = nn.Linear(16, 10)
        self.reuse = reuse

    def forward(self, x):
        x = x.squeeze(1)
        n = x.shape[0]

        def heads(t):
            return t.reshape(n, 28, 2, 8).transpose(1, 2)
        s = 8 ** -0.25
        q, k, v = heads(self.q(x)) * s, heads(self.k(x)) * s, heads(self.v(x))
        y = ((q @ k.transpose(-1, -2)).softmax(-1) @ v) * 0.5
        if self.reuse:
            y = y + q
        return self.fc(y.transpose(1, 2).reshape(n, 28, 16).mean(1))


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("dynamo", [False, True])
@pytest.mark.parametrize("reuse", [False, True])
def test_scaled_attention_trains_like_torch(device, tmp_path, monkeypatch, tiled, dynamo, reuse):
    from torch_models import export_and_step
    if dynamo:
        pytest.importorskip("onnxscript")
    counts = _count_muls(monkeypatch)
    torch.manual_seed(7)
    with builder_patch({"TILED": tiled}):
        export_and_step(device, ScaledAttention(reuse), tmp_path / "att.onnx", dynamo,
                        17 if not dynamo else 18,
                        f"scaled attention {'dynamo' if dynamo else 'ts'}", batch=3,
                        dynamic=True)
    assert counts, "the plan never ran the fold"
    before, after = counts[0]
    # q's, k's and the output's Muls fold (q's stays when the sum reads it too)
    assert before - after == (2 if reuse else 3), (before, after)


def test_scaled_attention_on_workgroup_kernels(device, tmp_path):
    """The GPU adapters' batched products forced onto matmul_wg (MATMUL_WG 0)."""
    from torch_models import export_and_step
    torch.manual_seed(8)
    with builder_patch({"TILED": True, "MATMUL_WG": 0}):
        export_and_step(device, ScaledAttention(), tmp_path / "att.onnx", False, 17,
                        "scaled attention wg", batch=3, dynamic=True)


class ScaledGram(nn.Module):
    """a = Linear(x) [N, 16]; the 2-D products (a^T a) * 0.1 and a @ that: plain products,
    which the GPU adapters run on the Gemm's kernels (its own alpha)."""

    def __init__(self):
        super().__init__()
        self.a, self.fc = nn.Linear(784, 16), nn.Linear(16, 10)

    def forward(self, x):
        a = self.a(x.flatten(1))
        return self.fc(a @ ((a.transpose(0, 1) @ a) * 0.1))


@pytest.mark.parametrize("tiled", [False, True])
def test_scaled_plain_products(device, tmp_path, monkeypatch, tiled):
    from torch_models import export_and_step
    counts = _count_muls(monkeypatch)
    torch.manual_seed(9)
    with builder_patch({"TILED": tiled}):
        export_and_step(device, ScaledGram(), tmp_path / "gram.onnx", False, 17,
                        "scaled gram", batch=5, dynamic=True)
    assert counts and counts[0] == [1, 0], counts

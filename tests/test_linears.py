"""engine/rewrites/linears.py: MatMul(x, Transpose(W) or W) + bias Add folded into one Gemm
between views.
The folded graph's shape, one training step of a folded block against the float64 numpy
engine, what is not folded, and the dispatches
the torch-exported ViT saves."""

from pathlib import Path

import numpy as np
import pytest

from cases import case
from conftest import f32, head, node, rng_for, run
from harness import compare, one_step, op_types, oracle
from webgpu_trainer import onnx_io
from webgpu_trainer.engine import builder
from webgpu_trainer.engine.rewrites import linears
from webgpu_trainer.engine.graph import Graph

ZOO = Path(__file__).parent / "fixtures" / "zoo"
TOKENS, D, OUT = 5, 6, 4


def _block(transpose=True, bias_first=True):
    """input [N, 5, 6] -> MatMul(., Transpose(w [4, 6]) or w^T stored [6, 4]) -> Add(b) ->
    Relu -> Flatten -> head."""
    rng = rng_for("linears", transpose, bias_first)
    w = f32(rng.standard_normal((OUT, D) if transpose else (D, OUT)) / np.sqrt(D))
    tensors = [("w", w, "param"), ("b", f32(0.3 * rng.standard_normal(OUT)), "param")]
    nodes = [node("Transpose", ["w"], ["wt"], perm=[1, 0])] if transpose else []
    nodes += [node("MatMul", ["input", "wt" if transpose else "w"], ["m"]),
              node("Add", ["b", "m"] if bias_first else ["m", "b"], ["s"]),
              node("Relu", ["s"], ["r"]), node("Flatten", ["r"], ["f"], axis=1)]
    hn, ht = head("f", TOKENS * OUT, 3, rng)
    x = rng.standard_normal((4, TOKENS, D))
    return case(f"linears/{transpose}_{bias_first}", nodes + hn, tensors + ht, x,
                rng.integers(0, 3, 4), tag="linears")


@pytest.mark.parametrize("transpose", [True, False])
def test_fold_is_views_around_one_gemm(transpose):
    """The MatMul, its weight's Transpose and the bias Add become Reshape -> Gemm -> Reshape
    (transB = 1 where the Transpose was); the Relu and the head stay."""
    g = Graph(_block(transpose).graph)
    folded = linears.fold(g, g.shapes(4))
    ops = op_types(folded)
    assert ops[:5] == ["Reshape", "Gemm", "Reshape", "Relu", "Flatten"], ops
    gemm = folded.nodes[1]
    assert gemm["inputs"][1:] == ["w", "b"] and gemm["attrs"]["transB"] == int(transpose)
    assert folded.shapes(4)["s"] == [4, TOKENS, OUT]


@pytest.mark.parametrize("transpose,bias_first,saved", [(True, True, 3), (False, False, 1)])
def test_folded_block_trains_like_numpy(device, monkeypatch, transpose, bias_first, saved):
    """One step of the folded block (nothing kept, so the bias folds too) against the float64
    numpy engine of the unfolded model, with fewer dispatches than op by op."""
    c = _block(transpose, bias_first)
    # op by op as the fold was measured against: the bias Add's copy of dY included (off,
    # a broadcast Add now shares it, Builder.GRAD_THROUGH_BROADCAST_ADD)
    monkeypatch.setattr(builder.Builder, "GRAD_THROUGH_BROADCAST_ADD", False)
    res = run(one_step(device, c.graph, c.blob, c.x, c.labels))
    compare(c.id, res, oracle(c))
    p = res["plan"]
    assert op_types(p.graph).count("Gemm") == 2
    monkeypatch.setattr(builder.Builder, "FOLD_LINEARS", False)
    off = run(one_step(device, c.graph, c.blob, c.x, c.labels))
    compare(c.id, off, oracle(c))
    n_on, n_off = (len(r["plan"].fwd_train) + len(r["plan"].bwd) for r in (res, off))
    assert n_on <= n_off - saved, (n_on, n_off)


def test_not_folded_where_something_else_reads():
    """A product read by a caller (``keep``), a Transpose with a second reader and a bias of
    another shape keep their nodes."""
    c = _block()
    g = Graph(c.graph)
    kept = linears.fold(g, g.shapes(4), keep={"m"})
    assert op_types(kept)[:4] == ["Reshape", "Gemm", "Reshape", "Add"]
    nodes = [dict(n) for n in c.graph["nodes"]]
    nodes.append(node("Flatten", ["wt"], ["wt_f"], axis=1))  # the transpose read again
    g2 = Graph({**c.graph, "nodes": nodes})
    assert linears.fold(g2, g2.shapes(4)) is g2


def test_vit_folds_its_linears():
    """The torch-exported ViT (TorchScript fixture): every MatMul of a weight becomes a Gemm
    and a training step plans at least 25 fewer dispatches (237 -> 207) (its numbers against numpy:
    tests/test_zoo.py)."""
    from webgpu_trainer.engine.plan import Plan
    from webgpu_trainer.engine.train import memory
    graph, _ = onnx_io.load_bundle(ZOO / "vit-ts.onnx")
    counts = {}
    for fold in (True, False):
        builder.Builder.FOLD_LINEARS = fold
        try:
            plan = memory._run(Plan.build(memory.CountingDevice(), Graph(graph), 8))
        finally:
            builder.Builder.FOLD_LINEARS = True
        counts[fold] = len(plan.fwd_train) + len(plan.bwd)
        if fold:
            left = [n for n in plan.graph.nodes if n["op_type"] == "MatMul"
                    and (n["inputs"][1] in plan.graph.tensors or plan.graph.producer.get(
                        n["inputs"][1], {}).get("op_type") == "Transpose")]
            assert not left
    assert counts[True] <= counts[False] - 25, counts


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_one_by_one_linear_on_tokens_trains(device, tmp_path, dynamo):
    """``nn.Linear(1, 1)`` on [N, 5, 1]: the TorchScript exporter writes its weight as a
    one-value initializer ``onnx::MatMul_*`` (an exporter-generated name), which still trains
    (the product's operand rule, onnx_io/initializers.py); one GPU step against torch float64
    (torch_models.export_and_step: every parameter's gradient, the weight's included)."""
    torch = pytest.importorskip("torch")
    from torch_models import export_and_step

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.fc = torch.nn.Linear(784, 5), torch.nn.Linear(1, 1)
            self.out = torch.nn.Linear(5, 10)

        def forward(self, x):
            return self.out(self.fc(self.a(x.flatten(1)).unsqueeze(-1)).squeeze(-1))

    torch.manual_seed(3)
    graph = export_and_step(device, Net(), tmp_path / "one.onnx", dynamo, 18 if dynamo else 13,
                            "one_by_one_linear")
    assert not [f for f in graph["frozen"] if f["dtype"] == "float32"]

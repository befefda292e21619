"""Attention written by hand: the head split and merge Transposes next to the batched MatMuls
folded into the products' strides (engine/rewrites/transposes.py, ops/matmul.py's strided
operands and outputs). Exported by both torch exporters, trained one step on the CPU adapters'
kernels and on the GPU adapters' (Builder.TILED) against torch in float64 (torch_models
.export_and_step: forward vs onnxruntime, loss and every parameter gradient); each plan must
have folded the Transposes it says it folds (none left next to a MatMul)."""

import pytest

from harness import builder_patch

torch = pytest.importorskip("torch")
nn = torch.nn


class HandAttention(nn.Module):
    """28 rows as tokens -> q, k, v Linears (28 -> 32) -> 4 heads of 8 -> softmax(q k^T / sqrt
    8) v -> heads merged -> the mean over tokens -> Linear to 10. ``variant`` "shared_v": v is
    also read by a second product (a Transpose feeding two MatMuls); "mixed": one v [N, 1, 28,
    8] for all heads (B broadcast along the head dim, which walks A's rows: a kept dim that
    may not pass for rows, as the output is strided) and the heads merged by a perm that is
    not its own inverse (0, 2, 3, 1)."""

    def __init__(self, variant="plain"):
        super().__init__()
        # no key bias: it shifts a row of scores by a constant, its gradient is zero
        self.q, self.k = nn.Linear(28, 32), nn.Linear(28, 32, bias=False)
        self.v = nn.Linear(28, 8 if variant == "mixed" else 32)
        self.fc = nn.Linear(32, 10)
        self.variant = variant

    def forward(self, x):
        x = x.squeeze(1)
        n = x.shape[0]

        def heads(t):
            return t.reshape(n, 28, 4, 8).transpose(1, 2)
        q, k = heads(self.q(x)), heads(self.k(x))
        v = self.v(x).unsqueeze(1) if self.variant == "mixed" else heads(self.v(x))
        att = (q @ k.transpose(-1, -2) * 8 ** -0.5).softmax(-1)
        y = att @ v
        if self.variant == "shared_v":
            y = y + (att.transpose(-1, -2) @ v) * 0.5
        if self.variant == "mixed":
            return self.fc(y.permute(0, 2, 3, 1).reshape(n, 28, 32).mean(1))
        return self.fc(y.transpose(1, 2).reshape(n, 28, 32).mean(1))


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("dynamo", [False, True])
@pytest.mark.parametrize("variant", ["plain", "shared_v", "mixed"])
def test_hand_attention_transposes_fold(device, tmp_path, monkeypatch, tiled, dynamo,
                                        variant):
    from torch_models import export_and_step
    from webgpu_trainer.engine.rewrites import transposes
    if dynamo:
        pytest.importorskip("onnxscript")
    folded = []
    fold = transposes.fold

    def counting(graph, shapes, keep=()):
        out = fold(graph, shapes, keep)
        count = [sum(n["op_type"] == "Transpose" and len(shapes.get(n["inputs"][0], ())) >= 3
                     for n in g.nodes) for g in (graph, out)]
        near = [n for n in out.nodes if n["op_type"] == "Transpose" and
                (any(u["op_type"] == "MatMul" for u in out.consumers.get(n["outputs"][0], []))
                 or (out.producer.get(n["inputs"][0]) or {}).get("op_type") == "MatMul")]
        folded.append((count, near))
        return out
    monkeypatch.setattr(transposes, "fold", counting)
    torch.manual_seed(5)
    with builder_patch({"TILED": tiled}):
        export_and_step(device, HandAttention(variant), tmp_path / "att.onnx", dynamo, 17 if
                        not dynamo else 18, f"hand attention {'dynamo' if dynamo else 'ts'}",
                        batch=3, dynamic=True)
    assert folded, "the plan never ran the fold"
    (before, after), near = folded[0]
    assert before >= 3 and after < before and not near, (before, after, near)

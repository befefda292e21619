"""Attention masks a PyTorch model keeps as registered buffers, exported by torch and trained
natively: an additive causal mask ``triu(full((T, T), -inf), 1)`` imports as a constant (not a
parameter: Adam would learn it, weight decay would make it NaN; onnx_io/initializers.py), and
one GPU step matches torch in float64 (torch_models.export_and_step)."""

import numpy as np
import pytest

from torch_models import export_and_step

torch = pytest.importorskip("torch")
T = 28


class CausalNet(torch.nn.Module):
    """[N, 1, 28, 28] as 28 tokens of 28 -> one causal attention head of 16 (the mask a
    buffer) -> Linear(448, 10)."""

    def __init__(self):
        super().__init__()
        self.q, self.v = torch.nn.Linear(T, 16), torch.nn.Linear(T, 16)
        self.k = torch.nn.Linear(T, 16, bias=False)  # its bias's gradient is 0 (softmax)
        self.out = torch.nn.Linear(16 * T, 10)
        self.register_buffer("mask", torch.triu(torch.full((T, T), float("-inf")), 1))

    def forward(self, x):
        x = x.flatten(1, 2)
        scores = self.q(x) @ self.k(x).transpose(1, 2) / 4 + self.mask
        return self.out((scores.softmax(-1) @ self.v(x)).flatten(1))


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_additive_mask_buffer_is_a_constant(device, tmp_path, dynamo):
    torch.manual_seed(4)
    graph = export_and_step(device, CausalNet(), tmp_path / "causal.onnx", dynamo,
                            18 if dynamo else 13, "causal_mask_buffer", dynamic=True)
    assert "mask" not in {t["name"] for t in graph["tensors"]}
    (mask,) = [f for f in graph["frozen"] if f["name"] == "mask"]
    assert mask["shape"] == [T, T]
    assert mask["reason"].startswith("holds -inf (a mask")
    assert np.isinf(CausalNet().mask.numpy()).sum() == T * (T - 1) // 2

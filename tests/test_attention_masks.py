"""Attention masks a PyTorch model keeps as registered buffers, exported by torch and trained
natively, one GPU step against torch in float64 each (torch_models.export_and_step):

- an additive causal mask ``triu(full((T, T), -inf), 1)`` imports as a constant, not a parameter
  (Adam would learn it, weight decay would make it NaN; onnx_io/initializers.py);
- ``masked_fill(bias[:, :T, :T] == 0, value)`` of a ``tril(ones)`` buffer (nanoGPT's style) and
  ``torch.where(mask, scores, value)``: a Where of a constant condition, imported as
  x * keep + fill (onnx_io/masked_fill.py); also a fill tensor (the dynamo exporter stores it
  as an initializer), two blocks each registering the same buffer (the TorchScript exporter
  stores it once and Identity-copies it), and float16;
- a mask computed from a trained parameter is refused, naming it (not frozen silently)."""

import numpy as np
import pytest

from torch_models import export_and_step

torch = pytest.importorskip("torch")
T = 28


class CausalNet(torch.nn.Module):
    """[N, 1, 28, 28] as 28 tokens of 28 -> one causal attention head of 16 (the mask a
    buffer) -> Linear(448, 10); ``mask_scores`` applies the mask (here: adds it)."""

    def __init__(self):
        super().__init__()
        self.q, self.v = torch.nn.Linear(T, 16), torch.nn.Linear(T, 16)
        self.k = torch.nn.Linear(T, 16, bias=False)  # its bias's gradient is 0 (softmax)
        self.out = torch.nn.Linear(16 * T, 10)
        self.register_buffer("mask", torch.triu(torch.full((T, T), float("-inf")), 1))

    def forward(self, x):
        x = x.flatten(1, 2)
        scores = self.mask_scores(self.q(x) @ self.k(x).transpose(1, 2) / 4)
        return self.out((scores.softmax(-1) @ self.v(x)).flatten(1))

    def mask_scores(self, scores):
        return scores + self.mask


class FilledNet(CausalNet):
    """CausalNet masked by ``masked_fill`` of a ``tril(ones)`` buffer (``where``: by
    ``torch.where(bias == 1, scores, value)``, the scores as Where's X)."""

    def __init__(self, value, where=False):
        super().__init__()
        self.value, self.where = value, where
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, T, T))

    def mask_scores(self, scores):
        t = scores.shape[-1]
        if self.where:
            return torch.where(self.bias[:, :t, :t] == 1, scores, self.value)
        return scores.masked_fill(self.bias[:, :t, :t] == 0, self.value)


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


@pytest.mark.parametrize("value,where", [(float("-inf"), False), (-3.0, False),
                                         (float("-inf"), True)],
                         ids=["masked_fill_inf", "masked_fill_minus3", "where_inf"])
@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_masked_fill_by_a_constant_mask(device, tmp_path, dynamo, value, where):
    torch.manual_seed(5)
    net = FilledNet(value, where)
    graph = export_and_step(device, net, tmp_path / "filled.onnx", dynamo, 18 if dynamo else 13,
                            "masked_fill_buffer", dynamic=True)
    ops = [n["op_type"] for n in graph["nodes"]]
    assert "Where" not in ops and ops.count("Mul") == 1
    assert any(n.startswith("masked_fill by a constant mask") for n in graph["notes"])
    assert "bias" not in {t["name"] for t in graph["tensors"]}
    reasons = {f["name"]: f["reason"] for f in graph["frozen"]}
    if not dynamo:  # (the dynamo exporter folds the buffer's slice and == itself)
        assert reasons["bias"].startswith("read only to compute the mask of node /Where")


def test_where_of_the_input_is_still_refused(tmp_path):
    """A Where whose condition depends on the input is no masked_fill: refused by name."""
    from webgpu_trainer import onnx_io

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(784, 10)

        def forward(self, x):
            x = x.flatten(1)
            return self.fc(x.masked_fill(x > 0, 0.0))

    path = tmp_path / "relu_like.onnx"
    torch.onnx.export(Net(), (torch.zeros(2, 1, 28, 28),), str(path), dynamo=False,
                      input_names=["input"], dynamic_axes={"input": {0: "N"}})
    with pytest.raises(onnx_io.OnnxImportError, match=r"node /Where \(Where, ai.onnx opset "
                                                      r"\d+\) could not be folded"):
        onnx_io.load_bundle(path)


class TensorFillNet(CausalNet):
    """``torch.where(tril(ones) == 1, scores, -arange(T) * 100)``: the fill a tensor."""

    def mask_scores(self, scores):
        fill = -torch.arange(T, dtype=torch.float32) * 100.0
        return torch.where(torch.tril(torch.ones(T, T)) == 1, scores, fill)


class Block(torch.nn.Module):
    """A causal attention head of 28 with its own ``tril(ones)`` buffer and a residual."""

    def __init__(self):
        super().__init__()
        self.q, self.v = torch.nn.Linear(T, T), torch.nn.Linear(T, T)
        self.k = torch.nn.Linear(T, T, bias=False)
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, T, T))

    def forward(self, x):
        t = x.shape[1]
        scores = (self.q(x) @ self.k(x).transpose(1, 2) / 4).masked_fill(
            self.bias[:, :t, :t] == 0, float("-inf"))
        return x + scores.softmax(-1) @ self.v(x)


class TwoBlocksNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.out = torch.nn.Linear(T * T, 10)

    def forward(self, x):
        return self.out(self.blocks(x.flatten(1, 2)).flatten(1))


@pytest.mark.parametrize("cls", [TensorFillNet, TwoBlocksNet], ids=["tensor_fill", "two_blocks"])
@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_masks_more_forms(device, tmp_path, dynamo, cls):
    torch.manual_seed(6)
    graph = export_and_step(device, cls(), tmp_path / "m.onnx", dynamo, 18 if dynamo else 13,
                            "masked_fill_forms", dynamic=True)
    assert "Where" not in [n["op_type"] for n in graph["nodes"]]
    assert not {t["name"] for t in graph["tensors"]} & {"blocks.0.bias", "blocks.1.bias"}


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_float16_masked_fill_imports(tmp_path, dynamo):
    """keep and the zero take x's dtype (float16), so the ONNX checker accepts the rewrite."""
    from webgpu_trainer import onnx_io
    if dynamo:
        pytest.importorskip("onnxscript")
    path = tmp_path / "half.onnx"
    net = FilledNet(float("-inf")).half().eval()
    axes = {"dynamic_shapes": ({0: torch.export.Dim("N")},)} if dynamo else \
        {"dynamic_axes": {"input": {0: "N"}}}
    torch.onnx.export(net, (torch.zeros(2, 1, T, T, dtype=torch.float16),), str(path),
                      dynamo=dynamo, opset_version=18 if dynamo else 13, input_names=["input"],
                      **axes)
    graph, _ = onnx_io.load_bundle(path)
    assert "Where" not in [n["op_type"] for n in graph["nodes"]]


class LearnedMaskNet(CausalNet):
    """A parameter read both as an additive bias and to compute the mask (``w == 0``): the
    mask changes as w trains, so it is no constant."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tril(torch.randn(T, T)).view(1, T, T))

    def mask_scores(self, scores):
        w = self.w[:, :scores.shape[-1], :scores.shape[-1]]
        return (scores + w).masked_fill(w == 0, float("-inf"))


def test_mask_from_a_parameter_is_refused(tmp_path):
    from webgpu_trainer import onnx_io
    path = tmp_path / "learned.onnx"
    torch.onnx.export(LearnedMaskNet(), (torch.zeros(2, 1, T, T),), str(path), dynamo=False,
                      input_names=["input"], dynamic_axes={"input": {0: "N"}})
    with pytest.raises(onnx_io.OnnxImportError, match=r"node /Equal \(Equal, ai.onnx opset \d+\) "
                       r"could not be folded to a constant: it depends on the trained "
                       r"initializer 'w' \(a parameter\), not a constant"):
        onnx_io.load_bundle(path)

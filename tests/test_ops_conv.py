"""Conv and ConvTranspose on the native device against the float64 numpy engine (the cases of
tests/cases/conv.py: strides, asymmetric pads, dilations, groups, depthwise, sizes 1 / 7 / 33,
output_padding, fused ReLUs), the numpy engine against torch, and nn.ConvTranspose2d models from
both exporters against torch (skipped without torch)."""

import numpy as np
import pytest

from cases import conv, ids
from harness import check_case
from webgpu_trainer.cpu.conv import (conv2d, conv2d_backward, conv_transpose2d,
                                      conv_transpose2d_backward)

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", conv.CASES, ids=ids(conv.CASES))
def test_case(device, case):
    check_case(device, case)


def test_numpy_conv_matches_torch():
    """Asymmetric pads, strides, dilations, groups: forward and the three gradients."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    t = lambda a: torch.tensor(a, dtype=torch.float64, requires_grad=True)  # noqa: E731
    x, w, b = rng.standard_normal((2, 4, 9, 8)), rng.standard_normal((6, 2, 3, 2)), \
        rng.standard_normal(6)
    pads, strides, dil = [1, 0, 2, 1], [2, 1], [1, 2]
    dy = rng.standard_normal(conv2d(x, w, b, pads, strides, dil, 2).shape)
    xt, wt, bt = t(x), t(w), t(b)
    yt = F.conv2d(F.pad(xt, (pads[1], pads[3], pads[0], pads[2])), wt, bt, strides, 0, dil, 2)
    yt.backward(torch.tensor(dy))
    assert np.allclose(conv2d(x, w, b, pads, strides, dil, 2), yt.detach().numpy())
    for got, want in zip(conv2d_backward(x, w, dy, pads, strides, dil, 2),
                         (xt.grad, wt.grad, bt.grad)):
        assert np.allclose(got, want.numpy())


def test_numpy_conv1d_matches_torch():
    """A 1-D Conv ([N, C, L], run as [N, C, 1, L]): asymmetric pads, stride, dilation, groups =
    torch's conv1d, forward and the three gradients (float64)."""
    torch = pytest.importorskip("torch")
    from webgpu_trainer.cpu.conv import backward, forward
    F = torch.nn.functional
    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal((2, 4, 19)), rng.standard_normal((6, 2, 3)), \
        rng.standard_normal(6)
    n = {"name": "c", "op_type": "Conv", "inputs": ["x", "w", "b"], "outputs": ["y"],
         "attrs": dict(pads=[2, 1], strides=[2], dilations=[2], group=2)}
    ctx = type("Ctx", (), {"train": True, "input": None})()
    (y,), cache = forward(n, [x, w, b], ctx)
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    yt = F.conv1d(F.pad(xt, (2, 1)), wt, bt, 2, 0, 2, 2)
    dy = rng.standard_normal(y.shape)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    for got, want in zip(backward(n, [x, w, b], [y], cache, [dy], ctx),
                         (xt.grad, wt.grad, bt.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-12)


def test_conv3d_refused(tmp_path):
    """An exported nn.Conv3d imports, and its graph is refused before any work (the shapes
    the trainer checks first) naming the node, its shapes and "3-D"."""
    torch = pytest.importorskip("torch")
    from webgpu_trainer.engine.graph import Graph, GraphError
    from webgpu_trainer.onnx_io import load_bundle
    net = torch.nn.Sequential(torch.nn.Conv3d(1, 2, 3), torch.nn.Flatten(),
                              torch.nn.Linear(2 * 2 * 26 * 26, 10))
    path = tmp_path / "conv3d.onnx"
    torch.onnx.export(net, torch.zeros(1, 1, 4, 28, 28), str(path), dynamo=False,
                      opset_version=17, input_names=["input"], output_names=["output"])
    graph, _ = load_bundle(path)
    with pytest.raises(GraphError) as err:
        Graph(graph).shapes(2)
    assert str(err.value) == "node /0/Conv (Conv): input [2, 1, 4, 28, 28] and weight " \
        "[2, 1, 3, 3, 3] are not a 1-D (NCL) or 2-D (NCHW) convolution (3-D Conv is not " \
        "supported)"
@pytest.mark.parametrize("pads,strides,dil,group,opad", [
    ([1, 0, 2, 1], [2, 1], [1, 2], 2, [1, 0]), ([0, 0, 0, 0], [1, 1], [1, 1], 1, [0, 0]),
    ([1, 1, 1, 1], [3, 2], [2, 1], 3, [2, 1]), ([2, 2, 2, 2], [1, 1], [1, 1], 6, [0, 0])])
def test_numpy_conv_transpose_matches_torch(pads, strides, dil, group, opad):
    """F.conv_transpose2d in float64 (asymmetric pads by cropping its output): forward, dx,
    dw, db within 1e-12 / 1e-10."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(1)
    t = lambda a: torch.tensor(a, dtype=torch.float64, requires_grad=True)  # noqa: E731
    x, w, b = rng.standard_normal((2, 6, 5, 4)), rng.standard_normal((6, 2, 3, 2)), \
        rng.standard_normal(2 * group)
    y = conv_transpose2d(x, w, b, pads, strides, dil, group, opad)
    xt, wt, bt = t(x), t(w), t(b)
    full = F.conv_transpose2d(xt, wt, bt, strides, 0, opad, group, dil)
    yt = full[:, :, pads[0]:full.shape[2] - pads[2], pads[1]:full.shape[3] - pads[3]]
    dy = rng.standard_normal(y.shape)
    yt.backward(torch.tensor(dy))
    assert y.shape == tuple(yt.shape)
    assert np.abs(y - yt.detach().numpy()).max() <= 1e-12 * np.abs(y).max()
    for got, want in zip(conv_transpose2d_backward(x, w, dy, pads, strides, dil, group, opad),
                         (xt.grad, wt.grad, bt.grad)):
        assert np.abs(got - want.numpy()).max() <= 1e-10 * np.abs(want.numpy()).max()


@pytest.mark.parametrize("dynamo,opset", [(False, 13), (False, 17), (True, 18), (True, 21)])
def test_torch_conv_transpose_model(device, tmp_path, dynamo, opset):
    """nn.ConvTranspose2d (stride 2 with output_padding; depthwise; no bias, dilated) from both
    exporters imports and trains one step like torch (forward vs onnxruntime)."""
    torch = pytest.importorskip("torch")
    from torch_models import export_and_step
    nn = torch.nn

    class Up(nn.Module):
        def __init__(self):
            super().__init__()
            self.down = nn.Conv2d(1, 4, 3, stride=2)  # 13 x 13
            self.up = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
            self.dw = nn.ConvTranspose2d(6, 6, 3, padding=1, groups=6)
            self.nb = nn.ConvTranspose2d(6, 2, 2, stride=1, dilation=2, bias=False)
            self.fc = nn.Linear(2 * 28 * 28, 10)

        def forward(self, x):
            h = torch.relu(self.up(self.down(x)))
            return self.fc(self.nb(torch.tanh(self.dw(h))).flatten(1))

    torch.manual_seed(0)
    graph = export_and_step(device, Up(), tmp_path / "up.onnx", dynamo, opset,
                            f"torch ConvTranspose opset {opset}")
    assert sum(n["op_type"] == "ConvTranspose" for n in graph["nodes"]) == 3


def _t_filled(attrs, x=(1, 2, 4, 4)):
    from webgpu_trainer.engine import ops
    node = {"name": "t", "op_type": "ConvTranspose", "inputs": ["x", "w"], "outputs": ["y"],
            "attrs": dict(strides=[2, 2], **attrs)}
    shapes = {"x": list(x) if x else None, "w": [2, 3, 3, 3]}
    problems = ops.fill_defaults(node, 17, shapes.get)
    return node["attrs"], problems


def test_conv_transpose_output_shape_and_auto_pad_become_pads():
    """ONNX's formula: total = 2 (4 - 1) + 3 - output_shape; NOTSET puts the odd pad first,
    SAME_UPPER last; SAME_* means output = input x stride; a larger output_shape is refused."""
    attrs, problems = _t_filled({"output_shape": [9, 9]})
    assert attrs["pads"] == [0, 0, 0, 0] and "output_shape" not in attrs and not problems
    assert _t_filled({"output_shape": [8, 7]})[0]["pads"] == [1, 1, 0, 1]
    attrs, _ = _t_filled({"output_shape": [8, 7], "auto_pad": "SAME_UPPER"})
    assert attrs["pads"] == [0, 1, 1, 1] and attrs["auto_pad"] == "NOTSET"
    assert _t_filled({"auto_pad": "SAME_LOWER"})[0]["pads"] == [1, 1, 0, 0]
    assert _t_filled({"output_shape": [10, 9]})[1] == [
        "node t (ConvTranspose): output_shape [10, 9] is larger than the window reaches "
        "(set output_padding)"]
    assert _t_filled({"auto_pad": "SAME_UPPER"}, x=None)[1] == [
        "node t (ConvTranspose): output_shape / auto_pad need the input's spatial size, "
        "which is unknown"]

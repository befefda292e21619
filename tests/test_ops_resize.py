"""Resize on the native device against the float64 numpy engine (tests/cases/resize.py), the
numpy engine against torch's F.interpolate in float64, and nn.Upsample / F.interpolate models
from both exporters against torch (skipped without torch)."""

import numpy as np
import pytest

from cases import ids, resize
from harness import check_case
from webgpu_trainer.cpu import resize as cpu_resize

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", resize.CASES, ids=ids(resize.CASES))
def test_case(device, case):
    check_case(device, case)


# (F.interpolate keywords, the ONNX attributes and scales / sizes torch's exporter writes)
TORCH = [
    (dict(scale_factor=2, mode="nearest"),
     dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
     [1, 1, 2, 2], None),
    (dict(scale_factor=1.5, mode="nearest"),
     dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
     [1, 1, 1.5, 1.5], None),
    (dict(size=(11, 4), mode="nearest"),
     dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
     None, [-1, -1, 11, 4]),
    (dict(scale_factor=2, mode="bilinear", align_corners=False),
     dict(mode="linear", coordinate_transformation_mode="half_pixel"), [1, 1, 2, 2], None),
    (dict(scale_factor=(3, 0.5), mode="bilinear", align_corners=True),
     dict(mode="linear", coordinate_transformation_mode="align_corners"), [1, 1, 3, 0.5], None),
    (dict(size=(4, 13), mode="bilinear", align_corners=False),
     dict(mode="linear", coordinate_transformation_mode="half_pixel"), None, [-1, -1, 4, 13]),
    (dict(size=(1, 3), mode="bilinear", align_corners=True),
     dict(mode="linear", coordinate_transformation_mode="align_corners"), None, [-1, -1, 1, 3]),
]


@pytest.mark.parametrize("kw,attrs,scales,sizes", TORCH, ids=[str(t[0]) for t in TORCH])
def test_numpy_resize_matches_torch(kw, attrs, scales, sizes):
    """The numpy engine's forward and input gradient against F.interpolate in float64 (1e-12 /
    1e-10), with the attributes the exporters write for each call."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 7, 6))
    node = {"name": "r", "op_type": "Resize", "inputs": ["x", "", "s", "z"], "outputs": ["y"],
            "attrs": attrs}
    ins = [x, None, scales, sizes]
    (y,), cache = cpu_resize.forward(node, ins, None)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.interpolate(xt, **kw)
    dy = rng.standard_normal(y.shape)
    yt.backward(torch.tensor(dy))
    assert y.shape == tuple(yt.shape)
    assert np.abs(y - yt.detach().numpy()).max() <= 1e-12 * np.abs(y).max()
    dx = cpu_resize.backward(node, ins, [y], cache, [dy], None)[0]
    assert np.abs(dx - xt.grad.numpy()).max() <= 1e-10 * np.abs(dx).max()


@pytest.mark.parametrize("dynamo,opset", [(False, 13), (False, 17), (True, 18), (True, 21)])
def test_torch_upsample_model(device, tmp_path, dynamo, opset):
    """nn.Upsample (nearest x2, bilinear with align_corners True: by size from TorchScript,
    whose sizes follow the batch through Shape; by scale from dynamo, whose static export bakes
    the batch into sizes) and F.interpolate (bilinear x0.5) from both exporters import and
    train one step like torch."""
    torch = pytest.importorskip("torch")
    from torch_models import export_and_step
    nn, F = torch.nn, torch.nn.functional

    class Ups(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 3, 3, stride=2)  # 13 x 13
            self.near = nn.Upsample(scale_factor=2, mode="nearest")  # 26
            self.bil = nn.Upsample(scale_factor=(0.75, 0.5), mode="bilinear",
                                   align_corners=True) if dynamo else \
                nn.Upsample(size=(20, 15), mode="bilinear", align_corners=True)
            self.fc = nn.Linear(3 * 9 * 6 if dynamo else 3 * 10 * 7, 10)

        def forward(self, x):
            h = self.bil(torch.tanh(self.near(self.conv(x))))
            return self.fc(F.interpolate(h, scale_factor=0.5, mode="bilinear").flatten(1))

    torch.manual_seed(0)
    graph = export_and_step(device, Ups(), tmp_path / "ups.onnx", dynamo, opset,
                            f"torch Resize opset {opset}")
    assert sum(n["op_type"] == "Resize" for n in graph["nodes"]) == 3


@pytest.mark.parametrize("attr,value,allowed", [
    ("mode", "cubic", "nearest, linear"),
    ("coordinate_transformation_mode", "tf_crop_and_resize",
     "half_pixel, pytorch_half_pixel, asymmetric, align_corners")])
def test_import_refuses_unsupported_resize(tmp_path, attr, value, allowed):
    """A Resize the engine cannot run: the import names the node, the attribute and its value,
    and the file is left as it was."""
    import onnx
    from onnx import TensorProto, helper

    from webgpu_trainer.onnx_io import load_bundle
    from webgpu_trainer.onnx_io.errors import OnnxImportError
    scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 0.5, 0.5])
    w = helper.make_tensor("w", TensorProto.FLOAT, [10, 196], [0.01] * 1960)
    nodes = [helper.make_node("Resize", ["input", "", "scales"], ["r"], name="up",
                              **{attr: value}),
             helper.make_node("Flatten", ["r"], ["f"], axis=1),
             helper.make_node("Gemm", ["f", "w"], ["output"], transB=1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 28, 28])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 10])], [scales, w])
    path = tmp_path / "resize.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    before = path.read_bytes()
    with pytest.raises(OnnxImportError) as err:
        load_bundle(path)
    assert f"node up (Resize): {attr} {value!r} is not supported (only {allowed})" \
        in err.value.problems
    assert path.read_bytes() == before

"""A small classifier that brings ConvTranspose and Resize, as people write one: Conv down ->
ReLU -> ConvTranspose2d up (output_padding) -> ReLU -> Conv -> MaxPool -> nn.Upsample
(bilinear) -> AvgPool -> Linear on [N, 1, 28, 28], from both exporters with a dynamic batch.
Each imports; the device's forward matches onnxruntime and its first-step gradients of every
parameter match torch in float64; a few Adam steps natively match the numpy engine step by step
and lower the loss."""

import numpy as np
import pytest

from torch_models import check_engines_agree

torch = pytest.importorskip("torch")
nn = torch.nn
EXPORTS = [(False, 13), (False, 17), (True, 18), (True, 21)]


class UpNet(nn.Module):
    """28 -> 14 (Conv s2) -> 28 (ConvTranspose s2) -> 14 (Conv s2) -> 7 (MaxPool) -> 14
    (Upsample x2) -> 7 (AvgPool) -> Linear."""

    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(1, 6, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1)
        self.conv = nn.Conv2d(4, 8, 3, stride=2, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.upsample = nn.Upsample(scale_factor=2, mode="bilinear")
        self.avg = nn.AvgPool2d(2)
        self.fc = nn.Linear(8 * 7 * 7, 10)

    def forward(self, x):
        h = torch.relu(self.up(torch.relu(self.down(x))))
        h = self.avg(self.upsample(self.pool(self.conv(h))))
        return self.fc(h.flatten(1))


@pytest.mark.parametrize("dynamo,opset", EXPORTS)
def test_upnet_imports_and_steps_like_torch(device, tmp_path, dynamo, opset):
    from torch_models import export_and_step
    torch.manual_seed(5)
    graph = export_and_step(device, UpNet(), tmp_path / "upnet.onnx", dynamo, opset,
                            f"UpNet opset {opset}", dynamic=True)
    ops = [n["op_type"] for n in graph["nodes"]]
    assert ops.count("ConvTranspose") == 1 and ops.count("Resize") == 1
    assert graph["inputs"][0]["shape"][0] == "N"


def _blobs(count, seed):
    """A Split of ``count`` 28x28 images whose class k is a bright 4x4 block at (2k + 2, 2k + 2)
    over noise."""
    from webgpu_trainer.engine.train.data import Split
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, count).astype(np.uint8)
    images = rng.integers(0, 60, (count, 28, 28)).astype(np.uint8)
    for i, k in enumerate(labels):
        images[i, 2 * k + 2:2 * k + 6, 2 * k + 2:2 * k + 6] = 255
    return Split(images.tobytes(), labels.tobytes(), count, labels.tobytes())


@pytest.mark.parametrize("dynamo,opset", [(False, 17), (True, 18)])
def test_upnet_trains_natively_like_numpy(device, tmp_path, dynamo, opset):
    """10 Adam steps (batch 16, lr 0.01) on the device and on the numpy engine: the same loss
    at every step (1e-4 relative) and the loss falls (the last 3 steps' mean below 0.9 of the
    first 3's)."""
    if dynamo:
        pytest.importorskip("onnxscript")
    from webgpu_trainer.onnx_io import load_bundle
    torch.manual_seed(6)
    path = tmp_path / "upnet.onnx"
    axes = {"dynamic_shapes": ({0: torch.export.Dim("N")},)} if dynamo else \
        {"dynamic_axes": {"input": {0: "N"}, "output": {0: "N"}}}
    torch.onnx.export(UpNet().eval(), (torch.zeros(2, 1, 28, 28),), str(path), dynamo=dynamo,
                      opset_version=opset, input_names=["input"], output_names=["output"],
                      **axes)
    graph, blob = load_bundle(path)
    cfg = {"batch_size": 16, "epochs": 1, "seed": 3, "init": "finetune", "eval_images": 16,
           "val_images": 16, "report_every": 1, "optimizer": "adam", "lr": 0.01}
    check_engines_agree(device, graph, blob, cfg,
                        lambda: (_blobs(10 * 16 + 16, 1), _blobs(16, 2)), 10, 0.9)

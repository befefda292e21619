"""Build the reference model SeedNet (shared/DESIGN.md) and export ``models/seednet.onnx``.

Usage: ``python scripts/make_seednet.py [OUT_PATH]`` (default ``models/seednet.onnx``).

Needs torch (test/dev only, never a runtime dependency). The export is in *training* mode so
that the ONNX graph keeps ``Dropout(ratio, training_mode)`` and ``BatchNormalization`` with
``training_mode=1`` and three outputs: the engine trains this graph; ``onnx_io.export_onnx``
turns it into an inference graph afterwards. An eval-mode export would drop Dropout and dedup
identical initializers (e.g. the all-zero BN biases) into Identity nodes.

Input: float32 ``[N, 1, 28, 28]`` (normalised MNIST); output: float32 ``[N, 10]`` log-probs.
"""
from __future__ import annotations

import pathlib
import sys

import onnx
import torch
from torch import nn

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = "SeedNet: made by scripts/make_seednet.py"


class SeedNet(nn.Module):
    """conv1..conv3 (3x3, relu) -> BN2d -> flatten -> fc1 -> relu -> dropout -> fc2 -> BN1d
    -> log_softmax. Input ``[N, 1, 28, 28]`` float32, output ``[N, 10]`` float32."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3)
        self.conv2 = nn.Conv2d(8, 16, 3)
        self.conv3 = nn.Conv2d(16, 24, 3)
        self.norm1 = nn.BatchNorm2d(24)
        self.fc1 = nn.Linear(24 * 22 * 22, 32)
        self.dropout = nn.Dropout(0.3)
        self.fc2 = nn.Linear(32, 10)
        self.norm2 = nn.BatchNorm1d(10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.relu(self.conv3(x))
        x = self.norm1(x)
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        x = self.dropout(x)
        x = self.fc2(x)
        x = self.norm2(x)
        return torch.log_softmax(x, dim=1)


def build(path: pathlib.Path) -> None:
    """Export SeedNet (seed 0) to ``path`` and stamp doc_string / model_version."""
    torch.manual_seed(0)
    model = SeedNet()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(
        model.train(), torch.zeros(2, 1, 28, 28), str(path),
        opset_version=16, dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False, input_names=["input"], output_names=["output"],
        dynamic_axes={"input": {0: "N"}, "output": {0: "N"}},
    )
    m = onnx.load(str(path))
    m.doc_string = DOC
    m.model_version = 1
    m.graph.name = "seednet"
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[1]) if len(argv) > 1 else ROOT / "models" / "seednet.onnx"
    build(out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

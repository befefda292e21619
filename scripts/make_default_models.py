"""Export the shipped default models, one per shipped dataset shape (issue 18).

Usage: ``python scripts/make_default_models.py [OUT_DIR]`` (default ``models/``).

``models/seednet.onnx`` (1x28x28, 10 classes: MNIST, Fashion-MNIST) is scripts/make_seednet.py's
and stays as it is. This script writes the SeedNet-like nets of
``onnx_io.default_model.architecture`` as torch modules (``DefaultNet``), exported as
make_seednet.py exports SeedNet (training mode: Dropout and BatchNormalization stay trainable;
opset 18; dynamic batch):

- ``seednet-rgb32.onnx``: 3x32x32, 10 classes (CIFAR-10),
- ``seednet-rgb32-c100.onnx``: 3x32x32, 100 classes (CIFAR-100).

Needs torch (test/dev only). ``onnx_io.make_default_model`` builds the same layers with
onnx.helper for any other dataset, without torch; tests/test_default_model.py checks the two
against each other.
"""
from __future__ import annotations

import pathlib
import sys

import onnx
import torch
from torch import nn

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "py"))
from webgpu_trainer.onnx_io.default_model import (  # noqa: E402
    OPSET, architecture, multiply_adds)

MODELS = {"seednet-rgb32": ((3, 32, 32), 10), "seednet-rgb32-c100": ((3, 32, 32), 100)}


class DefaultNet(nn.Module):
    """The torch module of ``architecture(sample_shape, classes)``: parameters named as its
    layers (``conv1.weight``, ``norm1.running_mean``, ...), output log-probabilities."""

    def __init__(self, sample_shape, classes: int) -> None:
        super().__init__()
        self.steps = []
        for layer in architecture(sample_shape, classes):
            kind = layer[0]
            if kind == "conv":
                setattr(self, layer[1], nn.Conv2d(layer[2], layer[3], 3, padding=1))
            elif kind == "linear":
                setattr(self, layer[1], nn.Linear(layer[2], layer[3]))
            elif kind == "batchnorm":
                cls = nn.BatchNorm2d if layer[1] == "norm1" else nn.BatchNorm1d
                setattr(self, layer[1], cls(layer[2]))
            elif kind == "dropout":
                self.dropout = nn.Dropout(layer[1])
            self.steps.append(layer[1] if kind in ("conv", "linear", "batchnorm") else kind)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for step in self.steps:
            if step == "relu":
                x = torch.relu(x)
            elif step == "maxpool":
                x = nn.functional.max_pool2d(x, 2)
            elif step == "flatten":
                x = torch.flatten(x, 1)
            elif step == "logsoftmax":
                x = torch.log_softmax(x, dim=1)
            else:
                x = getattr(self, step)(x)
        return x


def build(path: pathlib.Path, sample_shape, classes: int) -> None:
    """Export ``DefaultNet`` (seed 0) for ``sample_shape`` x ``classes`` to ``path``."""
    torch.manual_seed(0)
    model = DefaultNet(sample_shape, classes)
    torch.onnx.export(
        model.train(), torch.zeros(2, *sample_shape), str(path),
        opset_version=OPSET, dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False, input_names=["input"], output_names=["output"],
        dynamic_axes={"input": {0: "N"}, "output": {0: "N"}},
    )
    m = onnx.load(str(path))
    m.doc_string = (f"{path.stem}: SeedNet-like, {'x'.join(map(str, sample_shape))} x "
                    f"{classes} classes, made by scripts/make_default_models.py")
    m.model_version = 1
    m.graph.name = path.stem
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[1]) if len(argv) > 1 else ROOT / "models"
    out.mkdir(parents=True, exist_ok=True)
    for name, (shape, classes) in MODELS.items():
        path = out / f"{name}.onnx"
        build(path, shape, classes)
        print(f"wrote {path} ({path.stat().st_size} bytes, "
              f"{multiply_adds(shape, classes):,} multiply-adds per image)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

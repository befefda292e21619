"""Build the import fixtures: small PyTorch models exported to ONNX by both exporters.

Usage: ``.venv/bin/python scripts/make_fixtures.py [OUT_DIR [MODEL ...]]`` (default
``tests/fixtures/models``, every model of ``MODELS``). Needs torch and onnxscript (the
``fixtures`` optional dependency group of pyproject.toml); the tests that read the fixtures
need neither.

Every model takes float32 ``[N, 1, 28, 28]`` and gives float32 ``[N, 10]``. Each is exported
three times:

- ``<model>-ts13``: TorchScript exporter (``dynamo=False``), opset 13, static batch of 4;
- ``<model>-ts17``: TorchScript exporter, opset 17, dynamic batch axis ``N``;
- ``<model>-dynamo18``: dynamo exporter (``dynamo=True``), opset 18, dynamic batch axis.

Models with BatchNorm or Dropout are exported in training mode
(``training=torch.onnx.TrainingMode.TRAINING`` for the TorchScript exporter, ``model.train()``
for the dynamo exporter), the others in eval mode. Notes on what the exporters do:

- the dynamo exporter writes BatchNormalization without ``training_mode`` (inference form)
  even in train mode, and its optimizer (``optimize=True``, the default) may fold a
  BatchNorm1d into the preceding Gemm; when that drops a parameter the fixture is exported
  again with ``optimize=False`` (raw graph with Shape/Squeeze/Concat shape arithmetic);
- the TorchScript exporter traces a train-mode model by running it, which updates the
  BatchNorm running statistics before they are written: the references below are computed
  from the values the .onnx file holds;
- BatchNorm affine parameters and statistics are randomised (``randomize_norms``): the
  default ones/zeros let exporters deduplicate them.

Next to each ``<fixture>.onnx`` a ``<fixture>.npz`` holds:

- ``x``: float32 [4, 1, 28, 28], the input batch (MNIST-like strokes, normalised);
  ``labels``: int64 [4];
- ``out``: torch's eval-mode output (stored float32 [4, 10]) for ``x``;
- ``loss``: the loss below; ``loss_kind``: "nll" (model ends in log_softmax), "nll_log" (model
  ends in softmax: ``F.nll_loss(torch.log(p), labels)``, what such a model means) or
  "cross_entropy" (torch.nn.functional.cross_entropy of the output);
- ``grad/<name>``: d loss / d parameter (stored float32) for every trainable parameter, keyed
  by the name the ONNX file gives it (an initializer, or the output of an ``Identity`` of an
  initializer when the exporter deduplicated equal values). Computed in TRAIN mode (BatchNorm
  with batch statistics) with dropout DISABLED by setting every Dropout's p to 0 (so a
  comparison must run the graph's Dropout nodes with ratio 0);
- ``buffer/<name>``: BatchNorm running statistics after that one train-mode forward (torch
  momentum 0.1 = ONNX momentum 0.9), for models with BatchNorm;
- ``meta``: JSON: exporter, opset, dynamic_batch, mode, optimize (dynamo), torch / onnx
  versions.

All references are computed by torch in float64 from the float32 weights of the file.
Everything is seeded, so re-running gives the same files up to exporter-version differences.
"""
from __future__ import annotations

import copy
import json
import pathlib
import sys
import warnings

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper
from torch import nn

ROOT = pathlib.Path(__file__).resolve().parents[1]
BATCH = 4
LABELS = [3, 0, 7, 9]


# ----------------------------------------------------------------------------- models


class MLP(nn.Module):
    """Flatten -> Linear(784, 10) -> ReLU -> Dropout(0.2) -> Linear(10, 10)."""

    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(784, 10)
        self.drop = nn.Dropout(0.2)
        self.fc2 = nn.Linear(10, 10)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(self.flatten(x)))))


class SeedNetSmall(nn.Module):
    """SeedNet (scripts/make_seednet.py) with fewer channels: 3x conv3x3+relu -> BN2d ->
    flatten -> fc1 -> relu -> dropout -> fc2 -> BN1d -> log_softmax."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 2, 3)
        self.conv2 = nn.Conv2d(2, 4, 3)
        self.conv3 = nn.Conv2d(4, 3, 3)
        self.norm1 = nn.BatchNorm2d(3)
        self.fc1 = nn.Linear(3 * 22 * 22, 8)
        self.dropout = nn.Dropout(0.3)
        self.fc2 = nn.Linear(8, 10)
        self.norm2 = nn.BatchNorm1d(10)

    def forward(self, x):
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


class MnistCNN(nn.Module):
    """The PyTorch MNIST example's Net (examples/mnist/main.py) with 4/8 channels and 12
    hidden units: conv-relu-conv-relu-maxpool2-dropout-flatten-fc-relu-dropout-fc-log_softmax."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(8 * 12 * 12, 12)
        self.fc2 = nn.Linear(12, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


class LeNet5(nn.Module):
    """LeNet-5 (tanh, average pooling), narrow: conv5x5(pad 2) 4 -> avgpool -> conv5x5 8 ->
    avgpool -> fc 200-32-16-10."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 5, padding=2)
        self.pool1 = nn.AvgPool2d(2)
        self.conv2 = nn.Conv2d(4, 8, 5)
        self.pool2 = nn.AvgPool2d(2)
        self.fc1 = nn.Linear(8 * 5 * 5, 32)
        self.fc2 = nn.Linear(32, 16)
        self.fc3 = nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool1(torch.tanh(self.conv1(x)))
        x = self.pool2(torch.tanh(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = torch.tanh(self.fc1(x))
        x = torch.tanh(self.fc2(x))
        return self.fc3(x)


class StridedBN(nn.Module):
    """Stride-2 padded convs with BatchNorm, GlobalAveragePool (AdaptiveAvgPool2d(1)), Linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.conv3 = nn.Conv2d(16, 16, 3, stride=2, padding=(2, 1))
        self.bn3 = nn.BatchNorm2d(16)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        x = self.pool(x)
        return self.fc(torch.flatten(x, 1))


class ViewFlatten(nn.Module):
    """Conv stride 2 -> relu -> ``x.view(x.size(0), -1)`` -> Linear."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, stride=2)
        self.fc = nn.Linear(4 * 13 * 13, 10)

    def forward(self, x):
        x = F.relu(self.conv(x))
        x = x.view(x.size(0), -1)
        return self.fc(x)


class GroupedDilated(nn.Module):
    """Dilated conv, grouped conv, depthwise padded conv, maxpool 3/2, Linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3)
        self.conv2 = nn.Conv2d(8, 8, 3, groups=4, dilation=2)
        self.conv3 = nn.Conv2d(8, 8, 3, groups=8, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2)
        self.fc = nn.Linear(8 * 10 * 10, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))      # 26
        x = F.relu(self.conv2(x))      # 22
        x = F.relu(self.conv3(x))      # 22
        x = self.pool(x)               # 10
        return self.fc(torch.flatten(x, 1))


class ResidualCat(nn.Module):
    """A residual add (h + conv(h)) and a channel concat (torch.cat), avgpool 4, Linear."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, padding=1)
        self.body = nn.Conv2d(4, 4, 3, padding=1)
        self.side = nn.Conv2d(4, 2, 1)
        self.pool = nn.AvgPool2d(4)
        self.fc = nn.Linear(6 * 7 * 7, 10)

    def forward(self, x):
        h = F.relu(self.stem(x))
        h = F.relu(h + self.body(h))
        h = torch.cat([h, self.side(h)], dim=1)
        return self.fc(torch.flatten(self.pool(h), 1))


class SigmoidHead(nn.Module):
    """Conv -> LeakyReLU(0.1) -> maxpool -> flatten -> Linear -> Sigmoid (a sigmoid head)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 5, stride=2)
        self.act = nn.LeakyReLU(0.1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(4 * 6 * 6, 10)

    def forward(self, x):
        x = self.pool(self.act(self.conv(x)))
        return torch.sigmoid(self.fc(torch.flatten(x, 1)))


class GeluSoftmax(nn.Module):
    """Flatten -> Linear -> GELU -> Linear -> LeakyReLU -> Linear -> Softmax (a softmax head)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 10)
        self.fc2 = nn.Linear(10, 12)
        self.fc3 = nn.Linear(12, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = F.gelu(self.fc1(x))
        x = F.leaky_relu(self.fc2(x), 0.2)
        return torch.softmax(self.fc3(x), dim=1)


class TransformerEnc(nn.Module):
    """The image as 28 tokens of 28 pixels -> Linear to 64 -> ``nn.TransformerEncoderLayer(64,
    4, 128, activation="gelu", norm_first=True, batch_first=True)`` (``nn.MultiheadAttention``'s
    packed q/k/v: Gather on activations) -> mean over tokens -> Linear. Not at opset 13: the
    TorchScript exporter writes scaled_dot_product_attention from opset 14."""

    EXPORTS = ("ts17", "dynamo18")

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(28, 64)
        self.enc = nn.TransformerEncoderLayer(64, 4, 128, activation="gelu", norm_first=True,
                                              batch_first=True)
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        x = x.reshape(x.shape[0], 28, 28)
        return self.head(self.enc(self.inp(x)).mean(1))


MODELS = {
    "mlp": MLP,
    "seednet_small": SeedNetSmall,
    "mnist_cnn": MnistCNN,
    "lenet5": LeNet5,
    "strided_bn": StridedBN,
    "view_flatten": ViewFlatten,
    "grouped_dilated": GroupedDilated,
    "residual_cat": ResidualCat,
    "sigmoid_head": SigmoidHead,
    "gelu_softmax": GeluSoftmax,
    "transformer_enc": TransformerEnc,
}
EXPORTS = {  # fixture suffix -> (dynamo, opset, dynamic batch)
    "ts13": (False, 13, False),
    "ts17": (False, 17, True),
    "dynamo18": (True, 18, True),
}


def randomize_norms(model: nn.Module) -> nn.Module:
    """Give every BatchNorm non-trivial affine parameters and running statistics (the default
    ones/zeros would let exporters deduplicate or drop them, and test nothing)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                c = m.num_features
                m.weight.copy_(0.5 + torch.rand(c, generator=g))
                m.bias.copy_(0.2 * torch.randn(c, generator=g))
                m.running_mean.copy_(0.2 * torch.randn(c, generator=g))
                m.running_var.copy_(0.5 + torch.rand(c, generator=g))
    return model


# ----------------------------------------------------------------------------- data


def input_batch() -> np.ndarray:
    """Four MNIST-like images, normalised as the trainer does ((x/255 - 0.1307) / 0.3081):
    background -0.4242 with a few bright random strokes. float32 [4, 1, 28, 28]."""
    rng = np.random.default_rng(1234)
    img = np.zeros((BATCH, 28, 28), np.float32)
    for b in range(BATCH):
        for _ in range(6):
            r, c = rng.integers(4, 24, size=2)
            dr, dc = rng.integers(-1, 2, size=2)
            for t in range(8):
                rr, cc = r + t * dr, c + t * dc
                if 0 <= rr < 27 and 0 <= cc < 27:
                    img[b, rr:rr + 2, cc:cc + 2] = rng.uniform(0.6, 1.0)
    return ((img - 0.1307) / 0.3081).astype(np.float32)[:, None]


def _has_train_layers(model: nn.Module) -> bool:
    return any(isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.Dropout,
                              nn.MultiheadAttention)) for m in model.modules())


def _final_op(onnx_model: onnx.ModelProto) -> str | None:
    out = onnx_model.graph.output[0].name
    return next((n.op_type for n in onnx_model.graph.node if out in n.output), None)


# ----------------------------------------------------------------------------- export


def export(model: nn.Module, suffix: str, path: pathlib.Path) -> dict:
    """Export a copy of ``model`` to ``path``; returns the options used (for the .npz)."""
    dynamo, opset, dynamic = EXPORTS[suffix]
    train = _has_train_layers(model)
    x = torch.from_numpy(input_batch())
    opts = {"exporter": "dynamo" if dynamo else "torchscript", "opset": opset,
            "dynamic_batch": dynamic, "mode": "train" if train else "eval"}
    m = copy.deepcopy(model).train(train)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            for optimize in (True, False):
                prog = torch.onnx.export(
                    m, (x,), dynamo=True, opset_version=opset, optimize=optimize,
                    input_names=["input"], output_names=["output"],
                    dynamic_shapes={"x": {0: torch.export.Dim("N")}} if dynamic else None)
                prog.save(str(path))
                names = {t.name for t in onnx.load(str(path)).graph.initializer}
                if all(n in names for n, _ in model.named_parameters()):
                    break  # the optimizer kept every parameter (it may fold e.g. BN1d into Gemm)
            opts["optimize"] = optimize
        else:
            torch.onnx.export(
                m, (x,), str(path), dynamo=False, opset_version=opset,
                training=torch.onnx.TrainingMode.TRAINING if train
                else torch.onnx.TrainingMode.EVAL,
                do_constant_folding=not train, input_names=["input"], output_names=["output"],
                dynamic_axes={"input": {0: "N"}, "output": {0: "N"}} if dynamic else None)
    onnx_model = onnx.load(str(path))
    for node in onnx_model.graph.node:  # source paths and line numbers of this script: drop
        keep = [p for p in node.metadata_props if "stack_trace" not in p.key]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    onnx_model.doc_string = f"webgpu-trainer import fixture {path.stem} (scripts/make_fixtures.py)"
    onnx.checker.check_model(onnx_model, full_check=True)
    onnx.save(onnx_model, str(path))
    return opts


def onnx_values(model: nn.Module, onnx_model: onnx.ModelProto) -> dict[str, tuple]:
    """torch parameter / running-statistic name -> (name of its value in the ONNX graph, that
    value): an initializer, or the output of an Identity of one (deduplicated equal values).
    Raises if a parameter is missing or its value differs from the module's. Running
    statistics may differ: the TorchScript exporter runs the module in train mode while
    tracing, which updates them before they are written."""
    inits = {t.name: numpy_helper.to_array(t) for t in onnx_model.graph.initializer}
    identity = {n.output[0]: n.input[0] for n in onnx_model.graph.node
                if n.op_type == "Identity" and n.input[0] in inits}
    out = {}
    state = dict(model.named_parameters())
    state.update((k, v) for k, v in model.named_buffers() if "running" in k)
    for name, t in state.items():
        src = name if name in inits else identity.get(name)
        if src is None:
            raise RuntimeError(f"{name} is not in the ONNX graph")
        if "running" not in name and not np.array_equal(inits[src], t.detach().numpy()):
            raise RuntimeError(f"{name}: ONNX initializer {src!r} differs from the module")
        out[name] = (name, inits[src])
    return out


def references(model: nn.Module, onnx_model: onnx.ModelProto) -> dict:
    """Eval outputs, loss, parameter gradients and new running statistics, computed by torch
    in float64 from the values the ONNX file holds."""
    x = torch.from_numpy(input_batch()).double()
    labels = torch.tensor(LABELS)
    values = onnx_values(model, onnx_model)
    final = _final_op(onnx_model)
    base = copy.deepcopy(model).double()
    with torch.no_grad():
        for name, t in list(base.named_parameters()) + list(base.named_buffers()):
            if name in values:
                t.copy_(torch.from_numpy(values[name][1].copy()).double())
    ref = copy.deepcopy(base).eval()
    with torch.no_grad():
        out = ref(x)
    m = copy.deepcopy(base).train()
    for mod in m.modules():
        if isinstance(mod, nn.Dropout):
            mod.p = 0.0  # dropout disabled for the gradients (BatchNorm stays in train mode)
        if isinstance(mod, nn.MultiheadAttention):
            mod.dropout = 0.0  # its attention dropout is a float, not an nn.Dropout
    y = m(x)
    kind = {"LogSoftmax": "nll", "Softmax": "nll_log"}.get(final, "cross_entropy")
    loss = F.nll_loss(y, labels) if kind == "nll" else F.nll_loss(torch.log(y), labels) \
        if kind == "nll_log" else F.cross_entropy(y, labels)
    loss.backward()
    res = {"x": input_batch(), "labels": np.array(LABELS, np.int64),
           "out": out.numpy().astype(np.float32), "loss": np.array(loss.item()),
           "loss_kind": np.array(kind)}
    for name, p in m.named_parameters():
        res[f"grad/{values[name][0]}"] = p.grad.numpy().astype(np.float32)
    for name, b in m.named_buffers():
        if "running" in name:
            res[f"buffer/{values[name][0]}"] = b.numpy().astype(np.float32)
    return res


def build(out_dir: pathlib.Path, only=()) -> list[pathlib.Path]:
    """Write every fixture (``<model>-<export>.onnx`` + ``.npz``) into ``out_dir`` (only the
    models named in ``only`` when given)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, cls in MODELS.items():
        if only and name not in only:
            continue
        torch.manual_seed(0)
        model = randomize_norms(cls())
        for suffix in getattr(cls, "EXPORTS", EXPORTS):
            path = out_dir / f"{name}-{suffix}.onnx"
            opts = export(model, suffix, path)
            refs = references(model, onnx.load(str(path)))
            meta = {**opts, "torch": torch.__version__, "onnx": onnx.__version__,
                    "grads": "train mode (BatchNorm batch statistics), Dropout p=0"}
            np.savez_compressed(path.with_suffix(".npz"), meta=np.array(json.dumps(meta)),
                                **refs)
            written += [path, path.with_suffix(".npz")]
            print(f"{path.name}: {path.stat().st_size:,} + "
                  f"{path.with_suffix('.npz').stat().st_size:,} bytes ({opts})")
    return written


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[1]) if len(argv) > 1 else ROOT / "tests" / "fixtures" / "models"
    files = build(out, argv[2:])
    total = sum(f.stat().st_size for f in files)
    print(f"{len(files)} files, {total:,} bytes in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

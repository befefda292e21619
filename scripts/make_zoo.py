"""Build the model zoo (issue 19): standard PyTorch architectures exported by both exporters.

Usage: ``.venv/bin/python scripts/make_zoo.py [OUT_DIR [MODEL ...]]`` (default
``tests/fixtures/zoo``, every model of ``ZOO``); ``MODEL`` may also be ``resnet18`` (not in the
default list: 11 M parameters, 45 MB, so it is built on demand and never committed). Needs torch
and onnxscript (the ``test`` or ``fixtures`` extra).

The models (seeded: ``torch.manual_seed(k)`` with ``k`` the model's index in ``MODELS``):

- ``resnet8``: CIFAR-style ResNet-8 (3x3 stem, three stages of one BasicBlock, 16/32/64 channels,
  a 1x1 Conv + BatchNorm shortcut where the shape changes), 3x32x32 -> 10;
- ``mobilenetv2``: MobileNetV2-style (inverted residual blocks: 1x1 expand, 3x3 depthwise, 1x1
  project; ReLU6; BatchNorm), 3x32x32 -> 10;
- ``vit``: a small ViT (4x4 patch-embedding Conv, a class token concatenated from a parameter,
  a positional-embedding parameter, 2 ``nn.TransformerEncoderLayer`` (batch_first, gelu,
  norm_first, dropout 0), a LayerNorm and a Linear head on the class token), 3x32x32 -> 10;
- ``lstm`` / ``gru``: ``nn.LSTM`` / ``nn.GRU`` (hidden 64, batch_first) over the 28 rows of an
  MNIST image ([N, 1, 28, 28], squeezed to [N, 28, 28]) -> Linear on the last step's output
  (``y[:, -1]``, LSTM) or on h_n (GRU), 1x28x28 -> 10;
- ``resnet18n``: ResNet-18 (four stages of two BasicBlocks) at an eighth of its width
  (8/16/32/64 channels: 176 k parameters, 0.7-0.9 MB a file), 3x32x32 -> 10; the full-width
  ``resnet18`` (64..512) is the same class;
- ``conv1d``: a 1-D conv net over MNIST's 784 pixels as one sequence (Conv1d, BatchNorm1d,
  MaxPool1d, AvgPool1d, a strided Conv1d, mean over the sequence), 1x784 -> 10;
- ``textbag``: an embedding bag on int64 token ids (Embedding(32, 16), mean over the 16
  tokens, Linear, ReLU, Linear), [16] -> 4: the ``markers`` tokens dataset's shape.

Each is written twice, ``<model>-ts.onnx`` (TorchScript exporter, ``dynamo=False``, opset 17,
``training=TRAINING``, no constant folding) and ``<model>-dynamo.onnx`` (``dynamo=True``, opset
18, ``model.train()``), both with the dynamic batch axis ``N``, like scripts/make_fixtures.py
(stack-trace metadata dropped; checked with ``onnx.checker`` full_check). The dynamo
exporter writes BatchNormalization in its inference form even in train mode and its optimizer
then folds it into the Conv before it: such a model is exported again with ``optimize=False``
(the engine trains every BatchNormalization with batch statistics). The TorchScript
exporter traces a train-mode model by running it, so its BatchNorm running statistics are one
forward further than the dynamo file's: tests load their torch references from the file.
"""
from __future__ import annotations

import copy
import pathlib
import sys
import warnings

import onnx
import torch
from torch import nn

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXPORTERS = {"ts": (False, 17), "dynamo": (True, 18)}  # file suffix -> (dynamo, opset)


def _bn_conv(cin, cout, k=3, stride=1, groups=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 Conv + BatchNorm, ReLU, identity or 1x1 shortcut."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a, self.b = _bn_conv(cin, cout, 3, stride), _bn_conv(cout, cout)
        self.short = _bn_conv(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        y = self.b(torch.relu(self.a(x)))
        return torch.relu(y + (x if self.short is None else self.short(x)))


class ResNet(nn.Module):
    """CIFAR-style ResNet: 3x3 stem, stages of BasicBlocks, global average pool, Linear."""

    def __init__(self, blocks=(1, 1, 1), widths=(16, 32, 64), classes=10):
        super().__init__()
        self.stem = _bn_conv(3, widths[0])
        layers, cin = [], widths[0]
        for i, (n, w) in enumerate(zip(blocks, widths)):
            for j in range(n):
                layers.append(BasicBlock(cin, w, 2 if i and not j else 1))
                cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(torch.relu(self.stem(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand (ReLU6), 3x3 depthwise (ReLU6), 1x1 project (linear);
    a residual Add when the shape is kept."""

    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        mid = cin * expand
        self.expand = _bn_conv(cin, mid, 1) if expand != 1 else None
        self.dw = _bn_conv(mid, mid, 3, stride, groups=mid)
        self.project = _bn_conv(mid, cout, 1)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = x if self.expand is None else nn.functional.relu6(self.expand(x))
        y = self.project(nn.functional.relu6(self.dw(y)))
        return x + y if self.residual else y


class MobileNetV2(nn.Module):
    """A small MobileNetV2 for 32x32 inputs: stem, inverted residuals, 1x1 head Conv, pool,
    Dropout, Linear."""

    SETTINGS = ((1, 16, 1, 1), (4, 24, 2, 2), (4, 32, 2, 2))  # (expand, channels, blocks, stride)

    def __init__(self, classes=10):
        super().__init__()
        self.stem = _bn_conv(3, 16)
        blocks, cin = [], 16
        for t, c, n, s in self.SETTINGS:
            for j in range(n):
                blocks.append(InvertedResidual(cin, c, s if j == 0 else 1, t))
                cin = c
        self.blocks = nn.Sequential(*blocks)
        self.head = _bn_conv(cin, 128, 1)
        self.dropout = nn.Dropout(0.2)
        self.fc = nn.Linear(128, classes)

    def forward(self, x):
        x = nn.functional.relu6(self.head(self.blocks(nn.functional.relu6(self.stem(x)))))
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(self.dropout(x))


class ViT(nn.Module):
    """A small vision transformer: patch embedding, class token, positional embedding,
    pre-norm encoder layers, head on the class token."""

    def __init__(self, patch=4, dim=64, heads=4, ff=128, depth=2, classes=10, size=32):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, (size // patch) ** 2 + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, ff, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.norm(self.encoder(x)[:, 0]))


class RowRNN(nn.Module):
    """An MNIST image's 28 rows as a sequence -> LSTM / GRU -> Linear: on the last step's
    output (``use_last``) or on the final hidden state."""

    def __init__(self, kind, hidden=64, use_last=True, classes=10):
        super().__init__()
        self.rnn = getattr(nn, kind)(28, hidden, batch_first=True)
        self.use_last = use_last
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x):
        y, state = self.rnn(x.squeeze(1))
        if self.use_last:
            return self.fc(y[:, -1])
        return self.fc((state[0] if isinstance(state, tuple) else state)[-1])


class PixelConv1d(nn.Module):
    """MNIST's 784 pixels as one sequence ([N, 1, 784]): Conv1d / BatchNorm1d / ReLU / pools,
    a strided Conv1d, the mean over the sequence, Linear(32, 10)."""

    def __init__(self, classes=10):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv1d(1, 8, 5, stride=2, padding=2), nn.BatchNorm1d(8), nn.ReLU(),
            nn.MaxPool1d(2),                                    # 392 -> 196
            nn.Conv1d(8, 16, 3, padding=1), nn.BatchNorm1d(16), nn.ReLU(),
            nn.AvgPool1d(2),                                    # 98
            nn.Conv1d(16, 32, 3, stride=2, padding=1), nn.ReLU())  # 49
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        return self.fc(self.body(x).mean(-1))


VOCAB, LENGTH = 32, 16  # the markers tokens dataset's (webgpu-trainer data --markers)


class TextBag(nn.Module):
    """An embedding bag, text-style: int64 token ids [N, 16] -> Embedding(32, 16) -> the mean
    over the tokens -> Linear(16, 32) -> ReLU -> Linear(32, 4)."""

    def __init__(self, dim=16, hidden=32, classes=4):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, dim)
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(self.emb(x).mean(1))))


MODELS = {  # name -> (constructor, sample shape)
    "resnet8": (ResNet, (3, 32, 32)),
    "mobilenetv2": (MobileNetV2, (3, 32, 32)),
    "vit": (ViT, (3, 32, 32)),
    "lstm": (lambda: RowRNN("LSTM", use_last=True), (1, 28, 28)),
    "gru": (lambda: RowRNN("GRU", use_last=False), (1, 28, 28)),
    "resnet18n": (lambda: ResNet((2, 2, 2, 2), (8, 16, 32, 64)), (3, 32, 32)),
    "conv1d": (PixelConv1d, (1, 784)),
    "textbag": (TextBag, (LENGTH,)),
    "resnet18": (lambda: ResNet((2, 2, 2, 2), (64, 128, 256, 512)), (3, 32, 32)),
}
ZOO = [m for m in MODELS if m != "resnet18"]
TOKENS = {"textbag"}  # models whose input is int64 token ids in [0, VOCAB)


def sample(name: str, n: int, seed: int) -> torch.Tensor:
    """A seeded input batch of ``n`` samples for zoo model ``name`` (float32 normal, or int64
    token ids for the models of ``TOKENS``)."""
    shape, g = MODELS[name][1], torch.Generator().manual_seed(seed)
    if name in TOKENS:
        return torch.randint(0, VOCAB, (n, *shape), generator=g)
    return torch.randn(n, *shape, generator=g)


def _randomize_norms(model: nn.Module) -> None:
    """Random BatchNorm affine parameters and statistics, and every other parameter whose
    values are all equal (LayerNorm's, attention's biases) perturbed: the dynamo exporter
    merges equal initializers into one (the model would train them as one), and the defaults
    ones / zeros hide mistakes in their gradients."""
    g = torch.Generator().manual_seed(1234)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            with torch.no_grad():
                m.weight.copy_(0.75 + 0.5 * torch.rand(m.weight.shape, generator=g))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(0.8 + 0.4 * torch.rand(m.running_var.shape, generator=g))
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and bool(p.min() == p.max()):
                p.add_(0.1 * torch.randn(p.shape, generator=g))


def build(name: str) -> tuple[nn.Module, tuple]:
    """The seeded torch module of zoo model ``name`` and its sample shape (C, H, W), (C, L)
    or (T,) token ids."""
    make, shape = MODELS[name]
    torch.manual_seed(list(MODELS).index(name))
    model = make()
    _randomize_norms(model)
    return model, shape


def export(model: nn.Module, name: str, path: pathlib.Path, suffix: str) -> None:
    """Export a train-mode copy of zoo model ``name`` (``model``) with exporter ``suffix``
    (``EXPORTERS``) to ``path``: dynamic batch ``N``, input ``input``, output ``output``."""
    dynamo, opset = EXPORTERS[suffix]
    m = copy.deepcopy(model).train()
    x = sample(name, 2, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            for optimize in (True, False):
                prog = torch.onnx.export(m, (x,), dynamo=True, opset_version=opset,
                                         optimize=optimize, input_names=["input"],
                                         output_names=["output"],
                                         dynamic_shapes={"x": {0: torch.export.Dim("N")}})
                prog.save(str(path))
                names = {t.name for t in onnx.load(str(path)).graph.initializer}
                if all(n in names for n, _ in model.named_parameters()):
                    break  # its optimizer kept every parameter (it folds BatchNorm into Conv)
        else:
            torch.onnx.export(m, (x,), str(path), dynamo=False, opset_version=opset,
                              training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False, input_names=["input"],
                              output_names=["output"],
                              dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})
    onnx_model = onnx.load(str(path))
    for node in onnx_model.graph.node:  # source paths and line numbers of this script: drop
        keep = [p for p in node.metadata_props if "stack_trace" not in p.key]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    onnx_model.doc_string = f"webgpu-trainer model zoo {path.stem} (scripts/make_zoo.py)"
    onnx.checker.check_model(onnx_model, full_check=True)
    onnx.save(onnx_model, str(path))


def main(argv: list[str]) -> int:
    """Write ``<model>-<exporter>.onnx`` for the named models (default ``ZOO``)."""
    out = pathlib.Path(argv[1]) if len(argv) > 1 else ROOT / "tests" / "fixtures" / "zoo"
    out.mkdir(parents=True, exist_ok=True)
    for name in argv[2:] or ZOO:
        model, _ = build(name)
        params = sum(p.numel() for p in model.parameters())
        for suffix in EXPORTERS:
            path = out / f"{name}-{suffix}.onnx"
            export(model, name, path, suffix)
            print(f"wrote {path} ({params:,} parameters, {path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

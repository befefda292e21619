"""1-D conv nets over MNIST's 784 pixels as one sequence (input [N, 1, 784]), exported by
torch.onnx.export with both exporters (dynamic batch):

- ``seq``: Conv1d -> BatchNorm1d -> ReLU -> MaxPool1d -> Conv1d -> BatchNorm1d -> ReLU ->
  AvgPool1d -> Conv1d (depthwise, dilated) -> ReLU -> AdaptiveAvgPool1d(1) -> Linear;
- ``ln``: Conv1d -> LayerNorm over the last two axes ([C, L]) -> ReLU -> MaxPool1d ->
  Flatten -> Linear -> BatchNorm1d on [N, C] -> ReLU -> Linear.

Both are exported in training mode (trainable BatchNorm). A layer's bias whose gradient
flows into a BatchNorm through a ReLU and a global pool is a small difference of large sums
(BatchNorm's input gradient sums to zero over the batch): float32 sums on the GPU lose ~1e-4
of it, so the [N, C] BatchNorm sits in ``ln``, whose earlier bias feeds a LayerNorm.

Each imports; the device's forward matches onnxruntime; its first-step loss and the gradients
of every parameter match torch autograd in float64; a few Adam steps natively on MNIST-shaped
data (the [1, 28, 28] samples feed the [N, 1, 784] input) match the numpy engine step by step
and lower the loss. The dynamo exporter runs where onnxscript is installed."""

import numpy as np
import pytest

from conftest import FWD_RTOL, GRAD_RTOL, assert_close, rng_for, run
from harness import one_step
from torch_models import check_engines_agree

torch = pytest.importorskip("torch")
nn = torch.nn

EXPORTERS = {"torchscript": (False, 17), "dynamo": (True, 18)}


class SeqNet(nn.Module):
    """Conv1d / BatchNorm1d / pools over the 784-pixel sequence, then Linear(16, 10)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv1d(1, 8, 5, stride=2, padding=2), nn.BatchNorm1d(8), nn.ReLU(),
            nn.MaxPool1d(2),                                    # 392 -> 196
            nn.Conv1d(8, 16, 3, padding=1), nn.BatchNorm1d(16), nn.ReLU(),
            nn.AvgPool1d(2),                                    # 98
            nn.Conv1d(16, 16, 3, padding=2, dilation=2, groups=16), nn.ReLU(),
            nn.AdaptiveAvgPool1d(1), nn.Flatten())
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(self.body(x))


class LnNet(nn.Module):
    """Conv1d -> LayerNorm([8, 196]) -> ReLU -> MaxPool1d(4) -> Linear(8 * 49, 32) ->
    BatchNorm1d(32) -> ReLU -> Linear(32, 10)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(1, 8, 7, stride=4, padding=3)
        self.norm = nn.LayerNorm([8, 196])
        self.head = nn.Sequential(nn.Linear(8 * 49, 32), nn.BatchNorm1d(32), nn.ReLU(),
                                  nn.Linear(32, 10))

    def forward(self, x):
        h = torch.max_pool1d(torch.relu(self.norm(self.conv(x))), 4)
        return self.head(h.flatten(1))


MODELS = {"seq": SeqNet, "ln": LnNet}


def _export(net, path, dynamo, opset):
    x = torch.zeros(4, 1, 784)
    if dynamo:
        # optimize=False: the exporter's optimizer folds a BatchNorm1d after a Conv1d into
        # the Conv (its eval form), dropping the BatchNorm's parameters
        torch.onnx.export(net, (x,), str(path), dynamo=True, opset_version=opset,
                          optimize=False, input_names=["input"], output_names=["output"],
                          dynamic_shapes=({0: torch.export.Dim("N")},), verbose=False)
    else:
        torch.onnx.export(net, x, str(path), dynamo=False, opset_version=opset,
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["input"],
                          output_names=["output"],
                          dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{(model, exporter): (torch module, path of its .onnx)}, made once (read only
    afterwards); the dynamo exporter's only where onnxscript is installed."""
    out = {}
    try:
        import onnxscript  # noqa: F401
        exporters = list(EXPORTERS)
    except ImportError:
        exporters = ["torchscript"]
    for k, (name, cls) in enumerate(MODELS.items()):
        torch.manual_seed(k)
        net = cls().train()
        for exporter in exporters:
            path = tmp_path_factory.mktemp("conv1d") / f"{name}_{exporter}.onnx"
            _export(net, path, *EXPORTERS[exporter])
            out[name, exporter] = net, path
    return out


def _get(exported, name, exporter):
    if (name, exporter) not in exported:
        pytest.skip("the dynamo exporter needs onnxscript (pip install -e '.[fixtures]')")
    return exported[name, exporter]


def _bn_training(path) -> bool:
    """True when the file's BatchNormalization nodes compute batch statistics (the
    TorchScript exporter in training mode; the dynamo exporter writes the inference form)."""
    import onnx
    model = onnx.load(str(path))
    return any(a.name == "training_mode" and a.i == 1 for n in model.graph.node
               if n.op_type == "BatchNormalization" for a in n.attribute)


@pytest.mark.parametrize("exporter", list(EXPORTERS))
@pytest.mark.parametrize("name", list(MODELS))
def test_exported_forward_and_gradients(device, exported, name, exporter):
    """Import (1-D Conv / pools / BatchNorm on [N, C, L] and [N, C], LayerNorm over two axes);
    the device's forward vs onnxruntime (training forward where the file's BatchNorm trains,
    else the eval forward); its loss and the first-step gradient of every parameter vs torch
    autograd in float64 (1e-4 relative to the largest)."""
    ort = pytest.importorskip("onnxruntime")
    from webgpu_trainer.engine.graph import Graph
    from webgpu_trainer.engine.train.probe import biases_before_norm
    from webgpu_trainer.onnx_io import load_bundle
    net, path = _get(exported, name, exporter)
    graph, blob = load_bundle(path)
    ops = {n["op_type"] for n in graph["nodes"]}
    assert {"Conv", "MaxPool"} <= ops
    assert "BatchNormalization" in ops and ("LayerNormalization" in ops) == (name == "ln")
    rng = rng_for("conv1d_models", name, exporter)
    x = rng.standard_normal((16, 1, 784)).astype(np.float32)
    labels = rng.integers(0, 10, 16)
    train_bn = _bn_training(path)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"input": x})[:1]
    out_name = graph["outputs"][0]["name"]
    if not train_bn:
        ev = run(one_step(device, graph, blob, x, labels, train=False))
        assert_close(ev["acts"][out_name], want, FWD_RTOL * 10, "eval forward vs onnxruntime")
    res = run(one_step(device, graph, blob, x, labels))
    if train_bn:
        assert_close(res["acts"][out_name], want, FWD_RTOL * 10, "forward vs onnxruntime")
    net64 = _double(net)
    loss = nn.functional.cross_entropy(net64(torch.tensor(x, dtype=torch.float64)),
                                       torch.tensor(labels))
    loss.backward()
    assert_close(res["loss"], loss.item(), FWD_RTOL, "loss")
    grads = {k: p.grad.numpy() for k, p in net64.named_parameters()}
    assert set(res["grads"]) == set(grads)
    # a Conv bias before a training BatchNorm: zero in exact arithmetic, rounding noise here
    zero = biases_before_norm(Graph(graph))
    assert zero == ({"body.0.bias", "body.4.bias"} if name == "seq" else {"head.0.bias"})
    largest = max(np.abs(g).max() for g in grads.values())
    for pname, g in grads.items():
        if pname in zero:
            assert np.abs(res["grads"][pname]).max() <= 1e-5 * largest, pname
        else:
            assert_close(res["grads"][pname], g, GRAD_RTOL, f"{name}: gradient of {pname}")


def _double(net):
    """A float64 copy of ``net`` in training mode with zero gradients."""
    import copy
    net64 = copy.deepcopy(net).double().train()
    net64.zero_grad()
    return net64


def _stripes(count, seed):
    """A Split of ``count`` MNIST-shaped 28x28 images of two classes: 0 has 2 bright rows, 1
    has 14, at random places (a global pool still tells them apart)."""
    from webgpu_trainer.engine.train.data import Split
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, count).astype(np.uint8)
    images = rng.integers(0, 60, (count, 28, 28)).astype(np.uint8)
    for i, k in enumerate(labels):
        images[i, rng.choice(28, 2 + 12 * k, replace=False), :] = 255
    return Split(images.tobytes(), labels.tobytes(), count, labels.tobytes())


@pytest.mark.parametrize("name", list(MODELS))
def test_exported_trains_natively_like_numpy(device, exported, name):
    """10 SGD steps (batch 16, lr 0.05, momentum 0.9; Adam would turn the rounding noise of
    the biases before a BatchNorm, zero in exact arithmetic, into full steps) of the imported
    model (TorchScript export) on MNIST's [1, 28, 28] samples of two classes (``_stripes``),
    on the device and on the numpy engine: the same loss at every step (1e-4 relative) and the
    loss falls (the last 3 steps' mean below 0.7 of the first 3's)."""
    from webgpu_trainer.onnx_io import load_bundle
    graph, blob = load_bundle(exported[name, "torchscript"][1])
    cfg = {"batch_size": 16, "epochs": 1, "seed": 3, "init": "finetune", "eval_images": 16,
           "val_images": 16, "report_every": 1, "optimizer": "sgd", "lr": 0.05,
           "momentum": 0.9}
    check_engines_agree(device, graph, blob, cfg,
                        lambda: (_stripes(10 * 16 + 16, 1), _stripes(16, 2)), 10, 0.7)


def test_mnist_input_shapes(exported):
    """The MNIST dataset ([1, 28, 28] samples) fits an [N, 1, 784] input (each channel's
    pixels as one sequence); an [N, 2, 392] input (the same 784 values in other channels) is
    refused naming both shapes."""
    from webgpu_trainer.engine.graph import Graph
    from webgpu_trainer.engine.train.data import MNIST, check_fits
    from webgpu_trainer.onnx_io import load_bundle
    graph, _ = load_bundle(exported["ln", "torchscript"][1])
    split = _stripes(4, 0)
    check_fits(Graph(graph), MNIST, split, split)
    graph["inputs"][0]["shape"] = [graph["inputs"][0]["shape"][0], 2, 392]
    with pytest.raises(ValueError) as err:
        check_fits(Graph(graph), MNIST, split, split)
    assert "takes [2, 392] per sample (784 values), the dataset gives [1, 28, 28] (784 " \
        "values); use a model with input [N, 1, 28, 28] or [N, 784]" in str(err.value)

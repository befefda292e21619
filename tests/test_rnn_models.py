"""LSTM and GRU classifiers over the 28 rows of an MNIST-shaped image, as torch.onnx.export
(dynamo=False) writes them: nn.LSTM / nn.GRU (hidden 32, one layer, unidirectional and
bidirectional, ``batch_first`` both ways: the exporter's Transpose around the node, its zero
initial states of the batch's size) -> the last step of Y (Slice) or h_n (Y_h) -> Linear.
Each imports; the device's forward matches onnxruntime, its first-step gradients of every
parameter match torch autograd in float64; a few Adam steps natively reduce the loss and match
the numpy engine step by step. The dynamo exporter (opset 18 and up: it writes the same ONNX
LSTM / GRU node, its zero states through Expand) runs where onnxscript is installed (the
``fixtures`` extra). ``y[:, -1]`` exports a Gather on activations (not covered here)."""

import numpy as np
import pytest

from conftest import FWD_RTOL, GRAD_RTOL, assert_close, rng_for, run
from harness import one_step
from torch_models import check_engines_agree

torch = pytest.importorskip("torch")

# name: (nn module, bidirectional, batch_first, what feeds the Linear, opset)
MODELS = {"lstm": ("LSTM", False, True, "Y", 13), "lstm_bi": ("LSTM", True, False, "Y_h", 17),
          "gru": ("GRU", False, False, "Y_h", 14), "gru_bi": ("GRU", True, True, "Y", 20)}
HIDDEN = 32


class RowNet(torch.nn.Module):
    """The image's 28 rows as a sequence of 28 features -> RNN -> Linear(., 10)."""

    def __init__(self, kind, bidirectional, batch_first, use):
        super().__init__()
        self.batch_first, self.use = batch_first, use
        self.rnn = getattr(torch.nn, kind)(28, HIDDEN, batch_first=batch_first,
                                           bidirectional=bidirectional)
        self.fc = torch.nn.Linear(HIDDEN * (2 if bidirectional else 1), 10)

    def forward(self, x):
        x = x.squeeze(1)
        if not self.batch_first:
            x = x.transpose(0, 1)
        y, state = self.rnn(x)
        if self.use == "Y_h":
            h = state[0] if isinstance(state, tuple) else state
            return self.fc(h.transpose(0, 1).flatten(1))
        last = y[:, -1:] if self.batch_first else y[-1:].transpose(0, 1)
        return self.fc(last.flatten(1))


def _export(net, path, opset, dynamo):
    if dynamo:
        torch.onnx.export(net, (torch.zeros(2, 1, 28, 28),), str(path), dynamo=True,
                          opset_version=max(opset, 18), input_names=["input"],
                          output_names=["output"],
                          dynamic_shapes=({0: torch.export.Dim("N")},), verbose=False)
    else:
        torch.onnx.export(net, torch.zeros(2, 1, 28, 28), str(path), dynamo=False,
                          opset_version=opset, input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{(name, dynamo): (torch module, path of its .onnx)}, made once (read only afterwards);
    the dynamo exporter's only where onnxscript is installed (the ``fixtures`` extra)."""
    out = {}
    try:
        import onnxscript  # noqa: F401
        exporters = (False, True)
    except ImportError:
        exporters = (False,)
    for k, (name, (kind, bi, bf, use, opset)) in enumerate(MODELS.items()):
        torch.manual_seed(k)
        net = RowNet(kind, bi, bf, use)
        for dynamo in exporters:
            path = tmp_path_factory.mktemp("rnn") / f"{name}_{int(dynamo)}.onnx"
            _export(net, path, opset, dynamo)
            out[name, dynamo] = net, path
    return out


def _reorder(t, kind):
    """torch's gate blocks (LSTM i, f, g, o; GRU r, z, n) in ONNX's order (i, o, f, c; z, r, h)."""
    c = t.chunk(4 if kind == "LSTM" else 3, 0)
    return torch.cat([c[0], c[3], c[1], c[2]] if kind == "LSTM" else [c[1], c[0], c[2]], 0)


def _onnx_grads(net, graph, kind):
    """torch's parameter gradients under the bundle's tensor names (the RNN node's W, R, B)."""
    rnn = next(n for n in graph["nodes"] if n["op_type"] == kind)
    sfx = ["", "_reverse"][:2 if net.rnn.bidirectional else 1]

    def stack(key):
        return np.stack([_reorder(getattr(net.rnn, key + s).grad, kind).numpy() for s in sfx])
    out = dict(zip(rnn["inputs"][1:4], (
        stack("weight_ih_l0"), stack("weight_hh_l0"),
        np.concatenate([stack("bias_ih_l0"), stack("bias_hh_l0")], 1))))
    out["fc.weight"], out["fc.bias"] = net.fc.weight.grad.numpy(), net.fc.bias.grad.numpy()
    return out


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("name", list(MODELS))
def test_exported_forward_and_gradients(device, exported, name, dynamo):
    """Import (no refusal); the device's training forward vs onnxruntime (1e-4), its loss and
    the first-step gradients of every parameter vs torch autograd in float64 (1e-4 relative to
    the largest)."""
    ort = pytest.importorskip("onnxruntime")
    from webgpu_trainer.onnx_io import load_bundle
    kind = MODELS[name][0]
    if (name, dynamo) not in exported:
        pytest.skip("the dynamo exporter needs onnxscript (pip install -e '.[fixtures]')")
    net, path = exported[name, dynamo]
    graph, blob = load_bundle(path)
    ops = [n["op_type"] for n in graph["nodes"]]
    assert ops.count(kind) == 1 and not {"ConstantOfShape", "Expand"} & set(ops)
    rnn = graph["nodes"][ops.index(kind)]
    assert rnn["inputs"][4:] == [""] * (len(rnn["inputs"]) - 4)  # zero states dropped
    rng = rng_for("rnn_models", name)
    x = rng.standard_normal((6, 1, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 10, 6)
    res = run(one_step(device, graph, blob, x, labels))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"input": x})
    assert_close(res["acts"][graph["outputs"][0]["name"]], want, FWD_RTOL * 10, "vs onnxruntime")
    net64 = net.double()
    net64.zero_grad()
    loss = torch.nn.functional.cross_entropy(net64(torch.tensor(x, dtype=torch.float64)),
                                             torch.tensor(labels))
    loss.backward()
    assert_close(res["loss"], loss.item(), FWD_RTOL, "loss")
    grads = _onnx_grads(net64, graph, kind)
    assert set(grads) == set(res["grads"])
    for pname, g in grads.items():
        assert_close(res["grads"][pname], g, GRAD_RTOL, f"{name}: gradient of {pname}")


def _stripes(count, seed):
    """A Split of ``count`` 28x28 images whose class k is a bright row 2k + 3 over noise."""
    from webgpu_trainer.engine.train.data import Split
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, count).astype(np.uint8)
    images = rng.integers(0, 60, (count, 28, 28)).astype(np.uint8)
    images[np.arange(count), 2 * labels + 3, :] = 255
    return Split(images.tobytes(), labels.tobytes(), count, labels.tobytes())  # MNIST-shaped


@pytest.mark.parametrize("name", ["lstm_bi", "gru"])
def test_exported_trains_natively_like_numpy(device, exported, name):
    """12 Adam steps (batch 16, lr 0.05) of the imported model on the device and on the numpy
    engine: the same loss at every step (1e-4 relative) and the loss falls (the last 3 steps'
    mean below 0.85 of the first 3's)."""
    from webgpu_trainer.onnx_io import load_bundle
    graph, blob = load_bundle(exported[name, False][1])
    cfg = {"batch_size": 16, "epochs": 1, "seed": 3, "init": "finetune", "eval_images": 16,
           "val_images": 16, "report_every": 1, "optimizer": "adam", "lr": 0.05}
    check_engines_agree(device, graph, blob, cfg,
                        lambda: (_stripes(12 * 16 + 16, 1), _stripes(16, 2)), 12, 0.85)


def test_import_refuses_other_activations(exported, tmp_path):
    """An exported LSTM given ``activations`` Relu and a ``clip``: the import names the node and
    both attributes, and the file is left as it was."""
    import onnx
    from webgpu_trainer.onnx_io import load_bundle
    from webgpu_trainer.onnx_io.errors import OnnxImportError
    model = onnx.load(str(exported["lstm", False][1]))
    lstm = next(n for n in model.graph.node if n.op_type == "LSTM")
    lstm.attribute.extend([onnx.helper.make_attribute("activations", ["Sigmoid", "Relu", "Tanh"]),
                           onnx.helper.make_attribute("clip", 5.0)])
    path = tmp_path / "relu_lstm.onnx"
    onnx.save(model, str(path))
    before = path.read_bytes()
    with pytest.raises(OnnxImportError) as err:
        load_bundle(path)
    assert f"node {lstm.name} (LSTM): activations ['Sigmoid', 'Relu', 'Tanh'] are not " \
        "supported (only the default ['Sigmoid', 'Tanh', 'Tanh'])" in err.value.problems
    assert f"node {lstm.name} (LSTM): attribute clip is not supported" in err.value.problems
    assert path.read_bytes() == before

"""onnx_io.make_default_model: a checked ONNX model for any dataset shape, that runs in
onnxruntime, imports, starts as torch's defaults and computes what the same torch module
(scripts/make_default_models.py's DefaultNet) computes with the same weights."""

import io
import math
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from webgpu_trainer import onnx_io
from webgpu_trainer.onnx_io.default_model import architecture, make_default_model, multiply_adds
from webgpu_trainer.onnx_io.export import _to_inference

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from make_default_models import DefaultNet  # noqa: E402

SHAPES = [((1, 28, 28), 10), ((3, 32, 32), 10), ((3, 32, 32), 100), ((3, 64, 64), 7),
          ((1, 5, 7), 2), ((2, 3, 3), 3), ((20,), 3), ((1,), 256)]


def weights(model: onnx.ModelProto) -> dict:
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


def torch_twin(shape, classes, model):
    """DefaultNet with the ONNX model's weights, in eval mode."""
    net = DefaultNet(shape, classes)
    state = {k: torch.from_numpy(v.copy()) for k, v in weights(model).items()}
    missing = net.load_state_dict(state, strict=False)
    assert not missing.unexpected_keys
    assert [k for k in missing.missing_keys if not k.endswith("num_batches_tracked")] == []
    return net.eval()


@pytest.mark.parametrize("shape,classes", SHAPES, ids=lambda v: str(v))
def test_default_model_runs_as_its_torch_twin(shape, classes):
    model = onnx.load_from_string(make_default_model(shape, classes, seed=3))
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 18
    assert [d.dim_param or d.dim_value for d in
            model.graph.input[0].type.tensor_type.shape.dim] == ["N", *shape]
    inference = onnx.ModelProto()
    inference.CopyFrom(model)
    _to_inference(inference.graph, 18)
    sess = ort.InferenceSession(inference.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((5, *shape)).astype(np.float32)
    got = sess.run(None, {"input": x})[0]
    with torch.no_grad():
        want = torch_twin(shape, classes, model)(torch.from_numpy(x)).numpy()
    assert got.shape == (5, classes)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.exp(got).sum(1), 1, rtol=1e-5)  # log-probabilities


def test_training_mode_graph_matches_torch_train_forward():
    """The training graph (BatchNormalization training_mode=1 with batch statistics) in
    onnxruntime with Dropout's ratio set to 0 equals torch's train-mode forward without dropout,
    and its running statistics follow torch's momentum."""
    shape, classes = (3, 32, 32), 10
    model = onnx.load_from_string(make_default_model(shape, classes, seed=5))
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output[0].endswith("/ratio"):
            node.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array(0.0, np.float32)))
    names = [o for n in model.graph.node if n.op_type == "BatchNormalization"
             for o in n.output[1:]]
    model.graph.output.extend([onnx.helper.make_empty_tensor_value_info(n) for n in names])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(2).standard_normal((8, *shape)).astype(np.float32)
    out = sess.run(None, {"input": x})
    net = torch_twin(shape, classes, model).train()
    net.dropout.p = 0.0
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out[0], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out[1], net.norm1.running_mean.numpy(), rtol=1e-4, atol=1e-6)


def test_init_is_torchs_default_and_seeded():
    """Weights and biases ~ U(+-1/sqrt(fan_in)) (kaiming_uniform_(a=sqrt(5))), BatchNorm 1 / 0 /
    0 / 1; the same seed gives the same bytes, another seed other weights."""
    shape, classes = (3, 32, 32), 10
    w = weights(onnx.load_from_string(make_default_model(shape, classes, seed=0)))
    fan_in = {"conv1": 27, "conv2": 16 * 9, "fc1": 32 * 8 * 8, "fc2": 64}
    for layer, fan in fan_in.items():
        bound = 1 / math.sqrt(fan)
        for part in ("weight", "bias"):
            a = w[f"{layer}.{part}"]
            assert a.dtype == np.float32
            assert np.abs(a).max() <= bound
            if a.size >= 100:  # uniform: the extremes come close to the bound
                assert np.abs(a).max() > 0.95 * bound
                assert abs(a.mean()) < 0.1 * bound
    assert (w["norm1.weight"] == 1).all() and (w["norm1.bias"] == 0).all()
    assert (w["norm2.running_mean"] == 0).all() and (w["norm2.running_var"] == 1).all()
    assert make_default_model(shape, classes, 0) == make_default_model(shape, classes, 0)
    other = weights(onnx.load_from_string(make_default_model(shape, classes, seed=1)))
    assert not np.array_equal(other["conv1.weight"], w["conv1.weight"])


def test_architecture_and_cost():
    """CIFAR's shape: two conv blocks with MaxPool, 32x8x8 features; the cost stated in the
    README; big images get more pooling, tiny ones none."""
    layers = architecture((3, 32, 32), 10)
    assert [x[0] for x in layers].count("maxpool") == 2
    assert ("linear", "fc1", 2048, 64) in layers
    assert multiply_adds((3, 32, 32), 10) == 32 * 32 * 16 * 27 + 16 * 16 * 32 * 144 \
        + 2048 * 64 + 64 * 10 == 1_753_728
    assert ("linear", "fc1", 32 * 8 * 8, 64) in architecture((3, 64, 64), 10)
    assert ("linear", "fc1", 32 * 3 * 3, 64) in architecture((2, 3, 3), 3)
    assert architecture((20,), 3)[0] == ("linear", "fc1", 20, 64)


@pytest.mark.parametrize("shape,classes,message", [
    ((28, 28), 10, "sample shape [28, 28]: a default model needs images [C, H, W] or table rows"),
    ((1, 0, 28), 10, "sample shape [1, 0, 28]: a default model needs images"),
    ((1, 28, 28), 1, "classes 1: a default model needs 2..256 classes"),
    ((784,), 257, "classes 257: a default model needs 2..256 classes"),
])
def test_refuses_what_it_cannot_serve(shape, classes, message):
    with pytest.raises(ValueError) as e:
        make_default_model(shape, classes)
    assert str(e.value).startswith(message)


@pytest.mark.parametrize("shape,classes", SHAPES, ids=lambda v: str(v))
def test_imports_as_a_bundle(tmp_path, shape, classes):
    """The engine's importer takes it: every Conv / Gemm weight a trainable parameter, the
    running statistics buffers, the weights byte for byte."""
    path = tmp_path / "m.onnx"
    path.write_bytes(make_default_model(shape, classes, seed=0))
    graph, blob = onnx_io.load_bundle(path)
    assert graph["inputs"][0]["shape"] == ["N", *shape]
    assert graph["outputs"][0]["shape"] == ["N", classes]
    roles = {t["name"]: t["role"] for t in graph["tensors"]}
    assert roles["fc1.weight"] == "param"
    if len(shape) == 3:
        assert roles["norm1.running_var"] == "buffer"
    bias = next(t for t in graph["tensors"] if t["name"] == "fc1.bias")
    got = np.frombuffer(blob, np.float32, offset=bias["offset"], count=64)
    want = weights(onnx.load(io.BytesIO(path.read_bytes())))["fc1.bias"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name,shape,classes", [("seednet-rgb32", (3, 32, 32), 10),
                                                ("seednet-rgb32-c100", (3, 32, 32), 100)])
def test_shipped_models_are_the_default_architecture(name, shape, classes):
    """models/<name>.onnx (scripts/make_default_models.py, torch's export) has the nodes,
    attributes and initializers (names, shapes) of make_default_model's graph."""
    shipped = onnx.load(ROOT / "models" / f"{name}.onnx")
    built = onnx.load_from_string(make_default_model(shape, classes))

    def nodes(m):
        return [(n.op_type, sorted((a.name, str(onnx.helper.get_attribute_value(a)))
                                   for a in n.attribute if a.name != "value"))
                for n in m.graph.node]

    def inits(m):
        return [(i.name, list(i.dims)) for i in m.graph.initializer]
    assert nodes(shipped) == nodes(built)
    assert inits(shipped) == inits(built)
    assert shipped.opset_import[0].version == 18
    graph, _ = onnx_io.load_bundle(ROOT / "models" / f"{name}.onnx")  # the engine takes it
    assert graph["inputs"][0]["shape"] == ["N", *shape]

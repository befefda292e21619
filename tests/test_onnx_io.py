"""Tests for webgpu_trainer.onnx_io: bundle import of SeedNet, export round trip, errors.

numpy / onnx / onnxruntime only (no torch at run time). The oracle is a float64 numpy forward
of SeedNet in eval mode (BN with running stats, no dropout).
"""
from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "py"))

from webgpu_trainer import onnx_io  # noqa: E402
from webgpu_trainer.onnx_io import OnnxImportError  # noqa: E402

SEEDNET = ROOT / "models" / "seednet.onnx"
EXPECTED = [  # (name, shape, role) in initializer order
    ("conv1.weight", [8, 1, 3, 3], "param"), ("conv1.bias", [8], "param"),
    ("conv2.weight", [16, 8, 3, 3], "param"), ("conv2.bias", [16], "param"),
    ("conv3.weight", [24, 16, 3, 3], "param"), ("conv3.bias", [24], "param"),
    ("norm1.weight", [24], "param"), ("norm1.bias", [24], "param"),
    ("norm1.running_mean", [24], "buffer"), ("norm1.running_var", [24], "buffer"),
    ("fc1.weight", [32, 11616], "param"), ("fc1.bias", [32], "param"),
    ("fc2.weight", [10, 32], "param"), ("fc2.bias", [10], "param"),
    ("norm2.weight", [10], "param"), ("norm2.bias", [10], "param"),
    ("norm2.running_mean", [10], "buffer"), ("norm2.running_var", [10], "buffer"),
]


@pytest.fixture(scope="module")
def bundle():
    return onnx_io.load_bundle(SEEDNET)


def _unpack(graph: dict, blob: bytes) -> dict[str, np.ndarray]:
    """Blob -> {name: float32 array} using the graph's offsets."""
    return {t["name"]: np.frombuffer(blob, "<f4", t["nbytes"] // 4, t["offset"])
            .reshape(t["shape"]) for t in graph["tensors"]}


def _pack(graph: dict, arrays: dict[str, np.ndarray], size: int) -> bytes:
    buf = bytearray(size)
    for t in graph["tensors"]:
        data = np.ascontiguousarray(arrays[t["name"]], "<f4").tobytes()
        buf[t["offset"]:t["offset"] + len(data)] = data
    return bytes(buf)


# ----------------------------------------------------------------------------- numpy oracle


def _conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Valid 3x3-style conv, stride 1: x [N,C,H,W], w [O,C,kh,kw] -> [N,O,H-kh+1,W-kw+1]."""
    _, _, h, wd = x.shape
    _, _, kh, kw = w.shape
    ho, wo = h - kh + 1, wd - kw + 1
    out = np.zeros((x.shape[0], w.shape[0], ho, wo))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", x[:, :, i:i + ho, j:j + wo], w[:, :, i, j])
    return out + b[None, :, None, None]


def _bn(x: np.ndarray, p: dict, name: str, eps: float) -> np.ndarray:
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean, var = p[f"{name}.running_mean"].reshape(shape), p[f"{name}.running_var"].reshape(shape)
    w, b = p[f"{name}.weight"].reshape(shape), p[f"{name}.bias"].reshape(shape)
    return (x - mean) / np.sqrt(var + eps) * w + b


def _seednet_eval(x: np.ndarray, params: dict[str, np.ndarray], eps: float) -> np.ndarray:
    """float64 SeedNet forward in eval mode: x [N,1,28,28] -> log-probs [N,10]."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    h = np.maximum(_conv2d(x.astype(np.float64), p["conv1.weight"], p["conv1.bias"]), 0)
    h = np.maximum(_conv2d(h, p["conv2.weight"], p["conv2.bias"]), 0)
    h = np.maximum(_conv2d(h, p["conv3.weight"], p["conv3.bias"]), 0)
    h = _bn(h, p, "norm1", eps).reshape(h.shape[0], -1)
    h = np.maximum(h @ p["fc1.weight"].T + p["fc1.bias"], 0)
    h = _bn(h @ p["fc2.weight"].T + p["fc2.bias"], p, "norm2", eps)
    m = h.max(axis=1, keepdims=True)
    return h - m - np.log(np.exp(h - m).sum(axis=1, keepdims=True))


# ----------------------------------------------------------------------------- load_bundle


def test_load_bundle_seednet(bundle):
    graph, blob = bundle
    json.dumps(graph)  # JSON-serialisable
    assert graph["format"] == "webgpu-trainer/graph@1"
    assert graph["name"] == "seednet" and graph["opset"] == 16
    assert graph["inputs"] == [{"name": "input", "shape": ["N", 1, 28, 28], "dtype": "float32"}]
    assert graph["outputs"] == [{"name": "output", "shape": ["N", 10], "dtype": "float32"}]
    got = [(t["name"], t["shape"], t["role"]) for t in graph["tensors"]]
    assert got == EXPECTED
    ends = 0
    for t in graph["tensors"]:
        assert t["dtype"] == "float32"
        assert t["offset"] % 256 == 0 and t["offset"] >= ends
        assert t["nbytes"] == 4 * int(np.prod(t["shape"]))
        ends = t["offset"] + t["nbytes"]
    assert len(blob) == ends == graph["weights_nbytes"]
    model = onnx.load(str(SEEDNET))
    arrays = _unpack(graph, blob)
    for init in model.graph.initializer:
        np.testing.assert_array_equal(arrays[init.name], numpy_helper.to_array(init))


def test_seednet_graph_nodes(bundle):
    graph, _ = bundle
    ops = [n["op_type"] for n in graph["nodes"]]
    assert ops == ["Conv", "Relu", "Conv", "Relu", "Conv", "Relu", "BatchNormalization",
                   "Flatten", "Gemm", "Relu", "Dropout", "Gemm", "BatchNormalization",
                   "LogSoftmax"]
    conv = graph["nodes"][0]
    assert conv["inputs"] == ["input", "conv1.weight", "conv1.bias"]
    assert conv["attrs"]["kernel_shape"] == [3, 3] and conv["attrs"]["pads"] == [0, 0, 0, 0]
    assert conv["attrs"]["strides"] == [1, 1] and conv["attrs"]["group"] == 1
    bn = graph["nodes"][6]
    assert bn["attrs"]["training_mode"] == 1 and len(bn["outputs"]) == 3
    assert bn["attrs"]["epsilon"] == pytest.approx(1e-5)
    assert bn["attrs"]["momentum"] == pytest.approx(0.9)
    gemm = graph["nodes"][8]
    assert gemm["attrs"] == {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 1}
    assert graph["nodes"][-1]["attrs"] == {"axis": 1}
    drop = graph["nodes"][10]
    ratio, train = (graph["constants"][x] for x in drop["inputs"][1:])
    assert ratio["dtype"] == "float32" and ratio["values"][0] == pytest.approx(0.3)
    assert train == {"dtype": "bool", "shape": [], "values": [True]}
    summary = onnx_io.model_summary(graph)
    assert summary["params"] == summary["trainable"] == 376870
    assert summary["buffers"] == 68


# ----------------------------------------------------------------------------- export


@pytest.fixture(scope="module")
def exported(bundle, tmp_path_factory):
    graph, blob = bundle
    rng = np.random.default_rng(1)
    arrays = {}
    for name, arr in _unpack(graph, blob).items():
        if name.endswith("running_var"):
            arrays[name] = rng.uniform(0.5, 2.0, arr.shape)
        elif name.endswith("running_mean"):
            arrays[name] = rng.normal(0.0, 0.3, arr.shape)
        else:
            arrays[name] = arr + rng.normal(0.0, 0.02, arr.shape)
    new_blob = _pack(graph, arrays, len(blob))
    prov = {"dataset": "mnist", "epochs": 8, "optimizer": "adagrad", "lr": 1.0,
            "batch_size": 1000, "seed": 0, "test_accuracy": 0.987}
    data = onnx_io.export_onnx(SEEDNET, new_blob, prov)
    path = tmp_path_factory.mktemp("export") / "seednet-trained.onnx"
    path.write_bytes(data)
    return path, new_blob, _unpack(graph, new_blob)


def test_export_is_valid_inference_graph(exported):
    path, _, _ = exported
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    ops = [n.op_type for n in model.graph.node]
    assert "Dropout" not in ops and "Constant" not in ops
    for n in model.graph.node:
        if n.op_type == "BatchNormalization":
            assert len(n.output) == 1
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            assert attrs["training_mode"] == 0
    props = {p.key: p.value for p in model.metadata_props}
    assert props["trained_with"] == "webgpu-trainer"
    assert props["dataset"] == "mnist" and props["optimizer"] == "adagrad"
    assert json.loads(props["epochs"]) == 8 and json.loads(props["test_accuracy"]) == 0.987


def test_export_matches_numpy_oracle(exported):
    import onnxruntime as ort

    path, _, arrays = exported
    x = np.random.default_rng(2).normal(0.0, 1.0, (16, 1, 28, 28)).astype(np.float32)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = sess.run(["output"], {"input": x})
    want = _seednet_eval(x, arrays, eps=float(np.float32(1e-5)))
    assert got.shape == (16, 10)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


def test_export_reimport_identical(exported):
    path, blob, _ = exported
    graph2, blob2 = onnx_io.load_bundle(path)
    assert blob2 == blob
    assert [n["op_type"] for n in graph2["nodes"]].count("Dropout") == 0


def test_export_wrong_blob_size(bundle):
    _, blob = bundle
    with pytest.raises(ValueError, match=rf"expected {len(blob)} bytes, got {len(blob) - 4}"):
        onnx_io.export_onnx(SEEDNET, blob[:-4], {})


# ----------------------------------------------------------------------------- errors


def test_truncated_file(tmp_path):
    p = tmp_path / "trunc.onnx"
    p.write_bytes(SEEDNET.read_bytes()[:5000])
    with pytest.raises(OnnxImportError, match="not a valid ONNX file") as e:
        onnx_io.load_bundle(p)
    assert "trunc.onnx" in str(e.value)


@pytest.mark.parametrize("data", [b"this is not an onnx file", b"", b'{"json": true}'])
def test_not_onnx(tmp_path, data):
    p = tmp_path / "junk.onnx"
    p.write_bytes(data)
    with pytest.raises(OnnxImportError, match="junk.onnx.*not a valid ONNX file"):
        onnx_io.load_bundle(p)


def test_missing_file(tmp_path):
    with pytest.raises(OnnxImportError, match="no such file"):
        onnx_io.load_bundle(tmp_path / "nope.onnx")


def _tiny_model(nodes, inits=(), opset=16):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    g = helper.make_graph(nodes, "tiny", [x], [y], initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_unknown_op(tmp_path):
    model = _tiny_model([helper.make_node("Relu", ["x"], ["h"], name="r"),
                         helper.make_node("Celu", ["h"], ["h2"], name="weird1"),
                         helper.make_node("Foo", ["h2"], ["y"], name="weird2", domain="my.ops")])
    model.opset_import.append(helper.make_opsetid("my.ops", 1))
    p = tmp_path / "unknown.onnx"
    onnx.save(model, str(p))
    with pytest.raises(OnnxImportError, match="unsupported op") as e:
        onnx_io.load_bundle(p)
    msg = str(e.value)
    assert "unknown.onnx" in msg and "weird1 (Celu, ai.onnx opset 16)" in msg
    assert "weird2 (Foo, my.ops opset 1)" in msg and "'r'" not in msg


def test_float64_initializer_and_identity_alias(tmp_path):
    w = np.arange(16, dtype=np.float64).reshape(4, 4) / 10
    model = _tiny_model(
        [helper.make_node("Identity", ["w"], ["w_alias"], name="id"),
         helper.make_node("Gemm", ["x", "w_alias"], ["y"], name="gemm")],
        inits=[numpy_helper.from_array(w, "w")])
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    p = tmp_path / "f64.onnx"
    onnx.save(model, str(p))
    graph, blob = onnx_io.load_bundle(p)
    assert graph["tensors"][0]["dtype"] == "float32" and len(blob) == 64
    assert any("DOUBLE" in n and "'w'" in n for n in graph["notes"])
    assert [n["op_type"] for n in graph["nodes"]] == ["Gemm"]
    assert graph["nodes"][0]["inputs"] == ["x", "w"]
    np.testing.assert_array_equal(np.frombuffer(blob, "<f4").reshape(4, 4), w.astype(np.float32))
    out = onnx.load_from_string(onnx_io.export_onnx(p, blob, {"seed": 1}))
    assert out.graph.initializer[0].data_type == TensorProto.DOUBLE
    onnx.checker.check_model(out, full_check=True)


def test_missing_external_data(tmp_path):
    w = np.ones((4, 4), dtype=np.float32)
    model = _tiny_model([helper.make_node("Gemm", ["x", "w"], ["y"], name="gemm")],
                        inits=[numpy_helper.from_array(w, "w")])
    p = tmp_path / "ext.onnx"
    onnx.save(model, str(p), save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.data", size_threshold=0)
    assert onnx_io.load_bundle(p)[1] == w.tobytes()
    (tmp_path / "ext.data").unlink()
    with pytest.raises(OnnxImportError, match=r"ext.onnx: external data missing.*ext.data"):
        onnx_io.load_bundle(p)

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
import onnxruntime as ort
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


def _tiny_model(nodes, inits=(), opset=16, x_shape=("N", 784), elem=TensorProto.FLOAT):
    """x [N, 784] -> nodes -> y [N, 10] (the trainer only takes MNIST-shaped inputs)."""
    x = helper.make_tensor_value_info("x", elem, list(x_shape))
    y = helper.make_tensor_value_info("y", elem, ["N", 10])
    g = helper.make_graph(nodes, "tiny", [x], [y], initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_unknown_op(tmp_path):
    model = _tiny_model([helper.make_node("Relu", ["x"], ["h"], name="r"),
                         helper.make_node("Hardmax", ["h"], ["h2"], name="weird1"),
                         helper.make_node("Foo", ["h2"], ["y"], name="weird2", domain="my.ops")])
    model.opset_import.append(helper.make_opsetid("my.ops", 1))
    p = tmp_path / "unknown.onnx"
    onnx.save(model, str(p))
    with pytest.raises(OnnxImportError, match="unsupported op") as e:
        onnx_io.load_bundle(p)
    msg = str(e.value)
    assert "unknown.onnx" in msg and "weird1 (Hardmax, ai.onnx opset 16)" in msg
    assert "weird2 (Foo, my.ops opset 1)" in msg and "'r'" not in msg


def test_float64_initializer_and_identity_alias(tmp_path):
    """float64 weights -> float32 with a note; an Identity of a weight is a tensor of its own
    (exporters deduplicate equal initializers that way); export restores an initializer."""
    w = np.arange(7840, dtype=np.float64).reshape(784, 10) / 1e4
    model = _tiny_model(
        [helper.make_node("Identity", ["w"], ["w_alias"], name="id"),
         helper.make_node("Gemm", ["x", "w_alias"], ["y"], name="gemm")],
        inits=[numpy_helper.from_array(w, "w")], elem=TensorProto.DOUBLE)
    p = tmp_path / "f64.onnx"
    onnx.save(model, str(p))
    graph, blob = onnx_io.load_bundle(p)
    assert [(t["name"], t["dtype"], t.get("source")) for t in graph["tensors"]] == [
        ("w_alias", "float32", {"identity_of": "w"})]
    assert any("DOUBLE" in n and "'w'" in n for n in graph["notes"])
    assert [n["op_type"] for n in graph["nodes"]] == ["Gemm"]
    assert graph["nodes"][0]["inputs"] == ["x", "w_alias"]
    np.testing.assert_array_equal(np.frombuffer(blob, "<f4").reshape(784, 10),
                                  w.astype(np.float32))
    out = onnx.load_from_string(onnx_io.export_onnx(p, blob, {"seed": 1}))
    assert [(t.name, t.data_type) for t in out.graph.initializer] == [
        ("w_alias", TensorProto.DOUBLE)]
    assert [n.op_type for n in out.graph.node] == ["Gemm"]
    onnx.checker.check_model(out, full_check=True)


def test_missing_external_data(tmp_path):
    w = np.ones((784, 10), dtype=np.float32)
    model = _tiny_model([helper.make_node("Gemm", ["x", "w"], ["y"], name="gemm")],
                        inits=[numpy_helper.from_array(w, "w")])
    p = tmp_path / "ext.onnx"
    onnx.save(model, str(p), save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.data", size_threshold=0)
    assert onnx_io.load_bundle(p)[1] == w.tobytes()
    (tmp_path / "ext.data").unlink()
    with pytest.raises(OnnxImportError, match=r"ext.onnx: external data file 'ext.data' is "
                                              r"missing: the weights of 1 tensor\(s\) "
                                              r"\(initializer 'w'\)"):
        onnx_io.load_bundle(p)


# ----------------------------------------------------------------------------- import rules


def _engine_out(graph, blob, x):
    from webgpu_trainer.cpu.engine import Engine, params_from_blob
    eng = Engine(graph, params_from_blob(graph, blob), np.float64)
    vals, _, _ = eng.forward(x, train=False)
    return vals[graph["outputs"][0]["name"]]


def _save(model, path):
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def _w(shape, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 0.1).astype(np.float32)


def _ints(name, v, dt=np.int64):
    return numpy_helper.from_array(np.array(v, dt), name)


def test_fold_torchscript_view_flatten(tmp_path):
    """x.view(x.size(0), -1) of the TorchScript exporter: Shape/Gather/Unsqueeze/Concat."""
    def const(name, v):
        return helper.make_node("Constant", [], [name], value=_ints(name, v))
    nodes = [
        helper.make_node("Conv", ["x", "cw"], ["h"], name="conv", kernel_shape=[3, 3],
                         strides=[3, 3]),
        helper.make_node("Shape", ["h"], ["s"], name="shape"), const("i0", 0),
        helper.make_node("Gather", ["s", "i0"], ["n"], name="gather", axis=0), const("ax", [0]),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"], name="unsq"), const("m1", [-1]),
        helper.make_node("Concat", ["n1", "m1"], ["shp"], name="concat", axis=0),
        helper.make_node("Reshape", ["h", "shp"], ["f"], name="reshape"),
        helper.make_node("Gemm", ["f", "fw"], ["y"], name="fc", transB=1)]
    model = _tiny_model(nodes, [numpy_helper.from_array(_w((2, 1, 3, 3)), "cw"),
                                numpy_helper.from_array(_w((10, 162), 1), "fw")],
                        opset=13, x_shape=("N", 1, 28, 28))
    graph, blob = onnx_io.load_bundle(_save(model, tmp_path / "view.onnx"))
    assert [n["op_type"] for n in graph["nodes"]] == ["Conv", "Reshape", "Gemm"]
    reshape = graph["nodes"][1]
    assert reshape["inputs"] == ["h", "shp"]
    assert graph["constants"]["shp"] == {"dtype": "int64", "shape": [2], "values": [0, -1]}
    assert set(graph["constants"]) == {"shp"}
    x = np.random.default_rng(0).standard_normal((5, 1, 28, 28))
    assert _engine_out(graph, blob, x).shape == (5, 10)


def test_fold_dynamo_sym_size(tmp_path):
    """The dynamo exporter's form: Shape(start, end) -> Squeeze -> Reshape -> Concat, and a
    Reshape with allowzero=1 (the batch position becomes 0 with allowzero 0)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape", start=0, end=1),
        helper.make_node("Squeeze", ["s"], ["n"], name="sym_size"),
        helper.make_node("Reshape", ["n", "m1"], ["n1"], name="r1"),
        helper.make_node("Concat", ["n1", "k"], ["shp"], name="cat", axis=0),
        helper.make_node("Reshape", ["x", "shp"], ["f"], name="view", allowzero=1),
        helper.make_node("Gemm", ["f", "fw"], ["y"], name="fc", transB=1)]
    model = _tiny_model(nodes, [_ints("m1", [-1]), _ints("k", [784]),
                                numpy_helper.from_array(_w((10, 784)), "fw")],
                        opset=18, x_shape=("N", 1, 28, 28))
    graph, blob = onnx_io.load_bundle(_save(model, tmp_path / "dyn.onnx"))
    assert [n["op_type"] for n in graph["nodes"]] == ["Reshape", "Gemm"]
    view = graph["nodes"][0]
    assert graph["constants"][view["inputs"][1]]["values"] == [0, 784]
    assert view["attrs"]["allowzero"] == 0
    x = np.random.default_rng(0).standard_normal((3, 1, 28, 28))
    want = x.reshape(3, 784) @ _w((10, 784)).T.astype(np.float64)
    np.testing.assert_allclose(_engine_out(graph, blob, x), want, rtol=1e-6, atol=1e-9)


def test_fold_generators_and_casts(tmp_path):
    """Range, Cast, ConstantOfShape, Identity and arithmetic on constants fold; the folded
    axes are mirrored into attrs (ReduceMean opset 18 takes them as an input)."""
    nodes = [
        helper.make_node("Conv", ["x", "cw"], ["h"], name="conv", kernel_shape=[1, 1]),
        helper.make_node("Range", ["two", "four", "one"], ["r"], name="range"),
        helper.make_node("Cast", ["r"], ["rf"], name="tofloat", to=TensorProto.FLOAT),
        helper.make_node("Cast", ["rf"], ["axes"], name="toint", to=TensorProto.INT64),
        helper.make_node("ReduceMean", ["h", "axes"], ["m"], name="mean", keepdims=0),
        helper.make_node("ConstantOfShape", ["one1"], ["s"], name="cos",
                         value=numpy_helper.from_array(np.array([2.0], np.float32))),
        helper.make_node("Identity", ["s"], ["s2"], name="ident"),
        helper.make_node("Mul", ["s2", "s2"], ["s4"], name="sq"),
        helper.make_node("Mul", ["m", "s4"], ["y"], name="scale")]
    model = _tiny_model(nodes, [numpy_helper.from_array(_w((10, 1, 1, 1)), "cw"),
                                _ints("two", 2), _ints("four", 4), _ints("one", 1),
                                _ints("one1", [1])],
                        opset=18, x_shape=("N", 1, 28, 28))
    graph, blob = onnx_io.load_bundle(_save(model, tmp_path / "gen.onnx"),
                                      check_trainable=False)
    assert [n["op_type"] for n in graph["nodes"]] == ["Conv", "ReduceMean", "Mul"]
    mean = graph["nodes"][1]
    assert mean["attrs"] == {"axes": [2, 3], "keepdims": 0, "noop_with_empty_axes": 0}
    assert graph["constants"]["s4"] == {"dtype": "float32", "shape": [1], "values": [4.0]}
    x = np.random.default_rng(0).standard_normal((2, 1, 28, 28))
    want = 4 * x.mean(axis=(2, 3)) * _w((10, 1, 1, 1)).reshape(1, 10)
    np.testing.assert_allclose(_engine_out(graph, blob, x), want, rtol=1e-6)


@pytest.mark.parametrize("allowzero,const_node", [(0, True), (1, False)])
def test_static_batch_generalised(tmp_path, allowzero, const_node):
    """A fixed batch of 4 baked into a Reshape shape ([4, -1]: a Constant node from the
    TorchScript exporter, an initializer with allowzero=1 from the dynamo exporter) holds for
    any batch after import: [-1, 784]."""
    nodes = [helper.make_node("Reshape", ["x", "shp"], ["f"], name="view", allowzero=allowzero),
             helper.make_node("Gemm", ["f", "fw"], ["y"], name="fc", transB=1)]
    inits = [numpy_helper.from_array(_w((10, 784)), "fw")]
    if const_node:
        nodes.insert(0, helper.make_node("Constant", [], ["shp"], value=_ints("shp", [4, -1])))
    else:
        inits.append(_ints("shp", [4, -1]))
    model = _tiny_model(nodes, inits, opset=14 + 4 * allowzero, x_shape=(4, 1, 28, 28))
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 4
    graph, blob = onnx_io.load_bundle(_save(model, tmp_path / "static.onnx"))
    assert graph["inputs"][0]["shape"] == ["N", 1, 28, 28]
    assert graph["outputs"][0]["shape"] == ["N", 10]
    view = graph["nodes"][0]
    assert graph["constants"][view["inputs"][1]]["values"] == [-1, 784]
    assert any("fixed batch size of 4" in n and "['view']" in n for n in graph["notes"])
    x = np.random.default_rng(0).standard_normal((7, 1, 28, 28))
    want = x.reshape(7, 784) @ _w((10, 784)).T.astype(np.float64)
    np.testing.assert_allclose(_engine_out(graph, blob, x), want, rtol=1e-6, atol=1e-9)
    # the export keeps the original graph but for any batch (issue 16): the Reshape takes the
    # import's [-1, 784] (the Constant [4, -1] goes), onnxruntime runs batches of 1 and 7
    out = onnx.load_from_string(onnx_io.export_onnx(tmp_path / "static.onnx", blob, {}))
    assert [n.op_type for n in out.graph.node] == ["Reshape", "Gemm"]
    assert out.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    sess = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"])
    for rows in ([3], range(7)):
        got = sess.run(None, {"x": x[list(rows)].astype(np.float32)})[0]
        np.testing.assert_allclose(got, want[list(rows)], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_attribute_and_input_forms(tmp_path, opset):
    """Squeeze/Unsqueeze axes, Clip min/max, Dropout ratio, ReduceSum axes: attributes in
    old opsets, inputs in new ones; the bundle has the attribute form in both cases."""
    inits = [numpy_helper.from_array(_w((784, 10)), "w"),
             _ints("lo", 0.0, np.float32), _ints("hi", 6.0, np.float32)]
    if opset >= 13:
        inits += [_ints("ax1", [1]), _ints("ratio", 0.25, np.float32),
                  _ints("train", True, np.bool_)]
        unsq = helper.make_node("Unsqueeze", ["h", "ax1"], ["u"], name="unsq")
        red = helper.make_node("ReduceSum", ["u", "ax1"], ["r"], name="sum", keepdims=1)
        sq = helper.make_node("Squeeze", ["r", "ax1"], ["q"], name="sq")
        drop = helper.make_node("Dropout", ["c", "ratio", "train"], ["y", "mask"], name="drop")
    else:
        unsq = helper.make_node("Unsqueeze", ["h"], ["u"], name="unsq", axes=[1])
        red = helper.make_node("ReduceSum", ["u"], ["r"], name="sum", axes=[1], keepdims=1)
        sq = helper.make_node("Squeeze", ["r"], ["q"], name="sq", axes=[1])
        drop = helper.make_node("Dropout", ["c"], ["y", "mask"], name="drop", ratio=0.25)
    clip = helper.make_node("Clip", ["q", "lo", "hi"], ["c"], name="clip")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), unsq, red, sq, clip, drop]
    model = _tiny_model(nodes, inits, opset=opset)
    graph, blob = onnx_io.load_bundle(_save(model, tmp_path / f"forms{opset}.onnx"),
                                      check_trainable=False)
    attrs = {n["name"]: n["attrs"] for n in graph["nodes"]}
    assert attrs["unsq"]["axes"] == [1] and attrs["sq"]["axes"] == [1]
    assert attrs["sum"]["axes"] == [1] and attrs["sum"]["keepdims"] == 1
    assert attrs["clip"]["min"] == 0.0 and attrs["clip"]["max"] == 6.0
    assert attrs["drop"]["ratio"] == 0.25
    assert attrs["drop"]["training_mode"] == (1 if opset >= 13 else 0)
    assert [t["name"] for t in graph["tensors"]] == ["w"]  # scalars are constants


@pytest.mark.parametrize("opset,train", [(13, True), (13, False), (15, True), (15, False)])
def test_batchnorm_training_mode(tmp_path, opset, train):
    """training_mode: opset < 14 from the running-statistic outputs, else the attribute."""
    c = 4
    inits = [numpy_helper.from_array(_w((c, 1, 3, 3)), "cw"),
             numpy_helper.from_array(np.ones(c, np.float32), "g"),
             numpy_helper.from_array(np.zeros(c, np.float32) + 0.1, "b"),
             numpy_helper.from_array(np.zeros(c, np.float32) + 0.2, "rm"),
             numpy_helper.from_array(np.ones(c, np.float32) * 2, "rv"),
             numpy_helper.from_array(_w((c, 10)), "fw")]
    if not train:
        outs = ["bn"]
    else:
        outs = ["bn", "m1", "v1", "sm", "sv"] if opset < 14 else ["bn", "m1", "v1"]
    kw = {"training_mode": 1} if train and opset >= 14 else {}
    nodes = [helper.make_node("Conv", ["x", "cw"], ["h"], name="conv", kernel_shape=[3, 3]),
             helper.make_node("BatchNormalization", ["h", "g", "b", "rm", "rv"], outs,
                              name="bn", **kw),
             helper.make_node("GlobalAveragePool", ["bn"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "fw"], ["y"], name="mm")]
    model = _tiny_model(nodes, inits, opset=opset, x_shape=("N", 1, 28, 28))
    graph, _ = onnx_io.load_bundle(_save(model, tmp_path / "bn.onnx"), check_trainable=False)
    bn = graph["nodes"][1]
    assert bn["attrs"]["training_mode"] == int(train)
    roles = {t["name"]: t["role"] for t in graph["tensors"]}
    assert roles == {"cw": "param", "g": "param", "b": "param", "rm": "buffer",
                     "rv": "buffer", "fw": "param"}


def test_shared_running_stats_get_copies(tmp_path):
    """The dynamo exporter deduplicates equal initializers by name: BN's running_mean is the
    same tensor as its bias (zeros), running_var as its scale (ones). The statistics get
    their own copies (buffers); the export re-points the node and checks."""
    c = 3
    inits = [numpy_helper.from_array(_w((c, 1, 3, 3)), "cw"),
             numpy_helper.from_array(np.ones(c, np.float32), "bn.weight"),
             numpy_helper.from_array(np.zeros(c, np.float32), "bn.bias"),
             numpy_helper.from_array(_w((c, 10)), "fw")]
    nodes = [helper.make_node("Conv", ["x", "cw"], ["h"], name="conv", kernel_shape=[3, 3]),
             helper.make_node("BatchNormalization",
                              ["h", "bn.weight", "bn.bias", "bn.bias", "bn.weight"], ["o"],
                              name="bn"),
             helper.make_node("GlobalAveragePool", ["o"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "fw"], ["y"], name="mm")]
    model = _tiny_model(nodes, inits, opset=18, x_shape=("N", 1, 28, 28))
    p = _save(model, tmp_path / "dedup.onnx")
    graph, blob = onnx_io.load_bundle(p, check_trainable=False)
    got = [(t["name"], t["role"], t.get("source")) for t in graph["tensors"]]
    assert got == [
        ("cw", "param", None),
        ("bn.weight", "param", None),
        ("bn.running_var", "buffer", {"copy_of": "bn.weight", "node": "bn", "input": 4}),
        ("bn.bias", "param", None),
        ("bn.running_mean", "buffer", {"copy_of": "bn.bias", "node": "bn", "input": 3}),
        ("fw", "param", None)]
    assert graph["nodes"][1]["inputs"] == ["h", "bn.weight", "bn.bias", "bn.running_mean",
                                           "bn.running_var"]
    out = tmp_path / "dedup-trained.onnx"
    out.write_bytes(onnx_io.export_onnx(p, blob, {}))
    m = onnx.load(str(out))
    assert [t.name for t in m.graph.initializer] == [t[0] for t in got]
    graph2, blob2 = onnx_io.load_bundle(out, check_trainable=False)
    assert blob2 == blob and "source" not in str(graph2["tensors"])


def test_auto_pad_cast_and_dead_nodes(tmp_path):
    """auto_pad SAME_UPPER -> explicit pads; Cast to float -> Identity; unused nodes go."""
    nodes = [helper.make_node("Conv", ["x", "cw"], ["h"], name="conv", kernel_shape=[3, 3],
                              strides=[2, 2], auto_pad="SAME_UPPER"),
             helper.make_node("Cast", ["h"], ["hc"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Sigmoid", ["h"], ["unused"], name="dead"),
             helper.make_node("Flatten", ["hc"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "fw"], ["y"], name="mm")]
    model = _tiny_model(nodes, [numpy_helper.from_array(_w((1, 1, 3, 3)), "cw"),
                                numpy_helper.from_array(_w((196, 10)), "fw")],
                        opset=17, x_shape=("N", 1, 28, 28))
    graph, _ = onnx_io.load_bundle(_save(model, tmp_path / "pad.onnx"), check_trainable=False)
    assert [n["op_type"] for n in graph["nodes"]] == ["Conv", "Identity", "Flatten", "MatMul"]
    conv = graph["nodes"][0]["attrs"]
    assert conv["auto_pad"] == "NOTSET" and conv["pads"] == [0, 0, 1, 1]  # 28 -> 14


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split_slice_pad_forms(tmp_path, opset):
    """Split (attr split / input split / num_outputs), Slice (attrs in opset < 10 only, so
    inputs here), Pad (inputs from opset 11): the bundle mirrors the constants into attrs."""
    inits = [numpy_helper.from_array(_w((784, 12)), "w"), _ints("st", [1]), _ints("en", [11]),
             _ints("ax", [1]), _ints("sp", [1]), _ints("pads", [0, 0, 0, 0]),
             _ints("pv", 0.0, np.float32)]
    if opset == 11:
        split = helper.make_node("Split", ["h"], ["a", "b"], name="split", axis=1, split=[6, 6])
    elif opset == 13:
        inits.append(_ints("parts", [6, 6]))
        split = helper.make_node("Split", ["h", "parts"], ["a", "b"], name="split", axis=1)
    else:
        split = helper.make_node("Split", ["h"], ["a", "b"], name="split", axis=1,
                                 num_outputs=2)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), split,
             helper.make_node("Concat", ["b", "a"], ["c"], name="cat", axis=1),
             helper.make_node("Slice", ["c", "st", "en", "ax", "sp"], ["s"], name="slice"),
             helper.make_node("Pad", ["s", "pads", "pv"], ["y"], name="pad")]
    model = _tiny_model(nodes, inits, opset=opset)
    graph, _ = onnx_io.load_bundle(_save(model, tmp_path / f"split{opset}.onnx"),
                                   check_trainable=False)
    attrs = {n["name"]: n["attrs"] for n in graph["nodes"]}
    assert attrs["split"]["split"] == [6, 6] and attrs["split"]["axis"] == 1
    assert attrs["slice"] == {"starts": [1], "ends": [11], "axes": [1], "steps": [1]}
    assert attrs["pad"] == {"pads": [0, 0, 0, 0], "value": 0.0, "mode": "constant"}
    assert graph["nodes"][1]["inputs"][0] == "h"  # the inputs stay as they were

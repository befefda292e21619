"""Unsupported and malformed ONNX files: each gives one OnnxImportError that names the file and
lists every problem (``e.problems``), before any work; never another exception, never a hang.
Also the dtype conversions that are accepted with a note (float16 / float64 initializers).

numpy / onnx only (no torch)."""
from __future__ import annotations

import pathlib
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from webgpu_trainer import onnx_io
from webgpu_trainer.engine.graph import supported
from webgpu_trainer.onnx_io import OnnxImportError

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "models" / "mnist_cnn-ts17.onnx"


def _mlp(inp_shape=("N", 784), w_dtype=np.float32, opset=17, nodes_after=(), extra_inits=(),
         inp_type=TensorProto.FLOAT):
    """x [inp_shape] -> Flatten -> Gemm(w [784, 10]) -> (nodes_after) -> y [N, 10]."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((784, 10)) * 0.05).astype(w_dtype)
    b = np.zeros(10, w_dtype) + 0.1
    x = helper.make_tensor_value_info("x", inp_type, list(inp_shape))
    last = "y" if not nodes_after else "h"
    nodes = [helper.make_node("Flatten", ["x"], ["flat"], name="flatten"),
             helper.make_node("Gemm", ["flat", "w", "b"], [last], name="fc")]
    nodes += list(nodes_after)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])
    g = helper.make_graph(nodes, "mlp", [x], [y],
                          initializer=[numpy_helper.from_array(w, "w"),
                                       numpy_helper.from_array(b, "b"), *extra_inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _save(model, path):
    onnx.save(model, str(path))
    return path


def _problems(path, **kw):
    with pytest.raises(OnnxImportError) as e:
        onnx_io.load_bundle(path, **kw)
    msg = str(e.value)
    assert msg.startswith(f"{path}: "), msg  # names the file
    assert len(e.value.problems) >= 1
    return msg, e.value.problems


# ----------------------------------------------------------------------------- bytes


@pytest.mark.parametrize("cut", [1, 7, 100, 1000, 5000, 20000, -100, -1])
def test_truncated(tmp_path, cut):
    data = FIXTURE.read_bytes()
    p = tmp_path / "trunc.onnx"
    p.write_bytes(data[:cut])
    msg, problems = _problems(p)
    assert "trunc.onnx" in msg
    assert any(w in msg for w in ("not a valid ONNX file", "truncated", "no such", "declares"))


@pytest.mark.parametrize("data", [b"", b"this is not an onnx file", b'{"json": true}',
                                  b"\x89PNG\r\n\x1a\n" + bytes(100), b"PK\x03\x04" + bytes(64),
                                  bytes(range(256)) * 4])
def test_not_onnx(tmp_path, data):
    p = tmp_path / "junk.onnx"
    p.write_bytes(data)
    msg, problems = _problems(p)
    assert "not a valid ONNX file" in msg and len(problems) == 1


def test_missing_file(tmp_path):
    msg, _ = _problems(tmp_path / "nope.onnx")
    assert "no such file" in msg


def test_corrupted_bytes_never_crash(tmp_path):
    """Random byte flips in a real model: an import or an OnnxImportError, quickly."""
    data = bytearray(FIXTURE.read_bytes())
    rng = np.random.default_rng(3)
    for i in range(40):
        bad = bytearray(data)
        for pos in rng.integers(0, len(bad), size=int(rng.integers(1, 6))):
            bad[pos] = int(rng.integers(0, 256))
        p = tmp_path / f"flip{i}.onnx"
        p.write_bytes(bytes(bad))
        t0 = time.perf_counter()
        try:
            onnx_io.load_bundle(p)
        except OnnxImportError:
            pass
        assert time.perf_counter() - t0 < 20


# ----------------------------------------------------------------------------- ops


def test_unknown_ops_all_listed(tmp_path):
    cannot = [op for op in ("Celu", "Mish", "Selu", "Softsign") if op not in supported()]
    after = [helper.make_node("Hardmax", ["h"], ["h2"], name="weird1"),
             helper.make_node("Foo", ["h2"], ["h3"], name="weird2", domain="my.ops")]
    if cannot:
        after.append(helper.make_node(cannot[0], ["h3"], ["y"], name="weird3"))
    else:
        after.append(helper.make_node("Relu", ["h3"], ["y"], name="weird3"))
    model = _mlp(nodes_after=after)
    model.opset_import.append(helper.make_opsetid("my.ops", 1))
    msg, problems = _problems(_save(model, tmp_path / "unknown.onnx"))
    assert "unsupported op: node weird1 (Hardmax, ai.onnx opset 17)" in msg
    assert "unknown op domain 'my.ops': node weird2 (Foo, my.ops opset 1)" in msg
    if cannot:
        assert f"cannot train yet: node weird3 ({cannot[0]}, ai.onnx opset 17)" in msg
        # ... an op the importer maps imports when trainability is not asked for
        model2 = _mlp(nodes_after=[helper.make_node(cannot[0], ["h"], ["y"], name="c")])
        onnx_io.load_bundle(_save(model2, tmp_path / "c.onnx"), check_trainable=False)
    assert "fc" not in " ".join(p for p in problems if p.startswith(("unsupported", "unknown")))


def test_gather_on_activations_is_not_folded(tmp_path):
    """A Gather on activation values with constant indices is not shape arithmetic: the engine
    runs it (ops/gather.py), only the Tile after it is refused."""
    idx = numpy_helper.from_array(np.array([0, 2], np.int64), "idx")
    model = _mlp(nodes_after=[helper.make_node("Gather", ["h", "idx"], ["g"], name="gather",
                                               axis=1),
                              helper.make_node("Tile", ["g", "reps"], ["y"], name="tile")],
                 extra_inits=[idx, numpy_helper.from_array(np.array([1, 5], np.int64), "reps")])
    msg, problems = _problems(_save(model, tmp_path / "gather.onnx"))
    assert not [p for p in problems if "node gather" in p]
    assert "unsupported op: node tile (Tile, ai.onnx opset 17)" in msg
    assert len([p for p in problems if p.startswith("unsupported")]) == 1


# ----------------------------------------------------------------------------- inputs


@pytest.mark.parametrize("shape", [["N", 3, 32, 32], ["N", 28, 28], [7, 1, 28, 28],
                                   ["N", 1, 28, 28, 1], ["N", 784]])
def test_any_input_shape_imports(tmp_path, shape):
    """Any float input [N, ...] of fixed sample dims imports (which dataset it fits is
    checked when training starts); the Gemm takes 784 features, so the Flatten gives them."""
    model = _mlp(inp_shape=shape)
    if np.prod(shape[1:]) != 784:
        w = np.zeros((int(np.prod(shape[1:])), 10), np.float32)
        model.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    graph, _ = onnx_io.load_bundle(_save(model, tmp_path / "shape.onnx"))
    assert graph["inputs"][0]["shape"][1:] == shape[1:]
    assert graph["outputs"][0]["shape"][1:] == [10]


@pytest.mark.parametrize("shape,problem", [
    ([784], "input 'x' has shape [784] (a scalar per sample, rank 1): the trainer feeds "
            "samples [N, ...] of rank >= 2, e.g. [N, 1, 28, 28] or [N, 784]"),
    (["batch", 1, "H", "W"], "input 'x' has shape ['batch', 1, 'H', 'W']: every dim but the "
                             "batch must be a fixed size (re-export with only the batch axis "
                             "dynamic)"),
])
def test_input_shape_refused(tmp_path, shape, problem):
    model = _mlp(inp_shape=shape)
    msg, problems = _problems(_save(model, tmp_path / "shape.onnx"))
    assert problem in problems


def test_input_dtype_and_count(tmp_path):
    model = _mlp(inp_type=TensorProto.UINT8)
    model.graph.input.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 2]))
    msg, problems = _problems(_save(model, tmp_path / "two.onnx"))
    assert "has 2 inputs ['x', 'z']" in msg
    assert "input 'x' has dtype uint8" in msg


def test_output_not_class_scores(tmp_path):
    model = _mlp(nodes_after=[helper.make_node("Unsqueeze", ["h", "ax"], ["y"], name="u")],
                 extra_inits=[numpy_helper.from_array(np.array([2], np.int64), "ax")])
    msg, _ = _problems(_save(model, tmp_path / "out3d.onnx"))
    assert "output 'y' has shape ['N', 10, 1]: training needs [N, K] class scores, K >= 2" \
        in msg


def test_output_of_one_class(tmp_path):
    """[N, 1] scores are not a classification (K >= 2); [N, 2] is."""
    model = _mlp()
    w = np.zeros((784, 1), np.float32)
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    model.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.zeros(1, np.float32), "b"))
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 1
    msg, _ = _problems(_save(model, tmp_path / "one.onnx"))
    assert "output 'y' has shape ['N', 1]: training needs [N, K] class scores, K >= 2" in msg


def test_batch_baked_in_elsewhere(tmp_path):
    """A static export whose batch size hides where it cannot be generalised."""
    model = _mlp(inp_shape=[4, 784], nodes_after=[
        helper.make_node("Expand", ["h", "shp"], ["y"], name="expand")],
        extra_inits=[numpy_helper.from_array(np.array([4, 10], np.int64), "shp")])
    msg, _ = _problems(_save(model, tmp_path / "baked.onnx"))
    assert "does not follow the batch size" in msg and "dynamic batch axis" in msg


# ----------------------------------------------------------------------------- data


def test_missing_external_data(tmp_path):
    model = _mlp()
    p = tmp_path / "ext.onnx"
    onnx.save(model, str(p), save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.weights", size_threshold=0)
    graph, blob = onnx_io.load_bundle(p)  # present: loaded
    assert graph["weights_nbytes"] == len(blob) > 784 * 10 * 4
    (tmp_path / "ext.weights").unlink()
    msg, problems = _problems(p)
    # one problem for the file, naming its tensors and how to make the model one file
    assert problems[0].startswith("external data file 'ext.weights' is missing: the weights "
                                  "of 2 tensor(s) (initializer 'w', initializer 'b') are")
    assert "torch.onnx.export(..., external_data=False)" in problems[0]
    assert sum("ext.weights" in p for p in problems) == 1


def test_missing_external_data_no_knock_on_problems(tmp_path):
    """The dynamo exporter's layout: every initializer in NAME.onnx.data, an int64 axes
    tensor among them. Without the file: one problem, naming it, and none about the axes
    tensor (whose values are unknown, not a float tensor used as data)."""
    axes = numpy_helper.from_array(np.array([1], np.int64), "node_mean.axes")
    model = _mlp(opset=18, extra_inits=[axes], nodes_after=[
        helper.make_node("Unsqueeze", ["h", "node_mean.axes"], ["u"], name="node_unsqueeze"),
        helper.make_node("ReduceMean", ["u", "node_mean.axes"], ["y"], name="node_mean",
                         keepdims=0)])
    p = tmp_path / "dyn.onnx"
    onnx.save(model, str(p), save_as_external_data=True, all_tensors_to_one_file=True,
              location="dyn.onnx.data", size_threshold=0)
    onnx_io.load_bundle(p)  # present: it imports
    (tmp_path / "dyn.onnx.data").unlink()
    msg, problems = _problems(p)
    assert problems == [problems[0]] and "'dyn.onnx.data' is missing" in problems[0], problems
    assert "3 tensor(s)" in problems[0] and "node_mean.axes" in problems[0]


def test_external_data_outside_folder(tmp_path):
    model = _mlp()
    t = model.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="../../etc/passwd")
    msg, _ = _problems(_save(model, tmp_path / "escape.onnx"))
    assert "outside the model's folder" in msg


def test_external_data_too_short(tmp_path):
    model = _mlp()
    p = tmp_path / "short.onnx"
    onnx.save(model, str(p), save_as_external_data=True, all_tensors_to_one_file=True,
              location="short.weights", size_threshold=0)
    data = (tmp_path / "short.weights").read_bytes()
    (tmp_path / "short.weights").write_bytes(data[:1000])
    msg, _ = _problems(p)
    assert "'short.weights') but that file holds only 1,000 bytes" in msg


@pytest.mark.parametrize("dims", [[784, 10, 1000000], [10 ** 12, 10], [784, 11]])
def test_absurd_declared_size(tmp_path, dims):
    model = _mlp()
    model.graph.initializer[0].ClearField("dims")
    model.graph.initializer[0].dims.extend(dims)
    p = _save(model, tmp_path / "absurd.onnx")
    t0 = time.perf_counter()
    msg, _ = _problems(p)
    assert time.perf_counter() - t0 < 10
    assert f"initializer 'w' declares shape {dims}" in msg
    assert "but holds 31,360 bytes of data" in msg
    if np.prod(dims, dtype=object) * 4 > p.stat().st_size:
        assert "the file holds" in msg


def test_absurd_constant_of_shape(tmp_path):
    """Folding never materialises a huge constant."""
    shp = numpy_helper.from_array(np.array([10 ** 6, 10 ** 6], np.int64), "shp")
    model = _mlp(nodes_after=[
        helper.make_node("ConstantOfShape", ["shp"], ["big"], name="cos"),
        helper.make_node("Add", ["h", "big"], ["y"], name="add")], extra_inits=[shp])
    t0 = time.perf_counter()
    msg, _ = _problems(_save(model, tmp_path / "cos.onnx"))
    assert time.perf_counter() - t0 < 10
    assert "node cos (ConstantOfShape, ai.onnx opset 17) could not be folded" in msg


def test_float16_initializer_converted(tmp_path):
    model = _mlp(w_dtype=np.float16, inp_type=TensorProto.FLOAT16)
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    p = _save(model, tmp_path / "half.onnx")
    graph, blob = onnx_io.load_bundle(p)
    assert [t["dtype"] for t in graph["tensors"]] == ["float32", "float32"]
    assert any("converted to float32" in n and "'w' (FLOAT16)" in n for n in graph["notes"])
    w = np.frombuffer(blob, "<f4", 7840, graph["tensors"][0]["offset"]).reshape(784, 10)
    np.testing.assert_array_equal(w, numpy_helper.to_array(model.graph.initializer[0])
                                  .astype(np.float32))
    out = onnx.load_from_string(onnx_io.export_onnx(p, blob, {}))  # exported back as float16
    assert out.graph.initializer[0].data_type == TensorProto.FLOAT16


def test_float64_initializer_converted(tmp_path):
    model = _mlp(w_dtype=np.float64, inp_type=TensorProto.DOUBLE)
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    graph, _ = onnx_io.load_bundle(_save(model, tmp_path / "f64.onnx"))
    assert any("'w' (DOUBLE)" in n for n in graph["notes"])
    assert any("input 'x' is float64; the engine feeds and computes float32" in n
               for n in graph["notes"])
    assert graph["inputs"][0]["dtype"] == "float32"


def test_checker_problem(tmp_path):
    """A type-inconsistent model (float16 weights on a float32 input) is refused."""
    msg, _ = _problems(_save(_mlp(w_dtype=np.float16), tmp_path / "mixed.onnx"))
    assert "ONNX checker rejects the model" in msg


def test_int8_and_float8_initializers_refused(tmp_path):
    model = _mlp()
    q = numpy_helper.from_array(np.ones((10, 10), np.int8), "q")
    f8 = helper.make_tensor("f8", TensorProto.FLOAT8E4M3FN, [10], [0] * 10)
    model.graph.initializer.extend([q, f8])
    y = model.graph.node[-1]
    y.output[0] = "h"
    model.graph.node.extend([helper.make_node("MatMul", ["h", "q"], ["h2"], name="mm"),
                             helper.make_node("Add", ["h2", "f8"], ["y"], name="add")])
    msg, problems = _problems(_save(model, tmp_path / "quant.onnx"), check_trainable=False)
    assert "initializer 'q' is INT8 [10, 10] used as data by mm (MatMul)" in msg
    assert "quantized (int8/uint8) weights are not supported" in msg
    assert "initializer 'f8' has dtype FLOAT8E4M3FN" in msg


def test_every_problem_at_once(tmp_path):
    """A rank-1 input, an unknown op, an int8 weight, missing external data: one error."""
    model = _mlp(inp_shape=[784], nodes_after=[
        helper.make_node("Hardmax", ["h"], ["y"], name="hm")])
    model.graph.initializer.append(numpy_helper.from_array(np.ones(10, np.int8), "q8"))
    model.graph.node[-1].input[0] = "h"
    model.graph.node.insert(2, helper.make_node("Add", ["h0", "q8"], ["h"], name="addq"))
    model.graph.node[1].output[0] = "h0"
    t = model.graph.initializer[1]  # b: external, missing
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="gone.bin")
    msg, problems = _problems(_save(model, tmp_path / "many.onnx"))
    assert msg.startswith(f"{tmp_path / 'many.onnx'}: cannot be imported (")
    text = "\n".join(problems)
    assert "input 'x' has shape [784] (a scalar per sample, rank 1)" in text
    assert "unsupported op: node hm (Hardmax, ai.onnx opset 17)" in text
    assert "external data file 'gone.bin' is missing" in text
    assert all(f"- {p}" in msg for p in problems)


def _batch_sized(value_nodes, extra_inits=()):
    """The MLP with ``y = h + v``, v [batch, 10] made by ``value_nodes`` from bk = [batch, 10]
    (Shape -> Gather -> Concat) into "v"."""
    zero = numpy_helper.from_array(np.array([0], np.int64), "zero")
    ten = numpy_helper.from_array(np.array([10], np.int64), "ten")
    return _mlp(nodes_after=[
        helper.make_node("Shape", ["x"], ["xs"], name="shape"),
        helper.make_node("Gather", ["xs", "zero"], ["n"], name="batch"),
        helper.make_node("Concat", ["n", "ten"], ["bk"], name="cat", axis=0),
        *value_nodes,
        helper.make_node("Add", ["h", "v"], ["y"], name="add")],
        extra_inits=[zero, ten, *extra_inits])


def test_batch_dependent_value_is_cut_to_its_shape(tmp_path):
    """A value that follows the batch and differs from sample to sample (Range(0, 10 batch)
    as [batch, 10]) feeding an Add: the problem names it by its shape and first values,
    never the whole tensor."""
    scalars = [numpy_helper.from_array(np.array(v, np.int64), name)
               for v, name in ((0, "z0"), (1, "one"), (10, "t10"))]
    model = _batch_sized([
        helper.make_node("ReduceProd", ["bk"], ["count1"], name="count", keepdims=0),
        helper.make_node("Range", ["z0", "count1", "one"], ["r"], name="range"),
        helper.make_node("Reshape", ["r", "bk"], ["ri"], name="rows"),
        helper.make_node("Cast", ["ri"], ["v"], name="float", to=TensorProto.FLOAT)], scalars)
    msg, problems = _problems(_save(model, tmp_path / "batchdep.onnx"))
    line = next(p for p in problems if "depends on the batch size" in p)
    assert line.startswith("node add (Add) input 1 'v' depends on the batch size (it is "
                           "shape [")
    assert ", values 0, 1, 2, 3, 4, 5, ... (" in line and len(line) < 300, line


def test_batch_sized_row_broadcasts(tmp_path):
    """The same for every sample (ConstantOfShape of [batch, 10], 0.5s): the Add reads one
    row [1, 10], broadcast over the batch, with a note saying so."""
    model = _batch_sized([helper.make_node(
        "ConstantOfShape", ["bk"], ["v"], name="halves",
        value=numpy_helper.from_array(np.array([0.5], np.float32)))])
    graph, _ = onnx_io.load_bundle(_save(model, tmp_path / "row.onnx"))
    add = next(n for n in graph["nodes"] if n["op_type"] == "Add")
    assert graph["constants"][add["inputs"][1]]["shape"] == [1, 10]
    assert any("node add (Add): input 1 'v' is the same for every sample" in note
               for note in graph["notes"])

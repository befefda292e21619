"""Transpose, Concat, Slice, Pad, Expand (ops/layout.py, shaders/layout.wgsl) against the
float64 numpy engine (cpu/layout.py), which is itself checked against onnxruntime.

Each op sits in a small graph: input -> 1x1 Conv (or Gemm) -> op -> Flatten (a Reshape to
[N, -1] where the op moved the batch dim) -> Gemm -> LogSoftmax, so one training step exercises
the op's forward, its input gradient and the parameter gradients before it.
"""

import numpy as np
import pytest
import reference as ref
from conftest import (
    compare,
    f32,
    head,
    make_graph,
    node,
    one_step,
    params_of,
    rng_for,
    run,
)

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend

I64_MAX = 9223372036854775807
I64_MIN = -9223372036854775808
BATCH, CLASSES = 2, 5


def _const(values, dtype="int64"):
    values = list(values)
    return {"dtype": dtype, "shape": [len(values)], "values": values}


def _conv_pre(c, rng, out="h"):
    """input [N, c, H, W] -> 1x1 Conv -> ``out``."""
    w = f32(rng.standard_normal((c, c, 1, 1)) / np.sqrt(c))
    b = f32(rng.standard_normal(c) * 0.1)
    nodes = [node("Conv", ["input", "pre.w", "pre.b"], [out], kernel_shape=[1, 1],
                  pads=[0, 0, 0, 0], strides=[1, 1], dilations=[1, 1], group=1)]
    return nodes, [("pre.w", w, "param"), ("pre.b", b, "param")]


def _gemm_pre(features, out_features, rng, out="h"):
    """input [N, features] -> Gemm(transB=1) -> ``out`` [N, out_features]."""
    w = f32(rng.standard_normal((out_features, features)) / np.sqrt(features))
    b = f32(rng.standard_normal(out_features) * 0.1)
    nodes = [node("Gemm", ["input", "pre.w", "pre.b"], [out], transB=1)]
    return nodes, [("pre.w", w, "param"), ("pre.b", b, "param")]


def _shape_of(nodes, tensors, x_shape, constants, name, opset):
    from webgpu_trainer.engine.graph import Graph
    graph, _ = make_graph(nodes, tensors, [("input", ["N"] + list(x_shape[1:]))],
                          [(name, [])], constants=constants)
    graph["opset"] = opset
    return Graph(graph).shapes(x_shape[0])[name]


def _check(device, tag, nodes, tensors, x, y="y", constants=None, opset=17, acts=("h", "y"),
           dacts=("h", "y"), batch=BATCH):
    """Append the head to ``nodes`` (whose tested output is ``y``), run one training step on
    the device and compare everything with the float64 numpy engine."""
    constants = dict(constants or {})
    rng = rng_for(tag, "head", len(nodes))
    shape = _shape_of(nodes, tensors, x.shape, constants, y, opset)
    feats = int(np.prod(shape[1:])) if shape[0] == batch else int(np.prod(shape)) // batch
    if shape[0] == batch:
        tail = [node("Flatten", [y], ["flat"], axis=1)]
    else:  # the op moved the batch dim: any [N, -1] view feeds the head
        constants["flat_shape"] = _const([batch, -1])
        tail = [node("Reshape", [y, "flat_shape"], ["flat"])]
    hn, ht = head("flat", feats, CLASSES, rng)
    tensors = tensors + ht
    graph, blob = make_graph(nodes + tail + hn, tensors,
                             [("input", ["N"] + list(x.shape[1:]))],
                             [("output", ["N", CLASSES])], constants=constants)
    graph["opset"] = opset
    labels = rng.integers(0, CLASSES, batch)
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.graph_step(graph, params_of(tensors), x, labels)
    compare(tag, res, want, acts=acts, dacts=dacts)
    return res, want


# ---- Transpose ------------------------------------------------------------------------------

@pytest.mark.parametrize("perm", [[0, 2, 3, 1], [0, 3, 1, 2], [3, 1, 0, 2], [1, 0, 2, 3],
                                  [2, 3, 0, 1], [0, 1, 2, 3], None])
@pytest.mark.parametrize("chw", [(3, 7, 33), (7, 1, 5)])
def test_transpose(device, perm, chw):
    rng = rng_for("transpose", perm, chw)
    pre, tensors = _conv_pre(chw[0], rng)
    attrs = {} if perm is None else {"perm": perm}
    nodes = pre + [node("Transpose", ["h"], ["y"], **attrs)]
    x = f32(rng.standard_normal((BATCH,) + chw))
    res, _ = _check(device, "Transpose", nodes, tensors, x)
    want = np.transpose(res["acts"]["h"], perm)
    assert np.array_equal(res["acts"]["y"], want)


def test_transpose_2d_after_gemm(device):
    rng = rng_for("transpose2d")
    pre, tensors = _gemm_pre(7, 33, rng)
    nodes = pre + [node("Transpose", ["h"], ["y"])]
    _check(device, "Transpose", nodes, tensors, f32(rng.standard_normal((BATCH, 7))))


# ---- Concat -----------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [1, -1, 2])
def test_concat_param_and_repeated_activation(device, axis):
    """Concat(h, p, h): a param between two uses of the same activation (its gradient sums
    the two slices)."""
    rng = rng_for("concat", axis)
    c, h, w = 3, 1, 7
    pre, tensors = _conv_pre(c, rng)
    pshape = [BATCH, c, h, w]
    pshape[axis] = {1: 1, -1: 33, 2: 2}[axis]
    tensors.append(("p", f32(rng.standard_normal(pshape)), "param"))
    nodes = pre + [node("Concat", ["h", "p", "h"], ["y"], axis=axis)]
    x = f32(rng.standard_normal((BATCH, c, h, w)))
    res, _ = _check(device, "Concat", nodes, tensors, x)
    assert np.array_equal(res["acts"]["y"], np.concatenate(
        [res["acts"]["h"], res["P"]["p"], res["acts"]["h"]], axis=axis))


def test_concat_constant_and_gemm(device):
    """Concat of an activation, a constant, a param and the graph input (no gradient) on the
    last axis of a 2-D tensor; then a second Concat of one input (a copy)."""
    rng = rng_for("concat_const")
    pre, tensors = _gemm_pre(7, 33, rng)
    tensors.append(("p", f32(rng.standard_normal((BATCH, 1))), "param"))
    consts = {"k": {"dtype": "float32", "shape": [BATCH, 7],
                    "values": [float(v) for v in rng.standard_normal(BATCH * 7)]}}
    nodes = pre + [node("Concat", ["h", "k", "p", "input"], ["c"], axis=-1),
                   node("Concat", ["c"], ["y"], axis=0)]
    _check(device, "Concat", nodes, tensors, f32(rng.standard_normal((BATCH, 7))), constants=consts,
           acts=("h", "c", "y"), dacts=("h", "c", "y"))


# ---- Slice ------------------------------------------------------------------------------------

SLICE_CASES = {
    # id: (starts, ends, axes, steps) on h [2, 7, 5, 33]; None = input absent
    "neg_start_int64max_end": ([-3], [I64_MAX], [3], None),
    "step2_axes_subset": ([1, -30], [I64_MAX, -1], [1, 3], [2, 3]),
    "reverse_int64min": ([-1], [I64_MIN], [2], [-1]),
    "neg_step2_two_axes": ([30, -2], [2, I64_MIN], [-1, 1], [-5, -2]),
    "no_axes_no_steps": ([0, 2], [I64_MAX, 5], None, None),
    "start_clamped_neg_step": ([-10, 100], [I64_MIN, 0], [2, 3], [-1, -7]),
    "one_element": ([4], [5], [1], [1]),
}


@pytest.mark.parametrize("case", list(SLICE_CASES))
def test_slice(device, case):
    starts, ends, axes, steps = SLICE_CASES[case]
    rng = rng_for("slice", case)
    pre, tensors = _conv_pre(7, rng)
    consts = {"starts": _const(starts), "ends": _const(ends)}
    inputs = ["h", "starts", "ends"]
    if axes is not None or steps is not None:
        inputs.append("axes" if axes is not None else "")
        if axes is not None:
            consts["axes"] = _const(axes)
    if steps is not None:
        consts["steps"] = _const(steps)
        inputs.append("steps")
    nodes = pre + [node("Slice", inputs, ["y"])]
    x = f32(rng.standard_normal((BATCH, 7, 5, 33)))
    _check(device, "Slice", nodes, tensors, x, constants=consts)


def test_slice_opset9_attributes(device):
    rng = rng_for("slice9")
    pre, tensors = _conv_pre(7, rng)
    nodes = pre + [node("Slice", ["h"], ["y"], starts=[-4, 1], ends=[I64_MAX, -1], axes=[3, 1])]
    _check(device, "Slice", nodes, tensors, f32(rng.standard_normal((BATCH, 7, 1, 33))), opset=9)


def test_slice_2d_after_gemm(device):
    rng = rng_for("slice2d")
    pre, tensors = _gemm_pre(7, 33, rng)
    consts = {"s": _const([5]), "e": _const([-7]), "a": _const([-1]), "st": _const([3])}
    nodes = pre + [node("Slice", ["h", "s", "e", "a", "st"], ["y"])]
    _check(device, "Slice", nodes, tensors, f32(rng.standard_normal((BATCH, 7))), constants=consts)


# ---- Pad --------------------------------------------------------------------------------------

PAD_CASES = {
    # id: (pads, constant_value or None, axes or None) on h [2, 3, 5, 7]
    "asymmetric_value": ([0, 1, 2, 0, 0, 2, 1, 3], 0.5, None),
    "negative_crop": ([0, 0, -1, 2, 0, 1, 3, -2], -1.25, None),
    "all_negative": ([0, -1, -2, -3, 0, -1, -1, -3], 2.0, None),
    "axes_opset18": ([1, -1, 2, 0], 0.75, [-1, 2]),
    "default_value": ([0, 0, 1, 1, 0, 0, 1, 1], None, None),
}


@pytest.mark.parametrize("case", list(PAD_CASES))
def test_pad(device, case):
    pads, value, axes = PAD_CASES[case]
    rng = rng_for("pad", case)
    pre, tensors = _conv_pre(3, rng)
    consts = {"pads": _const(pads)}
    inputs = ["h", "pads"]
    if value is not None or axes is not None:
        inputs.append("value" if value is not None else "")
        if value is not None:
            consts["value"] = {"dtype": "float32", "shape": [], "values": [value]}
    if axes is not None:
        consts["axes"] = _const(axes)
        inputs.append("axes")
    nodes = pre + [node("Pad", inputs, ["y"], mode="constant")]
    x = f32(rng.standard_normal((BATCH, 3, 5, 7)))
    res, _ = _check(device, "Pad", nodes, tensors, x, constants=consts,
                    opset=18 if axes else 17)
    if value and max(pads) > 0:  # the constant fills the padded cells
        assert (res["acts"]["y"] == np.float32(value)).sum() > 0


def test_pad_opset2_attributes(device):
    rng = rng_for("pad2")
    pre, tensors = _gemm_pre(7, 33, rng)
    nodes = pre + [node("Pad", ["h"], ["y"], mode="constant", pads=[0, -3, 0, 7], value=1.5)]
    _check(device, "Pad", nodes, tensors, f32(rng.standard_normal((BATCH, 7))), opset=2)


@pytest.mark.parametrize("chunk", [None, 64])
def test_pad_value_tensor(device, chunk, monkeypatch):
    """constant_value as a trainable float initializer (how exporters may store it): read on
    the device, its gradient = the sum of dy over the padded cells (in parts with chunk 64)."""
    from webgpu_trainer.engine.plan import Builder
    monkeypatch.setattr(Builder, "REDUCE_CHUNK", chunk)
    rng = rng_for("pad_value_tensor")
    pre, tensors = _conv_pre(3, rng)
    tensors.append(("pad.value", f32([0.3]).reshape(()), "param"))
    consts = {"pads": _const([0, 1, 2, -1, 0, 0, 1, 3])}
    nodes = pre + [node("Pad", ["h", "pads", "pad.value"], ["y"], mode="constant")]
    _check(device, "Pad", nodes, tensors, f32(rng.standard_normal((BATCH, 3, 5, 7))),
           constants=consts)


# ---- Expand -----------------------------------------------------------------------------------

def test_expand_3x1_to_2x3x4(device):
    """h [3, 1] (batch 3) -> Expand [2, 3, 4] -> Transpose [3, 2, 4] (batch first again)."""
    rng = rng_for("expand_basic")
    pre, tensors = _gemm_pre(7, 1, rng)
    consts = {"shape": _const([2, 3, 4])}
    nodes = pre + [node("Expand", ["h", "shape"], ["e"]),
                   node("Transpose", ["e"], ["y"], perm=[1, 0, 2])]
    _check(device, "Expand", nodes, tensors, f32(rng.standard_normal((3, 7))), constants=consts,
           acts=("h", "e", "y"), dacts=("h", "e", "y"), batch=3)


def test_expand_middle_dim_bidirectional(device):
    """h [2, 7, 1, 33] -> Expand with shape [1, 1, 5, 1] (smaller than h elsewhere)."""
    rng = rng_for("expand_mid")
    pre, tensors = _conv_pre(7, rng)
    consts = {"shape": _const([1, 1, 5, 1])}
    nodes = pre + [node("Expand", ["h", "shape"], ["y"])]
    _check(device, "Expand", nodes, tensors, f32(rng.standard_normal((BATCH, 7, 1, 33))),
           constants=consts)


def test_expand_param_then_concat(device):
    """A param [1, 7] expanded over the batch and concatenated with the activation."""
    rng = rng_for("expand_param")
    pre, tensors = _gemm_pre(5, 7, rng)
    tensors.append(("p", f32(rng.standard_normal((1, 7))), "param"))
    consts = {"shape": _const([BATCH, 7])}
    nodes = pre + [node("Expand", ["p", "shape"], ["e"]),
                   node("Concat", ["h", "e"], ["y"], axis=1)]
    _check(device, "Expand", nodes, tensors, f32(rng.standard_normal((BATCH, 5))), constants=consts,
           acts=("h", "e", "y"))


def test_expand_long_sum_split(device):
    """h [2, 3] viewed [2, 3, 1] -> Expand [1, 1, 200]: 6 sums of 200 values (split-K)."""
    rng = rng_for("expand_long")
    pre, tensors = _gemm_pre(7, 3, rng)
    consts = {"v": _const([BATCH, 3, 1]), "shape": _const([1, 1, 200])}
    nodes = pre + [node("Reshape", ["h", "v"], ["hv"]),
                   node("Expand", ["hv", "shape"], ["y"])]
    _check(device, "Expand", nodes, tensors, f32(rng.standard_normal((BATCH, 7))), constants=consts)


# ---- refusals (no device work) ---------------------------------------------------------------

def _graph_of(nodes, constants, tensors=()):
    from webgpu_trainer.engine.graph import Graph
    graph, _ = make_graph(nodes, list(tensors), [("input", ["N", 3, 4])], [("y", [])],
                          constants=constants)
    return Graph(graph)


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_pad_mode_refused(mode):
    from webgpu_trainer.engine.graph import GraphError
    g = _graph_of([node("Pad", ["input", "pads"], ["y"], name="/pad", mode=mode)],
                  {"pads": _const([0, 1, 1, 0, 1, 1])})
    with pytest.raises(GraphError, match=f"/pad.*{mode}"):
        g.shapes(2)


def test_slice_non_constant_starts_refused():
    from webgpu_trainer.engine.graph import GraphError
    g = _graph_of([node("Slice", ["input", "st", "en"], ["y"], name="/slice")],
                  {"en": _const([2])}, tensors=[("st", f32([1.0]), "param")])
    with pytest.raises(GraphError, match="/slice.*'st'.*starts"):
        g.shapes(2)


# ---- the oracle against onnxruntime ----------------------------------------------------------

ORT_CASES = [
    ("Transpose", {"perm": [2, 0, 3, 1]}, []),
    ("Transpose", {}, []),
    ("Slice", {}, [[-2, 1], [I64_MAX, I64_MIN], [1, 3], [1, -1]]),
    ("Slice", {}, [[-10], [I64_MIN], [2], [-1]]),
    ("Slice", {}, [[10, 0], [I64_MIN, I64_MAX], [2, -1], [-2, 2]]),
    ("Pad", {"mode": "constant"}, [[1, 0, -1, 2, 0, 3, 2, -1], 0.5]),
    ("Pad", {"mode": "constant"}, [[2, -1], 1.5, [-1]]),
    ("Expand", {}, [[2, 1, 1, 1, 4]]),
]


@pytest.mark.parametrize("k", range(len(ORT_CASES)))
def test_numpy_engine_matches_onnxruntime(k):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from webgpu_trainer.cpu import layout
    from webgpu_trainer.cpu.engine import Context
    op, attrs, consts = ORT_CASES[k]
    x = np.random.default_rng(k).standard_normal((3, 7, 5, 4))
    arrays = [np.asarray(c, np.float64 if isinstance(c, float) else np.int64) for c in consts]
    names = [f"c{i}" for i in range(len(arrays))]
    onode = helper.make_node(op, ["x"] + names, ["y"], **attrs)
    g = helper.make_graph([onode], "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE,
                                                                      None)],
                          [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
                          [numpy_helper.from_array(a, n) for a, n in zip(arrays, names)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    bnode = {"name": "n", "op_type": op, "inputs": ["x"] + names, "outputs": ["y"],
             "attrs": attrs}
    got = layout.forward(bnode, [x] + arrays, Context(False, np.float64))[0][0]
    assert got.shape == want.shape and np.array_equal(got, want)
    # the backward is the adjoint of the (linear in x) forward: <dy, f(x)> = <dx, x>
    dy = np.random.default_rng(k + 100).standard_normal(got.shape)
    dx = layout.backward(bnode, [x] + arrays, [got], None, [dy], Context(True, np.float64))[0]
    if op == "Pad":  # the constant cells are not linear in x
        inner = layout.forward(bnode, [x, arrays[0], np.float64(0.0)] + arrays[2:],
                               Context(False, np.float64))[0][0]
        got = inner
    assert abs((dy * got).sum() - (dx * x).sum()) < 1e-9

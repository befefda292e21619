"""Softmax, LogSoftmax (opset semantics), LayerNormalization and the Reduce ops on the native
device against the float64 numpy engine, and the numpy engine against literal values and torch.

Each GPU case puts the op inside a small graph (a Gemm or 1x1 Conv before it, so its input
gradient is exercised; Flatten + Gemm + LogSoftmax after it), runs one training step and
compares the loss, the activations, the gradients of the op's input and output and every
parameter gradient with ``compare`` (tolerances of conftest).
"""

import numpy as np
import pytest
import reference as ref
from conftest import (
    build,
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
from webgpu_trainer.cpu import engine as cpu_engine
from webgpu_trainer.cpu.layernorm import layernorm, layernorm_backward
from webgpu_trainer.cpu.softmax import softmax, softmax_backward

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend

BATCH, CLASSES = 2, 3


def _oracle(monkeypatch, graph, tensors, x, labels):
    """The float64 numpy engine's step; the Context carries the graph's opset."""
    ctx_cls = type("OpsetContext", (cpu_engine.Context,), {"opset": graph.get("opset", 17)})
    monkeypatch.setattr(cpu_engine, "Context", ctx_cls)
    return ref.graph_step(graph, params_of(tensors), x, labels)


def _shape_const(name, shape):
    return {name: {"dtype": "int64", "shape": [len(shape)], "values": list(shape)}}


def _gemm_to(rng, shape, features=5, name="h", integer=False, gain=1.0):
    """input [N, features] -> Gemm -> Reshape to [N] + shape: (nodes, tensors, constants).
    ``integer``: weights in {-1, 0, 1}, so an integer input gives exact (tied) integers."""
    n = int(np.prod(shape))
    nodes = [node("Gemm", ["input", "pre.w", "pre.b"], ["pre"], transB=1),
             node("Reshape", ["pre", "shape"], [name])]
    if integer:
        w, b = rng.integers(-1, 2, (n, features)), rng.integers(-1, 2, n)
    else:
        w = rng.standard_normal((n, features)) / np.sqrt(features) * 2 * gain
        b = rng.standard_normal(n) * 0.3 * gain
    tensors = [("pre.w", f32(w), "param"), ("pre.b", f32(b), "param")]
    return nodes, tensors, _shape_const("shape", [-1] + list(shape))


def _finish(rng, nodes, tensors, out_name, out_shape, features=5, consts=None, opset=17):
    """... -> Flatten -> Gemm -> LogSoftmax: (graph, blob, all nodes, all tensors)."""
    nodes = nodes + [node("Flatten", [out_name], ["flat"], axis=1)]
    hn, ht = head("flat", int(np.prod(out_shape)), CLASSES, rng)
    graph, blob = make_graph(nodes + hn, tensors + ht, [("input", ["N", features])],
                             [("output", ["N", CLASSES])], constants=consts)
    graph["opset"] = opset
    return graph, blob, nodes + hn, tensors + ht


def _data(rng, features=5):
    return f32(rng.standard_normal((BATCH, features))), rng.integers(0, CLASSES, BATCH)


# ---- Softmax ------------------------------------------------------------------------------

SOFTMAX_NCHW = {
    # id: (C, H, W, axis); rows of >= 32 values (or few rows) take the workgroup-per-row path
    "axis1_c7": (7, 3, 5, 1),
    "axis1_c33_wg": (33, 2, 2, 1),
    "axis1_c1": (1, 2, 3, 1),
    "axis2_h7": (4, 7, 3, 2),
    "axis-1_w5": (5, 3, 7, -1),
    "axis-1_w260_wg": (3, 2, 260, -1),
    "axis-1_w4096_wg": (1, 1, 4096, -1),
}


@pytest.mark.parametrize("case", list(SOFTMAX_NCHW))
def test_softmax_nchw(device, monkeypatch, case):
    """1x1 Conv -> Softmax(axis) on [N, C, H, W] -> Flatten -> Gemm -> LogSoftmax."""
    c, h, w, axis = SOFTMAX_NCHW[case]
    rng = rng_for("softmax", case)
    # A conv bias is constant along H and W: softmax over those axes is blind to it (an exactly
    # zero gradient, only rounding noise on the GPU), so only axis 1 gets one.
    bias = ["cb"] if axis == 1 else []
    nodes = [node("Conv", ["input", "cw"] + bias, ["conv"], kernel_shape=[1, 1],
                  pads=[0, 0, 0, 0], strides=[1, 1], dilations=[1, 1], group=1),
             node("Softmax", ["conv"], ["sm"], axis=axis)]
    tensors = [("cw", f32(rng.standard_normal((c, c, 1, 1)) * 1.5), "param")]
    if bias:
        tensors.append(("cb", f32(rng.standard_normal(c) * 0.3), "param"))
    nodes = nodes + [node("Flatten", ["sm"], ["flat"], axis=1)]
    hn, ht = head("flat", c * h * w, CLASSES, rng)
    graph, blob = make_graph(nodes + hn, tensors + ht, [("input", ["N", c, h, w])],
                             [("output", ["N", CLASSES])])
    x = f32(rng.standard_normal((BATCH, c, h, w)))
    labels = rng.integers(0, CLASSES, BATCH)
    res = run(one_step(device, graph, blob, x, labels))
    want = _oracle(monkeypatch, graph, tensors + ht, x, labels)
    compare("Softmax", res, want, acts=["conv", "sm"], dacts=["conv", "sm"])
    assert np.allclose(res["acts"]["sm"].sum(axis=axis), 1.0, atol=1e-5)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,axis", [(11, 1), (13, 1), (11, None), (12, 2), (13, None)])
def test_softmax_opset_semantics(device, monkeypatch, op, opset, axis):
    """[N, 3, 4]: opset < 13 normalises over the flattened block from `axis` (default 1),
    opset >= 13 along `axis` alone (default -1)."""
    rng = rng_for("softmax_opset", op, opset, axis)
    nodes, tensors, consts = _gemm_to(rng, [3, 4])
    attrs = {} if axis is None else {"axis": axis}
    nodes.append(node(op, ["h"], ["sm"], **attrs))
    graph, blob, nodes, tensors = _finish(rng, nodes, tensors, "sm", [3, 4], consts=consts,
                                          opset=opset)
    x, labels = _data(rng)
    res = run(one_step(device, graph, blob, x, labels))
    want = _oracle(monkeypatch, graph, tensors, x, labels)
    compare(op, res, want, acts=["h", "sm"], dacts=["h", "sm"])
    y = res["acts"]["sm"].astype(np.float64)
    p = np.exp(y) if op == "LogSoftmax" else y
    over = {(11, 1): (1, 2), (13, 1): (1,), (11, None): (1, 2), (12, 2): (2,),
            (13, None): (2,)}[(opset, axis)]
    assert np.allclose(p.sum(axis=over), 1.0, atol=1e-5)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_opset11_long_rows(device, monkeypatch, op):
    """opset 11, axis 1 of [N, 4, 70]: rows of 280 values (workgroup per row)."""
    rng = rng_for("softmax_long", op)
    nodes, tensors, consts = _gemm_to(rng, [4, 70])
    nodes.append(node(op, ["h"], ["sm"], axis=1))
    graph, blob, nodes, tensors = _finish(rng, nodes, tensors, "sm", [4, 70], consts=consts,
                                          opset=11)
    x, labels = _data(rng)
    res = run(one_step(device, graph, blob, x, labels))
    want = _oracle(monkeypatch, graph, tensors, x, labels)
    compare(op, res, want, acts=["h", "sm"], dacts=["h", "sm"])


def test_log_softmax_head_long_rows(device, monkeypatch):
    """A final LogSoftmax over 300 classes (the workgroup path feeding the NLL loss)."""
    rng = rng_for("lsm_long")
    classes, features = 300, 7
    nodes = [node("Gemm", ["input", "w", "b"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("w", f32(rng.standard_normal((classes, features)) * 2), "param"),
               ("b", f32(rng.standard_normal(classes)), "param")]
    graph, blob = make_graph(nodes, tensors, [("input", ["N", features])],
                             [("output", ["N", classes])])
    x = f32(rng.standard_normal((4, features)))
    labels = rng.integers(0, classes, 4)
    res = run(one_step(device, graph, blob, x, labels))
    want = _oracle(monkeypatch, graph, tensors, x, labels)
    compare("LogSoftmax", res, want, acts=["logits"], dacts=["logits", "output"])


# ---- LayerNormalization -------------------------------------------------------------------

@pytest.mark.parametrize("size", [1, 7, 33, 260])
@pytest.mark.parametrize("last", [1, 2])
def test_layernorm(device, monkeypatch, size, last):
    """Gemm -> Reshape [N, 2, 3, size] -> LayerNorm over the last 1 or 2 dims."""
    rng = rng_for("layernorm", size, last)
    shape = [2, 3, size]
    norm = shape[-last:]
    nodes, tensors, consts = _gemm_to(rng, shape)
    tensors += [("ln.g", f32(1 + 0.3 * rng.standard_normal(norm)), "param"),
                ("ln.b", f32(0.3 * rng.standard_normal(norm)), "param")]
    nodes.append(node("LayerNormalization", ["h", "ln.g", "ln.b"], ["ln"], axis=-last,
                      epsilon=1e-5))
    graph, blob, nodes, tensors = _finish(rng, nodes, tensors, "ln", shape, consts=consts)
    x, labels = _data(rng)
    res = run(one_step(device, graph, blob, x, labels))
    want = _oracle(monkeypatch, graph, tensors, x, labels)
    compare("LayerNormalization", res, want, acts=["h", "ln"], dacts=["h", "ln"])


@pytest.mark.parametrize("case", ["stats_no_bias", "scale_broadcast", "many_rows",
                                  "many_rows_broadcast", "frozen_scale", "row4096"])
def test_layernorm_variants(device, monkeypatch, case):
    """Mean / InvStdDev outputs without B; Scale / B of the last dim over 2 normalised dims
    (the gradient sums fold); many rows (the parameter gradients in several parts); a frozen
    Scale (role buffer) with a trained B; rows of 4096 values."""
    rng = rng_for("layernorm_var", case)
    shape = {"stats_no_bias": [3, 7], "scale_broadcast": [5, 33], "many_rows": [64, 7],
             "many_rows_broadcast": [64, 2, 3], "frozen_scale": [3, 40],
             "row4096": [1, 4096]}[case]
    axis = -2 if case in ("scale_broadcast", "many_rows_broadcast") else -1
    pshape = shape[-1:]
    nodes, tensors, consts = _gemm_to(rng, shape)
    tensors.append(("ln.g", f32(1 + 0.3 * rng.standard_normal(pshape)),
                    "buffer" if case == "frozen_scale" else "param"))
    inputs = ["h", "ln.g"]
    outputs = ["ln"]
    if case == "stats_no_bias":
        outputs += ["ln_mean", "ln_inv"]
    else:
        tensors.append(("ln.b", f32(0.3 * rng.standard_normal(pshape)), "param"))
        inputs.append("ln.b")
    nodes.append(node("LayerNormalization", inputs, outputs, axis=axis, epsilon=1e-3))
    graph, blob, nodes, tensors = _finish(rng, nodes, tensors, "ln", shape, consts=consts)
    x, labels = _data(rng)
    x *= 3
    res = run(one_step(device, graph, blob, x, labels))
    want = _oracle(monkeypatch, graph, tensors, x, labels)
    acts = ["h", "ln"] + (["ln_mean", "ln_inv"] if case == "stats_no_bias" else [])
    compare("LayerNormalization", res, want, acts=acts, dacts=["h", "ln"])
    if case == "stats_no_bias":
        assert res["acts"]["ln_mean"].shape == (BATCH, shape[0], 1)
        assert res["acts"]["ln_inv"].shape == (BATCH, shape[0], 1)


# ---- Reduce -------------------------------------------------------------------------------

REDUCE_AXES = {
    # id: (axes, keepdims, as_input)   on [N, 3, 4, 5]
    "a1_keep": ([1], 1, False),
    "a23_drop": ([2, 3], 0, False),
    "a13_keep": ([1, 3], 1, False),
    "a-1_drop_input": ([-1], 0, True),
    "a123_keep_wg": ([1, 2, 3], 1, False),
    "a2_drop_input": ([2], 0, True),
}


def _reduce_shape(shape, axes, keep):
    axes = [a % len(shape) for a in axes]
    return [1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes]


@pytest.mark.parametrize("case", list(REDUCE_AXES))
@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"])
def test_reduce(device, monkeypatch, op, case):
    """Gemm -> Reshape [N, 3, 4, 5] -> Reduce(axes, keepdims) -> Flatten -> Gemm."""
    axes, keep, as_input = REDUCE_AXES[case]
    rng = rng_for("reduce", op, case)
    shape = [3, 4, 5]
    # sums of many values: smaller inputs keep the logits (and the loss) moderate
    count = np.prod([shape[a % 4 - 1] for a in axes])
    nodes, tensors, consts = _gemm_to(rng, shape,
                                      gain=0.3 / np.sqrt(count) if op == "ReduceSum" else 1.0)
    if as_input:
        consts["axes"] = {"dtype": "int64", "shape": [len(axes)], "values": list(axes)}
        nodes.append(node(op, ["h", "axes"], ["r"], keepdims=keep))
    else:
        nodes.append(node(op, ["h"], ["r"], axes=axes, keepdims=keep))
    out_shape = _reduce_shape([BATCH] + shape, axes, keep)[1:]
    graph, blob, nodes, tensors = _finish(rng, nodes, tensors, "r", out_shape, consts=consts)
    x, labels = _data(rng)
    res = run(one_step(device, graph, blob, x, labels))
    assert list(res["acts"]["r"].shape) == [BATCH] + out_shape
    want = _oracle(monkeypatch, graph, tensors, x, labels)
    compare(op, res, want, acts=["h", "r"], dacts=["h", "r"])


@pytest.mark.parametrize("axes", [[3], [1, 2, 3]])
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_reduce_ties(device, monkeypatch, op, axes):
    """Small integers (exact in float32 and float64) give tied extremes: the gradient is split
    evenly among the ties (torch.amax / amin)."""
    rng = rng_for("reduce_ties", op, len(axes))
    shape = [3, 4, 5]
    nodes, tensors, consts = _gemm_to(rng, shape, integer=True)
    nodes.append(node(op, ["h"], ["r"], axes=axes, keepdims=1))
    out_shape = _reduce_shape([BATCH] + shape, axes, 1)[1:]
    graph, blob, nodes, tensors = _finish(rng, nodes, tensors, "r", out_shape, consts=consts)
    x = f32(rng.integers(-1, 2, (BATCH, 5)))
    labels = rng.integers(0, CLASSES, BATCH)
    res = run(one_step(device, graph, blob, x, labels))
    want = _oracle(monkeypatch, graph, tensors, x, labels)
    h = want["acts"]["h"]
    extreme = h.max(axis=tuple(axes), keepdims=True) if op == "ReduceMax" else \
        h.min(axis=tuple(axes), keepdims=True)
    ties = (h == extreme).sum(axis=tuple(axes))
    assert ties.max() > 1, "the case has ties"
    compare(op, res, want, acts=["r"], dacts=["h", "r"])


@pytest.mark.parametrize("case", ["batch_axis", "all_scalar", "noop_empty"])
def test_reduce_special(device, monkeypatch, case):
    """ReduceMean over the batch axis 0 ([N, 7] -> [1, 7], mixed back by a Gemm with a [N, 1]
    parameter); ReduceSum of everything with keepdims 0 (a scalar, reshaped to [1, 1]);
    ReduceSum with empty axes and noop_with_empty_axes (the identity)."""
    rng = rng_for("reduce_special", case)
    f = 7
    nodes = [node("Gemm", ["input", "pre.w", "pre.b"], ["h"], transB=1)]
    tensors = [("pre.w", f32(rng.standard_normal((f, 5))), "param"),
               ("pre.b", f32(rng.standard_normal(f) * 0.3), "param")]
    consts = {}
    if case == "batch_axis":
        nodes += [node("ReduceMean", ["h"], ["r"], axes=[0], keepdims=1),
                  node("Gemm", ["mix", "r"], ["out"])]
        tensors.append(("mix", f32(rng.standard_normal((BATCH, 1))), "param"))
        out_shape = [f]
    elif case == "all_scalar":
        consts = _shape_const("shape", [1, 1])
        nodes += [node("ReduceSum", ["h"], ["r"], keepdims=0),
                  node("Reshape", ["r", "shape"], ["r2"]),
                  node("Gemm", ["mix", "r2"], ["m"]),
                  node("Gemm", ["m", "w2"], ["out"])]
        tensors += [("mix", f32(rng.standard_normal((BATCH, 1))), "param"),
                    ("w2", f32(rng.standard_normal((1, 4))), "param")]
        out_shape = [4]
    else:
        consts = {"axes": {"dtype": "int64", "shape": [0], "values": []}}
        nodes += [node("ReduceSum", ["h", "axes"], ["out"], keepdims=1, noop_with_empty_axes=1)]
        out_shape = [f]
    graph, blob, nodes, tensors = _finish(rng, nodes, tensors, "out", out_shape, consts=consts)
    x, labels = _data(rng)
    res = run(one_step(device, graph, blob, x, labels))
    want = _oracle(monkeypatch, graph, tensors, x, labels)
    if case == "all_scalar":
        assert res["acts"]["r"].shape == ()
        assert np.isclose(want["acts"]["r"], want["acts"]["h"].sum())
    if case == "noop_empty":
        assert np.array_equal(res["acts"]["out"], res["acts"]["h"])
    compare(graph["nodes"][1]["op_type"], res, want, acts=["h", "out"], dacts=["h"])


# ---- the numpy engine against literal values and torch ------------------------------------

def _cpu_node(op, **attrs):
    return node(op, ["x"], ["y"], **attrs)


def _cpu_forward(n, x, *params, opset=17):
    from webgpu_trainer.cpu import KERNELS
    ctx = cpu_engine.Context(False, np.float64)
    ctx.opset = opset
    ins = [np.asarray(x, np.float64)] + [np.asarray(p, np.float64) for p in params]
    outs, cache = KERNELS[n["op_type"]].forward(n, ins, ctx)
    return outs, cache, ins, ctx


def test_cpu_literals():
    """Values computed by hand."""
    outs, *_ = _cpu_forward(_cpu_node("Softmax", axis=-1), [[1.0, 2.0, 3.0]])
    assert np.allclose(outs[0], [[0.09003057317038046, 0.24472847105479767,
                                  0.6652409557748219]], rtol=1e-12)
    # opset 11: [1, 2, 2] at axis 1 normalises over all 4 values; opset 13 over axis 1 alone
    x = [[[0.0, 0.0], [0.0, np.log(2.0)]]]
    outs, *_ = _cpu_forward(_cpu_node("Softmax", axis=1), x, opset=11)
    assert np.allclose(outs[0], [[[0.2, 0.2], [0.2, 0.4]]], rtol=1e-12)
    outs, *_ = _cpu_forward(_cpu_node("Softmax", axis=1), x, opset=13)
    assert np.allclose(outs[0], [[[0.5, 1 / 3], [0.5, 2 / 3]]], rtol=1e-12)
    outs, *_ = _cpu_forward(_cpu_node("Softmax"), x, opset=11)  # default axis 1
    assert np.allclose(outs[0], [[[0.2, 0.2], [0.2, 0.4]]], rtol=1e-12)
    # softmax backward: y = [0.5, 0.5], dy = [1, 0] -> dx = y * (dy - 0.5) = [0.25, -0.25]
    assert np.allclose(softmax_backward(np.array([0.5, 0.5]), np.array([1.0, 0.0])),
                       [0.25, -0.25])
    # LayerNorm of [1, 2, 3, 4]: mean 2.5, var 1.25
    n = node("LayerNormalization", ["x", "g", "b"], ["y", "m", "i"], axis=-1, epsilon=0.0)
    outs, *_ = _cpu_forward(n, [[1.0, 2.0, 3.0, 4.0]], [2.0, 2.0, 2.0, 2.0], [1.0, 0, 0, 0])
    s = np.sqrt(1.25)
    assert np.allclose(outs[0], [[-1.5 / s * 2 + 1, -0.5 / s * 2, 0.5 / s * 2, 1.5 / s * 2]])
    assert outs[1].shape == (1, 1) and outs[1][0, 0] == 2.5
    assert np.isclose(outs[2][0, 0], 1 / s)
    # ReduceMax of [[1, 3, 3], [2, 0, 1]] over axis 1: ties split the gradient
    from webgpu_trainer.cpu import KERNELS
    n = node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=0)
    x = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]])
    (y,), cache = KERNELS["ReduceMax"].forward(n, [x], None)
    assert np.array_equal(y, [3.0, 2.0])
    dx = KERNELS["ReduceMax"].backward(n, [x], [y], cache, [np.array([1.0, 4.0])], None)[0]
    assert np.array_equal(dx, [[0, 0.5, 0.5], [4.0, 0, 0]])
    n = node("ReduceMean", ["x"], ["y"], keepdims=1)  # no axes: all
    (y,), cache = KERNELS["ReduceMean"].forward(n, [x], None)
    assert y.shape == (1, 1) and y[0, 0] == 10 / 6


def test_cpu_against_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    t = lambda a: torch.tensor(a, dtype=torch.float64, requires_grad=True)
    # Softmax along axis 1 of NCHW
    x, dy = rng.standard_normal((2, 5, 3, 4)) * 3, rng.standard_normal((2, 5, 3, 4))
    xt = t(x)
    yt = F.softmax(xt, 1)
    yt.backward(torch.tensor(dy))
    y = softmax(x, 1)
    assert np.allclose(y, yt.detach().numpy(), rtol=1e-12)
    assert np.allclose(softmax_backward(y, dy, 1), xt.grad.numpy(), rtol=1e-10, atol=1e-14)
    # the engine's opset-11 Softmax == torch softmax of the 2-D coerced input
    outs, *_ = _cpu_forward(_cpu_node("Softmax", axis=1), x, opset=11)
    want = F.softmax(torch.tensor(x).reshape(2, -1), 1).reshape(x.shape).numpy()
    assert np.allclose(outs[0], want, rtol=1e-12)
    # LayerNorm over the last 2 dims, Scale / B of the normalised shape
    x = rng.standard_normal((3, 4, 5, 6)) * 2 + 1
    g, b = rng.standard_normal((5, 6)), rng.standard_normal((5, 6))
    dy = rng.standard_normal(x.shape)
    xt, gt, bt = t(x), t(g), t(b)
    yt = F.layer_norm(xt, (5, 6), gt, bt, 1e-5)
    yt.backward(torch.tensor(dy))
    y, mean, inv = layernorm(x, g, b, axis=-2, eps=1e-5)
    assert np.allclose(y, yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    _, tm, tr = torch.native_layer_norm(torch.tensor(x), [5, 6], torch.tensor(g),
                                        torch.tensor(b), 1e-5)
    assert np.allclose(mean, tm.numpy()) and np.allclose(inv, tr.numpy())
    for got, want in zip(layernorm_backward(x, g, dy, mean, inv, axis=-2),
                         (xt.grad, gt.grad, bt.grad)):
        assert np.allclose(got, want.numpy(), rtol=1e-10, atol=1e-12)
    # ReduceMax / ReduceMin with ties = torch.amax / amin (gradient split evenly)
    from webgpu_trainer.cpu import KERNELS
    x = np.maximum(rng.standard_normal((3, 4, 5)), 0)
    for op, f in (("ReduceMax", torch.amax), ("ReduceMin", torch.amin)):
        n = node(op, ["x"], ["y"], axes=[0, 2], keepdims=0)
        (y,), cache = KERNELS[op].forward(n, [x], None)
        dy = rng.standard_normal(y.shape)
        xt = t(x)
        yt = f(xt, dim=(0, 2))
        yt.backward(torch.tensor(dy))
        dx = KERNELS[op].backward(n, [x], [y], cache, [dy], None)[0]
        assert np.allclose(y, yt.detach().numpy())
        assert np.allclose(dx, xt.grad.numpy(), rtol=1e-12)


# ---- what is refused ----------------------------------------------------------------------

def test_refused_shapes(device):
    """GraphError for a non-constant axes input and a Scale that is not (a trailing part of)
    the normalised shape; NotImplementedError for axes that split the tensor into more than 3
    runs of reduced dims."""
    from webgpu_trainer.engine.graph import Graph, GraphError
    rng = rng_for("refused")
    nodes, tensors, consts = _gemm_to(rng, [3, 4])
    bad_axes = nodes + [node("ReduceSum", ["h", "pre"], ["r"])]
    graph, _ = make_graph(bad_axes, tensors, [("input", ["N", 5])], [("r", ["N", 1])],
                          constants=consts)
    with pytest.raises(GraphError, match="axes input 'pre' is not a constant"):
        Graph(graph).shapes(2)
    ln = nodes + [node("LayerNormalization", ["h", "g"], ["y"], axis=-1)]
    graph, _ = make_graph(ln, tensors + [("g", f32(np.ones((3, 1))), "param")],
                          [("input", ["N", 5])], [("y", ["N", 3, 4])], constants=consts)
    with pytest.raises(GraphError, match="Scale of shape \\[3, 1\\] is not the normalised"):
        Graph(graph).shapes(2)
    nodes, tensors, consts = _gemm_to(rng, [2] * 7)
    nodes.append(node("ReduceMax", ["h"], ["r"], axes=[1, 3, 5, 7], keepdims=0))
    graph, blob, _, _ = _finish(rng, nodes, tensors, "r", [2] * 3, consts=consts)
    with pytest.raises(NotImplementedError, match="more than 3 runs"):
        run(build(device, graph, blob, 2))

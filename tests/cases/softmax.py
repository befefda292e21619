"""Softmax and LogSoftmax (ops/softmax.py, shaders/softmax.wgsl): along any axis of NCHW, rows
long enough for the workgroup-per-row path, the opset < 13 semantics (normalise the flattened
block from ``axis``), and the final LogSoftmax that feeds the NLL loss."""

import numpy as np

from cases import case
from cases.blocks import flat_head_case, gemm_to
from conftest import f32, head, node, rng_for

BATCH, CLASSES = 2, 3

NCHW = {
    # id: (C, H, W, axis); rows of >= 32 values (or few rows) take the workgroup-per-row path
    "axis1_c7": (7, 3, 5, 1),
    "axis1_c33_wg": (33, 2, 2, 1),
    "axis1_c1": (1, 2, 3, 1),
    "axis2_h7": (4, 7, 3, 2),
    "axis-1_w5": (5, 3, 7, -1),
    "axis-1_w260_wg": (3, 2, 260, -1),
    "axis-1_w4096_wg": (1, 1, 4096, -1),
}


def sums_to_one(name, over, log=False):
    def check(res, want):
        y = res["acts"][name].astype(np.float64)
        p = np.exp(y) if log else y
        assert np.allclose(p.sum(axis=over), 1.0, atol=1e-5)
    return check


def _nchw(name):
    """1x1 Conv -> Softmax(axis) on [N, C, H, W] -> Flatten -> Gemm -> LogSoftmax."""
    c, h, w, axis = NCHW[name]
    rng = rng_for("softmax", name)
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
    x = f32(rng.standard_normal((BATCH, c, h, w)))
    labels = rng.integers(0, CLASSES, BATCH)
    return case(f"softmax/nchw_{name}", nodes + hn, tensors + ht, x, labels, tag="Softmax",
                acts=("conv", "sm"), dacts=("conv", "sm"), checks=(sums_to_one("sm", axis),))


OPSET = {(11, 1): (1, 2), (13, 1): (1,), (11, None): (1, 2), (12, 2): (2,), (13, None): (2,)}


def _opset(op, opset, axis):
    """[N, 3, 4]: opset < 13 normalises over the flattened block from `axis` (default 1),
    opset >= 13 along `axis` alone (default -1)."""
    rng = rng_for("softmax_opset", op, opset, axis)
    nodes, tensors, consts = gemm_to(rng, [3, 4])
    attrs = {} if axis is None else {"axis": axis}
    nodes.append(node(op, ["h"], ["sm"], **attrs))
    return flat_head_case(f"softmax/{op}_opset{opset}_axis{axis}", rng, nodes, tensors, consts,
                      "sm", [3, 4], opset=opset, tag=op, acts=("h", "sm"), dacts=("h", "sm"),
                      checks=(sums_to_one("sm", OPSET[(opset, axis)], op == "LogSoftmax"),))


def _opset11_long_rows(op):
    """opset 11, axis 1 of [N, 4, 70]: rows of 280 values (workgroup per row)."""
    rng = rng_for("softmax_long", op)
    nodes, tensors, consts = gemm_to(rng, [4, 70])
    nodes.append(node(op, ["h"], ["sm"], axis=1))
    return flat_head_case(f"softmax/{op}_opset11_long_rows", rng, nodes, tensors, consts, "sm",
                      [4, 70], opset=11, tag=op, acts=("h", "sm"), dacts=("h", "sm"))


def _head_long_rows():
    """A final LogSoftmax over 300 classes (the workgroup path feeding the NLL loss)."""
    rng = rng_for("lsm_long")
    classes, features = 300, 7
    nodes = [node("Gemm", ["input", "w", "b"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("w", f32(rng.standard_normal((classes, features)) * 2), "param"),
               ("b", f32(rng.standard_normal(classes)), "param")]
    x = f32(rng.standard_normal((4, features)))
    labels = rng.integers(0, classes, 4)
    return case("softmax/log_softmax_head_300", nodes, tensors, x, labels, tag="LogSoftmax",
                acts=("logits",), dacts=("logits", "output"))


def _some_correct(res, want):
    assert 0.0 < want["acc"] <= 1.0


def _log_softmax_nll(batch, features, classes, scale):
    rng = rng_for("lsm", batch, classes)
    w = f32(rng.standard_normal((classes, features)) * scale)
    b = f32(rng.standard_normal(classes))
    nodes = [node("Gemm", ["input", "w", "b"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("w", w, "param"), ("b", b, "param")]
    x = f32(rng.standard_normal((batch, features)))
    # labels: the argmax for about half the samples, so the accuracy is neither 0 nor 1
    logits = x.astype(np.float64) @ w.T + b
    labels = np.where(np.arange(batch) % 2 == 0, logits.argmax(1),
                      rng.integers(0, classes, batch))
    return case(f"softmax/log_softmax_nll_{batch}x{classes}", nodes, tensors, x, labels,
                tag="LogSoftmax+NLL", acts=("logits",), dacts=("logits", "output"),
                checks=(_some_correct, sums_to_one("output", 1, log=True)))


NLL = [_log_softmax_nll(*a) for a in [(4, 5, 10, 1.0), (3, 4, 70, 5.0), (300, 3, 7, 3.0),
                                      (2, 3, 2, 20.0)]]
CASES = [_nchw(name) for name in NCHW] + \
    [_opset(op, opset, axis) for op in ("Softmax", "LogSoftmax")
     for opset, axis in [(11, 1), (13, 1), (11, None), (12, 2), (13, None)]] + \
    [_opset11_long_rows(op) for op in ("Softmax", "LogSoftmax")] + [_head_long_rows()] + NLL

"""Gemm (ops/gemm.py, shaders/gemm.wgsl): transA / transB, alpha / beta, C of every broadcast
shape (row, full, per-row column, scalar, absent, frozen), sizes 1 / 7 / 33 / 70 / 260, and
weight gradients summed over a batch of 300 rows (the GPU self-check's case of
``matmul_kpar_t``)."""

import numpy as np

from cases import case
from conftest import f32, node, rng_for


def _linear(features, out, trans_b):
    """input -> Gemm(pre, Linear) -> Gemm(tested) -> LogSoftmax: dA, dB, dC of the tested
    one."""
    batch = 4
    rng = rng_for("gemm", features, out, trans_b)
    pre_w = f32(rng.standard_normal((features, features)) / np.sqrt(features))
    pre_b = f32(rng.standard_normal(features) * 0.1)
    wshape = (out, features) if trans_b else (features, out)
    w = f32(rng.standard_normal(wshape) / np.sqrt(features))
    b = f32(rng.standard_normal(out) * 0.1)
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, out, batch)
    nodes = [node("Gemm", ["input", "pre.w", "pre.b"], ["h"], transB=1),
             node("Gemm", ["h", "w", "b"], ["logits"], transB=trans_b),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("pre.w", pre_w, "param"), ("pre.b", pre_b, "param"), ("w", w, "param"),
               ("b", b, "param")]
    return case(f"gemm/linear_{features}x{out}_transB{trans_b}", nodes, tensors, x, labels,
                tag="Gemm", acts=("h", "logits"), dacts=("h", "logits"))


def _trans_a():
    """Gemm(A = parameter, B = activation) -> [H, N]; then Gemm(transA=1) consumes [H, N]."""
    batch, features, hidden, classes = 4, 7, 33, 10
    rng = rng_for("gemm_ta")
    w1 = f32(rng.standard_normal((hidden, features)) / np.sqrt(features))
    c1 = f32(rng.standard_normal((hidden, 1)) * 0.1)   # C of shape [M, 1]: bias per row
    w2 = f32(rng.standard_normal((hidden, classes)) / np.sqrt(hidden))
    b2 = f32(rng.standard_normal(classes) * 0.1)
    x = f32(rng.standard_normal((features, batch)))     # input laid out [F, N]
    labels = rng.integers(0, classes, batch)
    nodes = [node("Gemm", ["w1", "input", "c1"], ["h"]),
             node("Gemm", ["h", "w2", "b2"], ["logits"], transA=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("w1", w1, "param"), ("c1", c1, "param"), ("w2", w2, "param"),
               ("b2", b2, "param")]
    return case("gemm/trans_a", nodes, tensors, x, labels, input_dims=[features, "N"],
                tag="Gemm", acts=("h",), dacts=("h", "logits"))


def _alpha(c_shape):
    """alpha = 0.5, beta = 1, C as [N] (row), [M, N] (full) or absent."""
    batch, features, classes = 4, 33, 7
    rng = rng_for("gemm_alpha", c_shape)
    pre_w = f32(rng.standard_normal((features, features)) / np.sqrt(features))
    w = f32(rng.standard_normal((classes, features)) / np.sqrt(features))
    c = {"row": (classes,), "full": (batch, classes), "none": None}[c_shape]
    tensors = [("pre.w", pre_w, "param"), ("w", w, "param")]
    if c is not None:
        tensors.append(("c", f32(rng.standard_normal(c)), "param"))
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)
    nodes = [node("Gemm", ["input", "pre.w"], ["h"], transB=1),
             node("Gemm", ["h", "w"] + (["c"] if c else []), ["logits"], transB=1, alpha=0.5,
                  beta=1.0),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    return case(f"gemm/alpha_c_{c_shape}", nodes, tensors, x, labels, tag="Gemm",
                acts=("h", "logits"), dacts=("h",))


def _beta_frozen_c():
    """beta != 1 with a frozen C (role buffer): forward and the other gradients."""
    batch, features, classes = 4, 7, 5
    rng = rng_for("gemm_beta")
    w = f32(rng.standard_normal((classes, features)))
    cb = f32(rng.standard_normal(classes))
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)
    nodes = [node("Gemm", ["input", "w", "c"], ["logits"], transB=1, alpha=0.25, beta=0.5),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("w", w, "param"), ("c", cb, "buffer")]
    return case("gemm/beta_frozen_c", nodes, tensors, x, labels, tag="Gemm", acts=("logits",))


def _c_column_square(c_shape):
    """A per-row or scalar C right before LogSoftmax has an exactly zero gradient, so a hidden
    layer (M == N == 4) and a ReLU make C matter."""
    batch, features, hidden, classes = 4, 5, 4, 3
    rng = rng_for("gemm_col", c_shape)
    nodes = [node("Gemm", ["input", "w", "c"], ["h"], transB=1),
             node("Relu", ["h"], ["r"]),
             node("Gemm", ["r", "w2"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("w", f32(rng.standard_normal((hidden, features))), "param"),
               ("c", f32(rng.standard_normal(c_shape)), "param"),
               ("w2", f32(rng.standard_normal((classes, hidden))), "param")]
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)
    name = "c_column" if c_shape == (4, 1) else "c_scalar"
    # h is overwritten by the in-place ReLU: compare the logits
    return case(f"gemm/{name}_square", nodes, tensors, x, labels, tag="Gemm", acts=("logits",))


def two_layers(id, rng, batch, features, hidden, classes, **opts):
    """input [batch, features] -> Gemm(features -> hidden, bias) -> Relu -> Gemm(hidden ->
    classes, bias) -> LogSoftmax, weights and data drawn from ``rng`` (w, b, w2, b2, x,
    labels, in that order)."""
    w = f32(rng.standard_normal((hidden, features)) / np.sqrt(features))
    b = f32(rng.standard_normal(hidden) * 0.1)
    w2 = f32(rng.standard_normal((classes, hidden)) / np.sqrt(hidden))
    b2 = f32(rng.standard_normal(classes) * 0.1)
    nodes = [node("Gemm", ["input", "w", "b"], ["h"], transB=1),
             node("Relu", ["h"], ["r"]),
             node("Gemm", ["r", "w2", "b2"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("w", w, "param"), ("b", b, "param"), ("w2", w2, "param"), ("b2", b2, "param")]
    x = f32(rng.standard_normal((batch, features)))
    return case(id, nodes, tensors, x, rng.integers(0, classes, batch), tag="Gemm",
                acts=("r", "logits"), dacts=("h", "logits"), **opts)


def _weight_grads_over_rows(batch=300, features=8, hidden=12, classes=3):
    """``two_layers`` over 300 rows, 8 -> 12 -> 3: the weight gradients dY^T X sum over the
    batch's 300 rows (k strided; 300 > 256, not a multiple of the lanes). On GPU adapters
    (Builder.TILED) ops/gemm.kpar_lanes gives both ``matmul_kpar_t`` with 64 lanes along the
    rows and the bias gradient summed beside (gemm.wgsl BSUM): the hidden Linear's [12, 8]
    (6 blocks, 2 workgroups) with vec4 loads of dY and X (KVEC 3: in and out features
    multiples of 4), the head's [3, 12] with those of X only (KVEC 2). The GPU self-check's
    case of that kernel (CPU adapters run ``matmul``)."""
    return two_layers(f"gemm/weight_grads_over_{batch}_rows", rng_for("gemm_rows", batch), batch,
                      features, hidden, classes, selfcheck=True)


LINEAR = [_linear(f, o, t) for f, o in [(1, 7), (7, 33), (33, 70), (70, 7), (33, 1), (260, 5)]
          for t in (1, 0)]
CASES = LINEAR + [_trans_a()] + [_alpha(c) for c in ("row", "full", "none")] + \
    [_beta_frozen_c(), _c_column_square((4, 1)), _c_column_square((1,)),
     _weight_grads_over_rows()]

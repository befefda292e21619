"""Model pieces the case lists share: what feeds the tested op (so its input gradient flows
into a layer with parameters) and what follows it (a head, so the loss depends on every
output element)."""

import numpy as np

from cases import case
from conftest import f32, head, node


def shape_const(shape):
    return {"dtype": "int64", "shape": [len(shape)], "values": list(shape)}


def gemm_to(rng, shape, features=5, name="h", integer=False, gain=1.0):
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
    return nodes, tensors, {"shape": shape_const([-1] + list(shape))}


def conv_pre(c, rng, out="h"):
    """input [N, c, H, W] -> 1x1 Conv -> ``out``: (nodes, tensors)."""
    w = f32(rng.standard_normal((c, c, 1, 1)) / np.sqrt(c))
    b = f32(rng.standard_normal(c) * 0.1)
    nodes = [node("Conv", ["input", "pre.w", "pre.b"], [out], kernel_shape=[1, 1],
                  pads=[0, 0, 0, 0], strides=[1, 1], dilations=[1, 1], group=1)]
    return nodes, [("pre.w", w, "param"), ("pre.b", b, "param")]


def gemm_pre(features, out_features, rng, out="h"):
    """input [N, features] -> Gemm(transB=1) -> ``out`` [N, out_features]: (nodes, tensors)."""
    w = f32(rng.standard_normal((out_features, features)) / np.sqrt(features))
    b = f32(rng.standard_normal(out_features) * 0.1)
    nodes = [node("Gemm", ["input", "pre.w", "pre.b"], [out], transB=1)]
    return nodes, [("pre.w", w, "param"), ("pre.b", b, "param")]


def head2(name, features, rng, positive=False, prefix="fc"):
    """Gemm(transB=1) -> LogSoftmax over 2 classes with weights (s, -s): the gradient reaching
    ``name`` is 2 s_f (p0 - e0), free of the cancellation a random head can produce in a tensor
    of one element (which the relative error would then measure). ``positive``: s > 0, so with
    every label 0 all those gradients are negative (sums of them cannot cancel)."""
    s = rng.uniform(0.05, 0.3, features)
    if not positive:
        s = s * rng.choice([-1.0, 1.0], features)
    w, b = f32(np.stack([s, -s])), f32(0.1 * rng.standard_normal(2))
    nodes = [node("Gemm", [name, f"{prefix}.w", f"{prefix}.b"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    return nodes, [(f"{prefix}.w", w, "param"), (f"{prefix}.b", b, "param")]


def chain(rng, id, c, hw, body, feat, extra=(), constants=None, opset=17, batch=4, classes=5,
          **opts):
    """input [N, c, hw, hw] -> 1x1 Conv "pre" (so the input gradient of ``body`` flows) ->
    ``body`` (nodes from "pre" to "body_out") -> Reshape [N, feat] -> Gemm -> LogSoftmax, the
    labels 0, 1, 2, ...: the composite cases (several ops of a family at once) that are also
    the GPU self-check's (``selfcheck``)."""
    x = rng.standard_normal((batch, c, hw, hw))
    nodes = [node("Conv", ["input", "pre.w", "pre.b"], ["pre"], kernel_shape=[1, 1],
                  pads=[0, 0, 0, 0], strides=[1, 1], dilations=[1, 1], group=1)] + body + [
        node("Reshape", ["body_out", "flat_shape"], ["flat"])]
    hn, ht = head("flat", feat, classes, rng)
    tensors = [("pre.w", f32(rng.standard_normal((c, c, 1, 1)) / np.sqrt(c)), "param"),
               ("pre.b", f32(rng.standard_normal(c) * 0.1), "param")] + list(extra) + ht
    consts = {"flat_shape": shape_const([0, -1]), **(constants or {})}
    opts.setdefault("selfcheck", True)  # the composites are the GPU self-check's op cases
    return case(id, nodes + hn, tensors, x, np.arange(batch) % classes, constants=consts,
                opset=opset, **opts)


def ints(*values):
    return {"dtype": "int64", "shape": [len(values)], "values": list(values)}


def floats(*values, shape=None):
    return {"dtype": "float32", "shape": [len(values)] if shape is None else shape,
            "values": list(values)}


def flat_head_case(id, rng, nodes, tensors, constants, out_name, out_shape, opset=17,
                   x_scale=1.0, batch=2, classes=3, features=5, x=None, **opts):
    """``nodes`` (on input [N, ``features``], e.g. ``gemm_to``'s, then the tested op writing
    ``out_name`` of shape [N] + ``out_shape``) -> Flatten -> Gemm -> LogSoftmax; the input
    ~ N(0, x_scale^2), or ``x(rng)`` drawn after the head."""
    nodes = nodes + [node("Flatten", [out_name], ["flat"], axis=1)]
    hn, ht = head("flat", int(np.prod(out_shape)), classes, rng)
    x = f32(rng.standard_normal((batch, features)) if x is None else x(rng))
    labels = rng.integers(0, classes, batch)
    return case(id, nodes + hn, tensors + ht, x * np.float32(x_scale), labels,
                constants=constants, opset=opset, **opts)

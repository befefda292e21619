"""LayerNormalization (ONNX opset 17): normalise over the dims axis..rank-1 (population
variance), Y = (X - mean) / sqrt(var + epsilon) * Scale + B; optional outputs Mean and InvStdDev
(X's shape with 1 on the normalised dims, no gradient). Backward: PyTorch's
native_layer_norm_backward (dX, dScale, dB; Scale / B reduced over their broadcast dims)."""

import numpy as np

from ..engine.ops.card import read
from ..engine.ops.layernorm import ATTRS
from .gemm import unbroadcast

TYPES = ("LayerNormalization",)


def layernorm(x, scale, bias=None, axis=-1, eps=1e-5):
    """(y, mean, inv_std) of ``x`` normalised over dims ``axis``.. (mean / inv_std keep dims)."""
    axis %= x.ndim
    red = tuple(range(axis, x.ndim))
    mean = x.mean(axis=red, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=red, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    y = (x - mean) * inv * scale
    if bias is not None:
        y = y + bias
    return y, mean, inv


def layernorm_backward(x, scale, dy, mean, inv, axis=-1, has_bias=True):
    """(dx, dscale, dbias): dx = inv * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale,
    xhat = (x - mean) * inv; dscale = sum(dy * xhat), dbias = sum(dy) over the broadcast dims."""
    axis %= x.ndim
    red = tuple(range(axis, x.ndim))
    xhat = (x - mean) * inv
    g = dy * scale
    dx = inv * (g - g.mean(axis=red, keepdims=True)
                - xhat * (g * xhat).mean(axis=red, keepdims=True))
    dscale = unbroadcast(dy * xhat, scale.shape)
    dbias = unbroadcast(dy, scale.shape) if has_bias else None
    return dx, dscale, dbias


def _attrs(node):
    a = read(node, ATTRS)
    return a["axis"], a["epsilon"]


def forward(node, ins, ctx):
    axis, eps = _attrs(node)
    bias = ins[2] if len(ins) > 2 else None
    y, mean, inv = layernorm(ins[0], ins[1], bias, axis, eps)
    return [y, mean, inv][:len(node["outputs"])], (mean, inv)


def backward(node, ins, outs, cache, douts, ctx):
    axis, _ = _attrs(node)
    mean, inv = cache
    has_bias = len(ins) > 2 and ins[2] is not None
    dx, ds, db = layernorm_backward(ins[0], ins[1], douts[0], mean, inv, axis, has_bias)
    if has_bias:
        db = db.reshape(ins[2].shape)
    return [dx, ds] + ([db] if len(ins) > 2 else [])

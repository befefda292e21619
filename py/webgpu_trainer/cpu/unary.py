"""Unary elementwise ops with numpy: LeakyRelu, Sigmoid, Tanh, Gelu, Erf, Exp, Log, Sqrt, Neg,
Abs, Reciprocal, Softplus, Softsign, Elu, Selu, Celu, Mish, HardSigmoid, HardSwish, Clip.

Forward from the ONNX operator definitions (attribute defaults of the ONNX spec), backward from
PyTorch's autograd formulas (tools/autograd/derivatives.yaml and the activation kernels):
masks at the kinks as torch (LeakyRelu / Elu / Selu / Celu take the negative slope at x = 0,
HardSigmoid passes strictly inside (0, 1), HardSwish x/3 + 1/2 on [-3, 3], Clip dy where
min <= x <= max).
erf / erfc come from ``math`` (correctly rounded to a few ulp in float64); Gelu's normal CDF is
erfc(-x/sqrt 2)/2, free of the cancellation of 1 + erf(x/sqrt 2) in the left tail.
"""

import math

import numpy as np

from ..engine.ops.card import read
from ..engine.ops.unary import ATTRS

TYPES = ("LeakyRelu", "Sigmoid", "Tanh", "Gelu", "Erf", "Exp", "Log", "Sqrt", "Neg", "Abs",
         "Reciprocal", "Softplus", "Softsign", "Elu", "HardSigmoid", "HardSwish", "Clip", "Selu",
         "Celu", "Mish")

_ERF = np.frompyfunc(math.erf, 1, 1)
_ERFC = np.frompyfunc(math.erfc, 1, 1)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715


def erf(x):
    """erf elementwise (math.erf), same dtype and shape as ``x``."""
    x = np.asarray(x)
    return np.asarray(_ERF(x), dtype=x.dtype).reshape(x.shape)


def erfc(x):
    """erfc elementwise (math.erfc), same dtype and shape as ``x``."""
    x = np.asarray(x)
    return np.asarray(_ERFC(x), dtype=x.dtype).reshape(x.shape)


def normal_cdf(x):
    """Phi(x) = (1 + erf(x / sqrt 2)) / 2, computed as erfc(-x / sqrt 2) / 2."""
    return 0.5 * erfc(-x / math.sqrt(2.0))


def sigmoid(x):
    """1 / (1 + exp(-x)) without overflow."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def softplus(x):
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|))."""
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _attrs(node):
    """The node's attributes with its card's ONNX defaults (``engine/ops/unary.py`` ATTRS)."""
    return read(node, ATTRS)


def _gelu_approx(node):
    approx = _attrs(node)["approximate"]
    approx = approx.decode() if isinstance(approx, bytes) else approx
    if approx not in ("none", "tanh"):
        raise ValueError(f"node {node['name']} (Gelu): approximate={approx!r}")
    return approx


def clip_bounds(node, ins):
    """(min, max) of Clip: inputs 1 / 2 (opset >= 11) or attributes (before); None if absent."""
    a = _attrs(node)
    lo, hi = a.get("min"), a.get("max")
    if len(ins) > 1 and ins[1] is not None:
        lo = ins[1]
    if len(ins) > 2 and ins[2] is not None:
        hi = ins[2]
    return lo, hi


def unary_forward(node, x):
    """y = f(x) of the op of ``node`` (ONNX definitions)."""
    op, a = node["op_type"], _attrs(node)
    if op == "LeakyRelu":
        return np.where(x >= 0, x, a["alpha"] * x)
    if op == "Sigmoid":
        return sigmoid(x)
    if op == "Tanh":
        return np.tanh(x)
    if op == "Gelu":
        if _gelu_approx(node) == "tanh":
            return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + _GELU_C * x ** 3)))
        return x * normal_cdf(x)
    if op == "Erf":
        return erf(x)
    if op == "Exp":
        return np.exp(x)
    if op == "Log":
        return np.log(x)
    if op == "Sqrt":
        return np.sqrt(x)
    if op == "Neg":
        return -x
    if op == "Abs":
        return np.abs(x)
    if op == "Reciprocal":
        return 1.0 / x
    if op == "Softplus":
        return softplus(x)
    if op == "Softsign":
        return x / (1.0 + np.abs(x))
    if op == "Elu":
        return np.where(x >= 0, x, a["alpha"] * np.expm1(np.minimum(x, 0)))
    if op == "Selu":  # gamma * (x > 0 ? x : alpha * (exp(x) - 1))
        return a["gamma"] * np.where(x > 0, x, a["alpha"] * np.expm1(np.minimum(x, 0)))
    if op == "Celu":  # max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
        return np.maximum(x, 0) + np.minimum(0, a["alpha"] * np.expm1(np.minimum(x, 0)
                                                                      / a["alpha"]))
    if op == "Mish":
        return x * np.tanh(softplus(x))
    if op == "HardSigmoid":
        return np.clip(a["alpha"] * x + a["beta"], 0.0, 1.0)
    if op == "HardSwish":
        return x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)
    raise ValueError(f"{op} is not a unary op")


def unary_backward(node, x, y, dy):
    """dx = dy * f'(x) (PyTorch's formulas); ``y`` = f(x)."""
    op, a = node["op_type"], _attrs(node)
    if op == "LeakyRelu":
        return np.where(x > 0, dy, a["alpha"] * dy)
    if op == "Sigmoid":
        return dy * y * (1.0 - y)
    if op == "Tanh":
        return dy * (1.0 - y * y)
    if op == "Gelu":
        if _gelu_approx(node) == "tanh":
            t = np.tanh(_SQRT_2_OVER_PI * (x + _GELU_C * x ** 3))
            inner = _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_C * x * x)
            return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * inner)
        return dy * (normal_cdf(x) + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi))
    if op == "Erf":
        return dy * (2.0 / math.sqrt(math.pi)) * np.exp(-x * x)
    if op == "Exp":
        return dy * y
    if op == "Log":
        return dy / x
    if op == "Sqrt":
        return dy / (2.0 * y)
    if op == "Neg":
        return -dy
    if op == "Abs":
        return dy * np.sign(x)
    if op == "Reciprocal":
        return -dy * y * y
    if op == "Softplus":
        return dy * sigmoid(x)
    if op == "Softsign":
        return dy / np.square(1.0 + np.abs(x))
    if op == "Elu":
        return np.where(x > 0, dy, dy * a["alpha"] * np.exp(np.minimum(x, 0)))
    if op == "Selu":  # torch elu_backward with scale gamma
        return a["gamma"] * np.where(x > 0, dy, dy * a["alpha"] * np.exp(np.minimum(x, 0)))
    if op == "Celu":  # elu_backward with input_scale 1 / alpha: exp(x / alpha) below 0
        return np.where(x > 0, dy, dy * np.exp(np.minimum(x, 0) / a["alpha"]))
    if op == "Mish":  # torch mish_backward
        t = np.tanh(softplus(x))
        return dy * (t + x * sigmoid(x) * (1.0 - t * t))
    if op == "HardSigmoid":
        alpha = a["alpha"]
        u = alpha * x + a["beta"]
        return np.where((u > 0) & (u < 1), alpha * dy, 0.0)
    if op == "HardSwish":
        return np.where(x < -3, 0.0, np.where(x <= 3, dy * (x / 3.0 + 0.5), dy))
    raise ValueError(f"{op} is not a unary op")


def forward(node, ins, ctx):
    x = ins[0]
    if node["op_type"] == "Clip":
        lo, hi = clip_bounds(node, ins)
        y = x
        if lo is not None:
            y = np.maximum(y, np.asarray(lo, x.dtype))
        if hi is not None:
            y = np.minimum(y, np.asarray(hi, x.dtype))
        return [y.astype(x.dtype, copy=False)], None
    return [np.asarray(unary_forward(node, x), x.dtype)], None


def backward(node, ins, outs, cache, douts, ctx):
    x, dy = ins[0], douts[0]
    if node["op_type"] != "Clip":
        return [np.asarray(unary_backward(node, x, outs[0], dy), x.dtype)]
    lo, hi = clip_bounds(node, ins)
    keep = np.ones(x.shape, bool)
    if lo is not None:
        keep &= x >= lo
    if hi is not None:
        keep &= x <= hi
    dins = [np.where(keep, dy, 0.0).astype(x.dtype)]
    # torch clamp_backward_min_max: the gradient of a tensor bound, summed to its shape
    for k in (1, 2):
        if len(ins) <= k:
            break
        if ins[k] is None:
            dins.append(None)
            continue
        if k == 1:
            m = x < lo
            if hi is not None:
                m &= np.asarray(lo < hi)
        else:
            m = x > hi
            if lo is not None:
                m |= np.asarray(hi < lo)
        dins.append(np.asarray(np.where(m, dy, 0.0).sum(), x.dtype).reshape(np.shape(ins[k])))
    return dins

"""Add, Sub, Mul, Div, Pow, PRelu, and Max, Min, Sum, Mean of two or more inputs, with NumPy
broadcasting (ONNX opset 7+); gradients by PyTorch's autograd (tools/autograd/derivatives.yaml,
FunctionsManual.cpp), summed over the broadcast dims. PRelu: d/dx = x > 0 ? 1 : slope, d/dslope
= x > 0 ? 0 : x. Max / Min: a tie's gradient goes to the first input (torch.maximum splits it);
of n inputs, to the first input that holds the extreme (``variadic_backward``).

Pow: a^b by ``np.power`` (NaN for a < 0 with a non-integral b, exact sign for integral b);
d/da = b * a^(b-1), 0 where b == 0 (pow_backward_self); d/db = a^b * ln(a), 0 where a == 0 and
b >= 0 (pow_backward_exponent).
"""

import numpy as np

from .gemm import unbroadcast

TYPES = ("Add", "Sub", "Mul", "Div", "Pow", "PRelu", "Max", "Min", "Sum", "Mean")


def binary(op, a, b):
    """Y = a op b, broadcast; ``op`` an ONNX op_type of TYPES."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if op == "Add":
            return a + b
        if op == "Sub":
            return a - b
        if op == "Mul":
            return a * b
        if op == "Div":
            return a / b
        if op == "PRelu":
            return np.where(a < 0, b * a, a)
        if op in ("Max", "Min"):
            return np.where(a >= b if op == "Max" else a <= b, a, b)
        if op == "Sum":
            return a + b
        if op == "Mean":
            return (a + b) / 2
        return np.power(a, b)


def binary_backward(op, a, b, dy):
    """(dA, dB): dY times the partial derivatives, reduced to the shapes of ``a`` and ``b``."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if op == "Add":
            da, db = dy, dy
        elif op == "Sub":
            da, db = dy, -dy
        elif op == "Mul":
            da, db = dy * b, dy * a
        elif op == "Div":
            da, db = dy / b, -dy * ((a / b) / b)
        elif op == "PRelu":
            da, db = np.where(a > 0, dy, dy * b), np.where(a > 0, 0.0, dy * a)
        elif op in ("Max", "Min"):
            first = a >= b if op == "Max" else a <= b
            da, db = np.where(first, dy, 0.0), np.where(first, 0.0, dy)
        elif op == "Sum":
            da, db = dy, dy
        elif op == "Mean":
            da, db = dy / 2, dy / 2
        else:
            da = np.where(b == 0, 0.0, dy * (b * np.power(a, b - 1)))
            db = np.where((a == 0) & (b >= 0), 0.0, dy * (np.power(a, b) * np.log(a)))
        return (unbroadcast(np.asarray(da), np.shape(a)),
                unbroadcast(np.asarray(db), np.shape(b)))


def variadic(op, xs):
    """Max / Min / Sum / Mean of the arrays ``xs`` (two or more), broadcast together."""
    stack = np.stack(np.broadcast_arrays(*xs))
    return {"Max": np.max, "Min": np.min, "Sum": np.sum, "Mean": np.mean}[op](stack, axis=0)


def variadic_backward(op, xs, dy):
    """Each input's gradient: dy (Sum), dy / n (Mean), or dy where the input is the FIRST to
    hold the extreme (Max / Min), reduced to the input's shape."""
    if op in ("Sum", "Mean"):
        g = dy / len(xs) if op == "Mean" else dy
        return [unbroadcast(np.asarray(g), np.shape(x)) for x in xs]
    stack = np.stack(np.broadcast_arrays(*xs))
    first = np.argmax(stack == variadic(op, xs), axis=0)
    return [unbroadcast(np.where(first == i, dy, 0.0), np.shape(x)) for i, x in enumerate(xs)]


def _operands(ins, ctx):
    # integer constants (e.g. Pow(x, 2) exported with an int64 exponent) compute in ctx.dtype
    return np.asarray(ins[0], ctx.dtype), np.asarray(ins[1], ctx.dtype)


def forward(node, ins, ctx):
    """[Y] = [A op B] in ``ctx.dtype``, of the broadcast shape of A and B; no cache."""
    if len(ins) > 2:
        xs = [np.asarray(x, ctx.dtype) for x in ins]
        return [np.asarray(variadic(node["op_type"], xs), ctx.dtype)], None
    a, b = _operands(ins, ctx)
    return [np.asarray(binary(node["op_type"], a, b), ctx.dtype)], None


def backward(node, ins, outs, cache, douts, ctx):
    """[dA, dB] of A's and B's shapes (see ``binary_backward``; more inputs:
    ``variadic_backward``)."""
    if len(ins) > 2:
        xs = [np.asarray(x, ctx.dtype) for x in ins]
        return [np.asarray(g, ctx.dtype) for g in variadic_backward(node["op_type"], xs,
                                                                      douts[0])]
    a, b = _operands(ins, ctx)
    da, db = binary_backward(node["op_type"], a, b, douts[0])
    return [np.asarray(da, ctx.dtype), np.asarray(db, ctx.dtype)]

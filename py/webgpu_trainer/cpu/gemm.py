"""Gemm: Y = alpha * op(A) @ op(B) + beta * C (ONNX Gemm; C broadcasts unidirectionally)."""

from ..engine.ops.card import read
from ..engine.ops.gemm import ATTRS

TYPES = ("Gemm",)


def gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=0, trans_b=0):
    y = (a.T if trans_a else a) @ (b.T if trans_b else b)
    if alpha != 1.0:
        y *= alpha
    return y if c is None else (y + c if beta == 1.0 else y + beta * c)


def unbroadcast(d, shape):
    """Sum ``d`` over the dimensions that NumPy broadcasting expanded from ``shape``."""
    while d.ndim > len(shape):
        d = d.sum(axis=0)
    for ax, size in enumerate(shape):
        if size == 1 and d.shape[ax] != 1:
            d = d.sum(axis=ax, keepdims=True)
    return d.reshape(shape)


def gemm_backward(a, b, dy, c=None, alpha=1.0, beta=1.0, trans_a=0, trans_b=0):
    """(dA, dB, dC); dC is reduced over the broadcast dimensions of C."""
    oa = a.T if trans_a else a
    ob = b.T if trans_b else b
    d_oa = dy @ ob.T
    d_ob = oa.T @ dy
    if alpha != 1.0:
        d_oa, d_ob = alpha * d_oa, alpha * d_ob
    dc = None if c is None else unbroadcast(dy if beta == 1.0 else beta * dy, c.shape)
    return d_oa.T if trans_a else d_oa, d_ob.T if trans_b else d_ob, dc


def attrs(node) -> dict:
    a = read(node, ATTRS)
    return dict(alpha=a["alpha"], beta=a["beta"], trans_a=a["transA"], trans_b=a["transB"])


def forward(node, ins, ctx):
    c = ins[2] if len(ins) > 2 else None
    return [gemm(ins[0], ins[1], c, **attrs(node))], None


def backward(node, ins, outs, cache, douts, ctx):
    c = ins[2] if len(ins) > 2 else None
    da, db, dc = gemm_backward(ins[0], ins[1], douts[0], c, **attrs(node))
    return [da, db] + ([dc] if len(ins) > 2 else [])

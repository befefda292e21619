"""Inverted Dropout (ONNX Dropout-12/13: ratio input or attribute, identity in eval mode).

The keep mask comes from ``ctx.keep[node name]`` when given (tests replay a mask), else from
Philox keyed by ``ctx.key`` = (seed, step) with the node's ``ctx.salt`` (the GPU's mask, bit for
bit: cpu/philox.py), else from ``ctx.rng``.
"""

import numpy as np

from ..engine.ops.card import read
from ..engine.ops.dropout import ATTRS
from . import philox

TYPES = ("Dropout",)


def ratio_of(node, ins) -> float:
    ratio = read(node, ATTRS)["ratio"]
    if len(ins) > 1 and ins[1] is not None:
        ratio = float(np.ravel(ins[1])[0])
    return ratio


def forward(node, ins, ctx):
    x = ins[0]
    if not ctx.train:
        return [x.copy(), np.ones(x.shape, bool)], None
    ratio = ratio_of(node, ins)
    keep = ctx.keep.get(node["name"]) if ctx.keep else None
    if keep is None and ctx.key is not None:
        keep = philox.dropout_keep(ctx.key[0], ctx.key[1], ctx.salt, x.shape, ratio)
    elif keep is None:
        keep = ctx.rng.random(x.shape) >= ratio
    scale = 1.0 / (1.0 - ratio) if ratio < 1 else 0.0
    return [np.where(keep, x * x.dtype.type(scale), 0).astype(x.dtype), keep], (keep, scale)


def backward(node, ins, outs, cache, douts, ctx):
    d = douts[0]
    if cache is not None:
        keep, scale = cache
        d = np.where(keep, d * d.dtype.type(scale), 0).astype(d.dtype)
    return [d] + [None] * (len(ins) - 1)

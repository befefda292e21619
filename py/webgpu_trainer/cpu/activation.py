"""Relu: y = max(x, 0); dx = dy * (x > 0)."""

import numpy as np

TYPES = ("Relu",)


def forward(node, ins, ctx):
    return [np.maximum(ins[0], 0)], None


def backward(node, ins, outs, cache, douts, ctx):
    return [np.where(ins[0] > 0, douts[0], 0)]

"""Relu: y = max(x, 0); dx = dy * (x > 0)."""

import numpy as np

TYPES = ("Relu",)

_BITS = {np.dtype(np.float32): np.int32, np.dtype(np.float64): np.int64}


def forward(node, ins, ctx):
    return [np.maximum(ins[0], 0)], None


def relu_backward(x, dy):
    """dy where x > 0, else +0.0 (np.where's values, non-finite dy included): dy's bits ANDed
    with an all-ones / all-zeros mask, no branch per element (np.where on a mask of random signs
    mispredicts: 2.9 ms against 0.2 ms for SeedNet's conv3 output at batch 64)."""
    bits = _BITS.get(dy.dtype)
    if bits is None or dy.shape != x.shape:
        return np.where(x > 0, dy, 0)
    m = np.greater(x, 0).astype(bits)
    np.negative(m, out=m)
    np.bitwise_and(dy.view(bits), m, out=m)
    return m.view(dy.dtype)


def backward(node, ins, outs, cache, douts, ctx):
    return [relu_backward(ins[0], douts[0])]

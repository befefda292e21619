"""Resize over the last two axes (nearest, linear): numpy forward y = A_h x A_w^T and backward
dx = A_h^T dy A_w with the per-axis interpolation matrices A [out, in] built from the card's
taps (the coordinate rule; the GPU gathers through their inverse instead)."""

import numpy as np

from ..engine.ops.card import read
from ..engine.ops.resize import ATTRS, output_size, taps

TYPES = ("Resize",)


def _matrices(node, x, ins):
    consts = [None if v is None else np.asarray(v).reshape(-1).tolist() for v in ins]
    (oh, ow), (sh, sw) = output_size(node, x.shape, consts)
    a = read(node, ATTRS)
    mats = []
    for length, out_len, scale in ((x.shape[2], oh, sh), (x.shape[3], ow, sw)):
        m = np.zeros((out_len, length))
        for o, (i0, i1, w0, w1) in enumerate(taps(a, length, out_len, scale)):
            m[o, i0] += w0
            m[o, i1] += w1
        mats.append(m.astype(x.dtype))
    return mats


def forward(node, ins, ctx):
    ah, aw = _matrices(node, ins[0], ins)
    return [np.einsum("oh,nchw,pw->ncop", ah, ins[0], aw)], (ah, aw)


def backward(node, ins, outs, cache, douts, ctx):
    ah, aw = cache
    return [np.einsum("oh,ncop,pw->nchw", ah, douts[0], aw)] + [None] * (len(ins) - 1)

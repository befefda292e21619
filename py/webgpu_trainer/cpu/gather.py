"""Gather with constant indices: numpy forward (``np.take``) and backward (``np.add.at`` of dy
into zeros, PyTorch's index_select backward)."""

import numpy as np

from ..engine.ops.card import read
from ..engine.ops.gather import ATTRS

TYPES = ("Gather",)


def forward(node, ins, ctx):
    axis = int(read(node, ATTRS)["axis"]) % ins[0].ndim
    return [np.take(ins[0], np.asarray(ins[1], np.int64), axis=axis)], None


def backward(node, ins, outs, cache, douts, ctx):
    x, idx, dy = ins[0], np.asarray(ins[1], np.int64), douts[0]
    axis = int(read(node, ATTRS)["axis"]) % x.ndim
    dx = np.zeros(x.shape, dy.dtype)
    flat = dy.reshape(x.shape[:axis] + (idx.size,) + x.shape[axis + 1:])
    np.add.at(np.moveaxis(dx, axis, 0), idx.reshape(-1) % x.shape[axis],
              np.moveaxis(flat, axis, 0))
    return [dx, None]

"""Gather: numpy forward (``np.take``) and backward (``np.add.at`` of dy into zeros, PyTorch's
index_select / embedding backward). Constant indices count from the end when negative (ONNX);
the model's token ids input (an embedding lookup, ``engine/ops/embed.py``) is clamped to the
table's rows instead, as on the GPU."""

import numpy as np

from ..engine.ops.card import read
from ..engine.ops.gather import ATTRS

TYPES = ("Gather",)


def _indices(node, ins, ctx):
    idx = np.asarray(ins[1]).astype(np.int64)
    if node["inputs"][1] == getattr(ctx, "input", None):  # ctx None: constant indices
        return np.clip(idx, 0, ins[0].shape[0] - 1)
    return idx


def forward(node, ins, ctx):
    axis = int(read(node, ATTRS)["axis"]) % ins[0].ndim
    return [np.take(ins[0], _indices(node, ins, ctx), axis=axis)], None


def backward(node, ins, outs, cache, douts, ctx):
    x, idx, dy = ins[0], _indices(node, ins, ctx), douts[0]
    axis = int(read(node, ATTRS)["axis"]) % x.ndim
    dx = np.zeros(x.shape, dy.dtype)
    flat = dy.reshape(x.shape[:axis] + (idx.size,) + x.shape[axis + 1:])
    np.add.at(np.moveaxis(dx, axis, 0), idx.reshape(-1) % x.shape[axis],
              np.moveaxis(flat, axis, 0))
    return [dx, None]

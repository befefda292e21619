"""Flatten, Identity, Reshape, Squeeze, Unsqueeze: the data under another shape."""

import numpy as np

TYPES = ("Flatten", "Identity", "Reshape", "Squeeze", "Unsqueeze")


def _axes(node, ins, rank):
    axes = node.get("attrs", {}).get("axes")
    if len(ins) > 1 and ins[1] is not None:
        axes = [int(v) for v in np.ravel(ins[1])]
    return None if axes is None else sorted(a % rank for a in axes)


def forward(node, ins, ctx):
    op, x, a = node["op_type"], ins[0], node.get("attrs", {})
    if op == "Identity":
        y = x.copy()
    elif op == "Flatten":
        axis = a.get("axis", 1) % (x.ndim + 1) if x.ndim else 0
        y = x.reshape(int(np.prod(x.shape[:axis])), -1)
    elif op == "Reshape":
        want = [int(v) for v in np.ravel(ins[1])]
        if not a.get("allowzero", 0):
            want = [x.shape[i] if v == 0 else v for i, v in enumerate(want)]
        y = x.reshape(want)
    elif op == "Squeeze":
        axes = _axes(node, ins, x.ndim)
        y = np.squeeze(x, axis=tuple(axes) if axes is not None else None)
    else:  # Unsqueeze
        rank = x.ndim + len(_axes(node, ins, 1 << 30) or [])
        y = x
        for ax in _axes(node, ins, rank):
            y = np.expand_dims(y, ax)
    return [y], None


def backward(node, ins, outs, cache, douts, ctx):
    return [douts[0].reshape(ins[0].shape)] + [None] * (len(ins) - 1)

"""Transpose, Concat, Slice, Pad (constant, reflect, edge), Expand, Split: numpy forward and
backward.

Written from the ONNX operator definitions (Slice's clamping follows the spec's pseudo-code,
not Python's slice rules, which differ for negative steps); gradients as PyTorch's autograd:
transpose by the inverse permutation, split, scatter into zeros, crop, sum over the broadcast
dims, concatenate (zeros for an output without a gradient). The form of Slice, Pad and Split
follows the node: constant inputs when present (Slice opset
>= 10, Pad opset >= 11, axes of Pad opset >= 18), else the attributes of the older opsets.
"""

import numpy as np

from ..engine.errors import GraphError
from ..engine.ops.layout_rules import with_batch

TYPES = ("Concat", "Expand", "Pad", "Slice", "Split", "Transpose")


def _error(node, msg):
    return GraphError(f"node {node['name']} ({node['op_type']}): {msg}")


def _ints(ins, k):
    """Input ``k`` as a list of Python ints (None when absent)."""
    if len(ins) <= k or ins[k] is None:
        return None
    return [int(v) for v in np.ravel(ins[k])]


def _perm(node, ndim):
    perm = node.get("attrs", {}).get("perm")
    return tuple(range(ndim))[::-1] if perm is None else tuple(int(p) for p in perm)


def _slice_index(node, ins):
    """A tuple of index arrays (np.ix_) selecting the Slice output from x."""
    x = ins[0]
    if len(ins) > 1:
        starts, ends, axes, steps = (_ints(ins, k) for k in (1, 2, 3, 4))
    else:
        a = node["attrs"]
        starts, ends, axes, steps = list(a["starts"]), list(a["ends"]), a.get("axes"), None
    axes = list(range(len(starts))) if axes is None else [int(v) % x.ndim for v in axes]
    steps = [1] * len(starts) if steps is None else steps
    index = [np.arange(d) for d in x.shape]
    for ax, start, end, step in zip(axes, starts, ends, steps):
        dim = x.shape[ax]
        start = int(start) + dim if start < 0 else int(start)
        end = int(end) + dim if end < 0 else int(end)
        if step > 0:
            start, end = np.clip(start, 0, dim), np.clip(end, 0, dim)
        else:
            start, end = np.clip(start, 0, dim - 1), np.clip(end, -1, dim - 1)
        index[ax] = np.arange(start, end, step, dtype=np.int64)
    return np.ix_(*index)


def _mode(node) -> str:
    mode = node.get("attrs", {}).get("mode", "constant")
    return mode.decode() if isinstance(mode, bytes) else mode


def _pads(node, ins):
    """(per-dim (begin, end) pads, value) of Pad; GraphError for modes other than constant,
    reflect and edge."""
    a = node.get("attrs", {})
    mode = _mode(node)
    if mode not in ("constant", "reflect", "edge"):
        raise _error(node, f"mode {mode!r} is not supported")
    x = ins[0]
    if len(ins) > 1:
        pads = _ints(ins, 1)
        value = ins[2] if len(ins) > 2 and ins[2] is not None else 0.0
        axes = _ints(ins, 3)
    else:
        pads, value, axes = list(a["pads"]), a.get("value", 0.0), None
    axes = list(range(x.ndim)) if axes is None else [v % x.ndim for v in axes]
    per = [(0, 0)] * x.ndim
    for i, ax in enumerate(axes):
        per[ax] = (int(pads[i]), int(pads[i + len(axes)]))
    return per, np.ravel(np.asarray(value, x.dtype))[0] if np.size(value) else x.dtype.type(0)


def _source_index(per, shape, mode):
    """np.ix_ of the cell of x each cell of the reflect / edge padded output copies."""
    index = []
    for (lo, hi), d in zip(per, shape):
        t = np.arange(-lo, d + hi)
        if mode == "reflect":
            t = np.where(t < 0, -t, np.where(t >= d, 2 * (d - 1) - t, t))
        else:
            t = np.clip(t, 0, d - 1)
        index.append(t)
    return np.ix_(*index)


def _crop(x, per):
    """x cropped by the negative parts of ``per`` and padded by the positive ones (zeros)."""
    idx = tuple(slice(max(-lo, 0), d - max(-hi, 0)) for (lo, hi), d in zip(per, x.shape))
    return x[idx], [(max(lo, 0), max(hi, 0)) for lo, hi in per]


def _unbroadcast(d, shape):
    lead = d.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape)
                                      if s == 1 and d.shape[lead + i] != 1)
    return d.sum(axis=axes, keepdims=True).reshape(shape) if axes else d.reshape(shape)


def _split_sizes(node, ins):
    """Split's sizes: the split input (opset 13+) or attribute, else equal parts of
    ``num_outputs`` (or one per output), the last smaller (opset 18)."""
    a, x = node.get("attrs", {}), ins[0]
    dim = x.shape[int(a.get("axis", 0)) % x.ndim]
    sizes = _ints(ins, 1) if len(ins) > 1 and ins[1] is not None else a.get("split")
    if sizes is None:
        parts = int(a.get("num_outputs", len(node["outputs"])))
        size = -(-dim // parts)
        sizes = [max(0, min(size, dim - k * size)) for k in range(parts)]
    return int(a.get("axis", 0)) % x.ndim, [int(v) for v in sizes]


def forward(node, ins, ctx):
    op, x, a = node["op_type"], ins[0], node.get("attrs", {})
    if op == "Split":
        axis, sizes = _split_sizes(node, ins)
        return [p.copy() for p in np.split(x, np.cumsum(sizes)[:-1], axis=axis)], None
    if op == "Transpose":
        y = np.transpose(x, _perm(node, x.ndim)).copy()
    elif op == "Concat":
        y = np.concatenate([np.asarray(t, ctx.dtype) for t in ins], axis=int(a["axis"]))
    elif op == "Slice":
        y = x[_slice_index(node, ins)].copy()
    elif op == "Pad" and _mode(node) != "constant":
        per, _ = _pads(node, ins)
        y = x[_source_index(per, x.shape, _mode(node))].copy()
    elif op == "Pad":
        per, value = _pads(node, ins)
        inner, pos = _crop(x, per)
        y = np.pad(inner, pos, mode="constant", constant_values=value)
    else:  # Expand
        shape = np.broadcast_shapes(x.shape, tuple(with_batch(node, _ints(ins, 1), ctx.batch)))
        y = np.broadcast_to(x, shape).copy()
    return [y], None


def backward(node, ins, outs, cache, douts, ctx):
    op, x, dy = node["op_type"], ins[0], douts[0]
    rest = [None] * (len(ins) - 1)
    if op == "Split":
        axis, sizes = _split_sizes(node, ins)
        parts = [d if d is not None else
                 np.zeros(x.shape[:axis] + (s,) + x.shape[axis + 1:], x.dtype)
                 for d, s in zip(douts, sizes)]
        return [np.concatenate(parts, axis=axis)] + rest
    if op == "Transpose":
        return [np.transpose(dy, np.argsort(_perm(node, x.ndim)))]
    if op == "Concat":
        axis = int(node["attrs"]["axis"]) % dy.ndim
        cuts = np.cumsum([t.shape[axis] for t in ins])[:-1]
        return [p.copy() for p in np.split(dy, cuts, axis=axis)]
    if op == "Slice":
        dx = np.zeros_like(x, dtype=dy.dtype)
        dx[_slice_index(node, ins)] = dy
        return [dx] + rest
    if op == "Pad" and _mode(node) != "constant":  # scatter-add onto the copied cells
        per, _ = _pads(node, ins)
        dx = np.zeros(x.shape, dy.dtype)
        np.add.at(dx, _source_index(per, x.shape, _mode(node)), dy)
        return [dx] + rest
    if op == "Pad":
        per, _ = _pads(node, ins)
        # dy cropped by the positive pads, zeros where negative pads cropped x
        inner = dy[tuple(slice(max(lo, 0), d - max(hi, 0))
                         for (lo, hi), d in zip(per, dy.shape))]
        dx = np.pad(inner, [(max(-lo, 0), max(-hi, 0)) for lo, hi in per])
        if len(ins) > 2 and ins[2] is not None:  # d constant_value: dy over the padded cells
            rest[1] = np.asarray(dy.sum() - inner.sum(), dy.dtype).reshape(np.shape(ins[2]))
        return [dx] + rest
    return [_unbroadcast(dy, x.shape)] + rest  # Expand

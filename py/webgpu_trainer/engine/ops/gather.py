"""ONNX Gather on activations and parameters with CONSTANT indices (shaders/gather.wgsl):
``nn.MultiheadAttention``'s packed q/k/v (``Gather(qkv, 0 | 1 | 2, axis=0)``; the dynamo
exporter's ``node_select``), a fixed selection of rows or channels.

y = take(x, indices, axis): shape x[:axis] + indices.shape + x[axis+1:] (a scalar index drops
the axis); negative indices count from the end (ONNX, opset 11+). The gradient is PyTorch's
(``index_select`` / ``select`` backward): dy scatter-added into zeros, a repeated index summing
its positions in increasing order (a gather over the host-made inverse of the indices, no
atomics). The indices must be constants of the model description, or the model's own integer
input (``nn.Embedding``'s token ids, axis 0: an embedding lookup, ``embed.py``); ``infer``
raises ``GraphError`` naming the node for any other index input computed at run time.
"""

import math
import struct

from ..backends.base import groups_1d
from ..errors import GraphError
from . import embed

TYPES = ("Gather",)
ATTRS = {"Gather": {"axis": 0}}


def _error(node, msg):
    return GraphError(f"node {node['name']} ({node['op_type']}): {msg}")


def spec(node, shape, values, index_shape):
    """``(axis, indices normalised to [0, dim), output shape)``; GraphError when the indices
    are not constant, the axis is out of range or an index is out of [-dim, dim)."""
    if values is None:
        raise _error(node, f"input 1 {node['inputs'][1]!r} (indices) is not a constant of the "
                           "model; only constant indices are supported")
    rank = len(shape)
    axis = int(node.get("attrs", {}).get("axis", 0))
    if not -rank <= axis < rank:
        raise _error(node, f"axis {axis} out of range for rank {rank}")
    axis %= rank
    dim = shape[axis]
    idx = [int(v) for v in values]
    bad = [v for v in idx if not -dim <= v < dim]
    if bad:
        raise _error(node, f"index {bad[0]} out of range for axis {axis} of size {dim}")
    return axis, [v % dim for v in idx], list(shape[:axis]) + list(index_shape) + \
        list(shape[axis + 1:])


def infer(node, ins, consts):
    """The output shape (see ``spec``)."""
    if ins[1] is None:
        raise _error(node, "the indices input is required")
    if consts[1] is None:  # run-time token ids (``Graph`` checks they are the model input)
        return [embed.infer(node, ins, _error)]
    return [spec(node, ins[0], consts[1], ins[1])[2]]


def _index_buffer(b, node, idx, dim):
    """The u32 buffer of gather.wgsl: indices, then the inverse (starts, order); made once per
    node (shared by the forward and backward programs)."""
    order = sorted(range(len(idx)), key=lambda j: (idx[j], j))
    starts = [0] * (dim + 1)
    for v in idx:
        starts[v + 1] += 1
    for a in range(dim):
        starts[a + 1] += starts[a]
    data = idx + starts + order
    buf = b.save(node, len(data), "index")
    b.dev.write(buf, struct.pack(f"<{len(data)}I", *data))
    return buf


def _geometry(b, node, x):
    consts = b.plan.graph.constants
    c = consts.get(node["inputs"][1])
    axis, idx, _ = spec(node, x.shape, c["values"] if c else None, c["shape"] if c else [])
    dim = x.shape[axis]
    params = dict(inner=math.prod(x.shape[axis + 1:]), count=len(idx), dim=dim, idx_off=0,
                  start_off=len(idx), order_off=len(idx) + dim + 1)
    return math.prod(x.shape[:axis]), params, _index_buffer(b, node, idx, dim)


async def forward(b, node, ins, outs, train):
    """y = take(x, indices, axis)."""
    if embed.is_lookup(b, node):
        return await embed.forward(b, node, ins, outs)
    outer, params, index = _geometry(b, node, ins[0])
    n = outer * params["count"] * params["inner"]
    if n:
        await b.kernel("gather", "gather_forward", groups_1d(n), params=dict(n=n, **params),
                       x=ins[0], index=index, out=outs[0])


async def backward(b, node, ins, outs, gins, gouts):
    """dx = dy scatter-added into zeros along ``axis``."""
    if gins[0] is None:
        return
    if embed.is_lookup(b, node):
        return await embed.backward(b, node, ins, gins, gouts)
    outer, params, index = _geometry(b, node, ins[0])
    n = outer * params["dim"] * params["inner"]
    if n:
        await b.kernel("gather", "gather_backward", groups_1d(n), params=dict(n=n, **params),
                       x=gouts[0], index=index, out=gins[0])

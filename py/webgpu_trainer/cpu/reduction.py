"""ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceSumSquare, ReduceL2, ReduceLogSumExp,
ReduceL1, ReduceProd (ONNX): axes from the attribute or the optional second input, keepdims
(default 1), noop_with_empty_axes (no axes: all, or the identity).

Backward (PyTorch autograd): Sum dx = dy, Mean dx = dy / R; Max / Min as torch.amax / amin,
the gradient split evenly among the positions equal to the extreme (ties); SumSquare 2 x dy;
L2 x dy / y (0 where y == 0); LogSumExp dy exp(x - y); L1 sign(x) dy; Prod as torch's
prod_backward (the product of the other values of the row, by masking: exact with zeros)."""

import numpy as np

TYPES = ("ReduceMax", "ReduceMean", "ReduceMin", "ReduceSum", "ReduceSumSquare", "ReduceL2",
         "ReduceLogSumExp", "ReduceL1", "ReduceProd")


def _logsumexp(x, axis, keepdims):
    m = np.max(x, axis=axis, keepdims=True)
    return m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def _prod_of_others(x, axes):
    """Per element, the product of the other values of its reduced row: each row moved last
    and flattened, then the products of the values before and after each position."""
    moved = np.moveaxis(x, axes, range(x.ndim - len(axes), x.ndim))
    rows = moved.reshape(moved.shape[:x.ndim - len(axes)] + (-1,))
    ones = np.ones(rows.shape[:-1] + (1,), x.dtype)
    before = np.cumprod(np.concatenate([ones, rows[..., :-1]], -1), -1)
    after = np.cumprod(np.concatenate([ones, rows[..., :0:-1]], -1), -1)[..., ::-1]
    out = (before * after).reshape(moved.shape)
    return np.moveaxis(out, range(x.ndim - len(axes), x.ndim), axes)


def reduce_axes(node, ins, rank):
    """Sorted reduced axes (>= 0); [] = identity (noop_with_empty_axes)."""
    a = node.get("attrs", {})
    axes = a.get("axes")
    if len(ins) > 1 and ins[1] is not None:
        axes = [int(v) for v in np.ravel(ins[1])]
    if axes is None or len(axes) == 0:
        return [] if a.get("noop_with_empty_axes", 0) else list(range(rank))
    return sorted({int(v) % rank for v in axes})


def forward(node, ins, ctx):
    x = ins[0]
    axes = tuple(reduce_axes(node, ins, x.ndim))
    f = {"ReduceSum": np.sum, "ReduceMean": np.mean, "ReduceMax": np.max,
         "ReduceMin": np.min, "ReduceLogSumExp": _logsumexp,
         "ReduceSumSquare": lambda v, axis, keepdims: np.sum(v * v, axis=axis, keepdims=True),
         "ReduceL2": lambda v, axis, keepdims: np.sqrt(np.sum(v * v, axis=axis,
                                                              keepdims=True)),
         "ReduceL1": lambda v, axis, keepdims: np.sum(np.abs(v), axis=axis, keepdims=True),
         "ReduceProd": np.prod}[node["op_type"]]
    y = f(x, axis=axes, keepdims=True) if axes else x.copy()
    keep = y
    if not node.get("attrs", {}).get("keepdims", 1):
        y = y.reshape([d for i, d in enumerate(x.shape) if i not in axes])
    return [y], keep


def backward(node, ins, outs, cache, douts, ctx):
    x = ins[0]
    axes = tuple(reduce_axes(node, ins, x.ndim))
    dy = douts[0].reshape(cache.shape)
    op = node["op_type"]
    if op == "ReduceSum" or not axes:
        dx = np.broadcast_to(dy, x.shape).copy()
    elif op == "ReduceSumSquare":
        dx = 2 * x * dy
    elif op == "ReduceL2":
        with np.errstate(divide="ignore", invalid="ignore"):
            dx = np.where(cache == 0, 0.0, x * dy / cache)
    elif op == "ReduceLogSumExp":
        dx = dy * np.exp(x - cache)
    elif op == "ReduceL1":
        dx = np.sign(x) * dy
    elif op == "ReduceProd":
        dx = dy * _prod_of_others(x, axes)
    elif op == "ReduceMean":
        dx = np.broadcast_to(dy / (x.size // cache.size), x.shape).copy()
    else:
        hit = x == cache
        dx = np.where(hit, dy / hit.sum(axis=axes, keepdims=True), 0).astype(x.dtype)
    return [dx] + [None] * (len(ins) - 1)

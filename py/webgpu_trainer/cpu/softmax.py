"""Softmax and LogSoftmax on any axis, and the losses over [batch, classes] (NLLLoss,
CrossEntropyLoss).

ONNX semantics by opset: from opset 13 along ``axis`` (default -1); before 13 the input is
coerced to 2-D at ``axis`` (default 1) and normalised over the flattened x.shape[axis:]. The
opset is the graph dict's ``"opset"`` (17 when absent), read from ``ctx.opset`` or
``ctx.graph`` (see ``opset_of``).
"""

import numpy as np

TYPES = ("LogSoftmax", "Softmax")


def log_softmax(x, axis=-1):
    """log(softmax(x)) along ``axis``, stable: x - max - log(sum(exp(x - max)))."""
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def log_softmax_backward(y, dy, axis=-1):
    """dx = dy - softmax(x) * sum(dy), from the output y = log_softmax(x)."""
    return dy - np.exp(y) * dy.sum(axis=axis, keepdims=True)


def softmax(x, axis=-1):
    """exp(x - max) / sum(exp(x - max)) along ``axis`` (same shape and dtype as x)."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def softmax_backward(y, dy, axis=-1):
    """dx = y * (dy - sum(dy * y)) from the output y = softmax(x) (PyTorch
    _softmax_backward_data)."""
    return y * (dy - (dy * y).sum(axis=axis, keepdims=True))


def opset_of(ctx) -> int:
    """The model's opset: ``ctx.opset``, else ``ctx.graph["opset"]``, else 17."""
    v = getattr(ctx, "opset", None)
    if v is None:
        g = getattr(ctx, "graph", None)
        v = g.get("opset") if isinstance(g, dict) else None
    return int(v) if v else 17


def _view(node, shape, ctx):
    """(2-D shape or None, axis): opset < 13 coerces to [prod(shape[:axis]), prod(rest)]."""
    opset = opset_of(ctx)
    rank = len(shape)
    axis = node.get("attrs", {}).get("axis", -1 if opset >= 13 else 1)
    if not -rank <= axis < rank:
        raise ValueError(f"{node['name']} ({node['op_type']}): axis {axis} out of range for "
                         f"rank {rank}")
    axis %= rank
    if opset < 13:
        return (int(np.prod(shape[:axis], dtype=np.int64)), -1), 1
    return None, axis


def forward(node, ins, ctx):
    x = ins[0]
    flat, axis = _view(node, x.shape, ctx)
    xv = x.reshape(flat) if flat else x
    f = log_softmax if node["op_type"] == "LogSoftmax" else softmax
    return [f(xv, axis).reshape(x.shape)], None


def backward(node, ins, outs, cache, douts, ctx):
    y, dy = outs[0], douts[0]
    flat, axis = _view(node, y.shape, ctx)
    yv, dyv = (y.reshape(flat), dy.reshape(flat)) if flat else (y, dy)
    f = log_softmax_backward if node["op_type"] == "LogSoftmax" else softmax_backward
    return [f(yv, dyv, axis).reshape(y.shape)]


def nll(logp, labels):
    """NLLLoss(reduction="mean") of [B, C] log-probabilities: (loss, dlogp, accuracy)."""
    b = logp.shape[0]
    idx = np.arange(b), np.asarray(labels, np.int64)
    loss = -logp[idx].mean()
    d = np.zeros_like(logp)
    d[idx] = -1.0 / b
    acc = float((logp.argmax(axis=1) == idx[1]).mean())
    return float(loss), d, acc

"""LogSoftmax on any axis, and the losses over [batch, classes] (NLLLoss, CrossEntropyLoss)."""

import numpy as np

TYPES = ("LogSoftmax",)


def log_softmax(x, axis=-1):
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def log_softmax_backward(y, dy, axis=-1):
    """dx = dy - softmax(x) * sum(dy), from the output y = log_softmax(x)."""
    return dy - np.exp(y) * dy.sum(axis=axis, keepdims=True)


def forward(node, ins, ctx):
    return [log_softmax(ins[0], node.get("attrs", {}).get("axis", -1))], None


def backward(node, ins, outs, cache, douts, ctx):
    return [log_softmax_backward(outs[0], douts[0], node.get("attrs", {}).get("axis", -1))]


def nll(logp, labels):
    """NLLLoss(reduction="mean") of [B, C] log-probabilities: (loss, dlogp, accuracy)."""
    b = logp.shape[0]
    idx = np.arange(b), np.asarray(labels, np.int64)
    loss = -logp[idx].mean()
    d = np.zeros_like(logp)
    d[idx] = -1.0 / b
    acc = float((logp.argmax(axis=1) == idx[1]).mean())
    return float(loss), d, acc

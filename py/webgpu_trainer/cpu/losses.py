"""The training losses with numpy: PyTorch's criteria on a [B, C] output and integer labels.

Each function returns ``(loss, grad)``: the loss as a 0-d value of the input's dtype and its
gradient with respect to the input (same shape and dtype). Written from ``torch.nn.functional``
(``cross_entropy`` with ``weight`` / ``label_smoothing`` as aten/src/ATen/native/LossNLL.cpp
``cross_entropy_loss_label_smoothing``, ``nll_loss``, ``mse_loss``,
``binary_cross_entropy_with_logits``); the spec format is ``webgpu_trainer.ops.losses``.
CPython only (numpy).
"""

import numpy as np

from .softmax import log_softmax


def check_labels(labels, classes: int) -> None:
    """ValueError naming the first label outside 0..classes-1 and its index in the batch."""
    labels = np.asarray(labels, np.int64).reshape(-1)
    bad = np.flatnonzero((labels < 0) | (labels >= classes))
    if bad.size:
        raise ValueError(f"label {int(labels[bad[0]])} at index {int(bad[0])} of the batch is "
                         f"outside 0..{classes - 1} ({bad.size} such labels): the losses need "
                         "class indices")


def one_hot(labels, classes: int, dtype) -> np.ndarray:
    """[B, C] array of ``dtype``: 1 at (b, labels[b]), else 0."""
    labels = np.asarray(labels, np.int64)
    t = np.zeros((labels.shape[0], classes), dtype)
    t[np.arange(labels.shape[0]), labels] = 1
    return t


def _coefficients(labels, classes, dtype, weight, eps, reduction):
    """a[b, c] with loss = sum a * (-logp) and d loss / d logp = -a (see cross_entropy)."""
    w = np.ones(classes, dtype) if weight is None else np.asarray(weight, dtype)
    t = one_hot(labels, classes, dtype)
    wy = w[np.asarray(labels, np.int64)]
    a = (1 - eps) * t * wy[:, None] + eps / classes * w[None, :]
    if reduction == "mean":
        a = a / (wy.sum() if weight is not None else dtype(len(wy)))
    elif reduction != "sum":
        raise ValueError(f"loss.reduction: {reduction!r} is not supported (mean, sum)")
    return a


def nll_loss(logp, labels, weight=None, reduction="mean", label_smoothing=0.0):
    """NLLLoss of ``logp`` [B, C] (log-probabilities): ``sum_b w[y_b] (-logp[b, y_b]) / D``,
    D = ``sum_b w[y_b]`` (mean; B without weight) or 1 (sum). ``label_smoothing`` eps adds
    CrossEntropyLoss's ``eps / C * sum_c w[c] (-logp[b, c])`` (same D) and scales the first term
    by 1 - eps. Returns ``(loss, dlogp)``."""
    logp = np.asarray(logp)
    a = _coefficients(labels, logp.shape[1], logp.dtype.type, weight, label_smoothing,
                      reduction)
    return (a * -logp).sum(), -a


def cross_entropy(x, labels, weight=None, reduction="mean", label_smoothing=0.0):
    """CrossEntropyLoss of logits ``x`` [B, C]: ``nll_loss(log_softmax(x), ...)`` with label
    smoothing; dx = ``softmax(x) * sum_c a[b, c] - a`` where dlogp = -a. Returns ``(loss, dx)``."""
    x = np.asarray(x)
    logp = log_softmax(x, axis=1)
    loss, dlogp = nll_loss(logp, labels, weight, reduction, label_smoothing)
    return loss, dlogp - np.exp(logp) * dlogp.sum(axis=1, keepdims=True)


def mse_loss(x, labels, reduction="mean"):
    """MSELoss of ``x`` [B, C] against ``one_hot(labels)``: ``sum (x - t)^2`` / (B*C for mean).
    Returns ``(loss, dx)`` with dx = ``2 (x - t) / (B*C or 1)``."""
    x = np.asarray(x)
    e = x - one_hot(labels, x.shape[1], x.dtype)
    n = x.dtype.type(x.size if reduction == "mean" else 1)
    return (e * e).sum() / n, 2 * e / n


def bce_with_logits(x, labels, reduction="mean"):
    """BCEWithLogitsLoss of ``x`` [B, C] against ``one_hot(labels)``:
    ``sum max(x, 0) - x t + log(1 + exp(-|x|))`` / (B*C for mean); dx = ``(sigmoid(x) - t) / n``.
    Returns ``(loss, dx)``."""
    x = np.asarray(x)
    t = one_hot(labels, x.shape[1], x.dtype)
    n = x.dtype.type(x.size if reduction == "mean" else 1)
    per = np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x)))
    z = np.exp(-np.abs(x))
    sig = np.where(x >= 0, 1 / (1 + z), z / (1 + z))
    return per.sum() / n, (sig - t) / n


def criterion(spec, out, labels):
    """The loss of a resolved spec (``ops.losses.resolve``) on the raw output ``out`` [B, C]
    (for nll_log: the final Softmax's input z, since NLL of log(softmax(z)) is cross_entropy
    of z). Returns ``(loss float, dout [B, C], accuracy float)``; accuracy = argmax == label.
    Raises ValueError naming the first label outside 0..C-1."""
    kind, red = spec["loss"], spec["reduction"]
    check_labels(labels, np.shape(out)[1])
    if kind in ("cross_entropy", "nll_log"):
        loss, d = cross_entropy(out, labels, spec["weight"], red, spec["label_smoothing"])
    elif kind == "nll":
        loss, d = nll_loss(out, labels, spec["weight"], red, spec["label_smoothing"])
    elif kind == "mse":
        loss, d = mse_loss(out, labels, red)
    elif kind == "bce_with_logits":
        loss, d = bce_with_logits(out, labels, red)
    else:
        raise ValueError(f"loss.loss: {kind!r} is not a resolved loss")
    acc = float((np.asarray(out).argmax(axis=1) == np.asarray(labels, np.int64)).mean())
    return float(loss), d, acc

"""The training losses (PyTorch's criteria) on the GPU: spec validation and the loss dispatches.

A loss spec is a dict (or just its ``"loss"`` name as a string; None = all defaults)::

    {"loss": "auto" | "cross_entropy" | "nll" | "mse" | "bce_with_logits",
     "reduction": "mean" | "sum",
     "label_smoothing": float in [0, 1]    # cross_entropy only
     "weight": [C floats] | None}          # cross_entropy and nll only

applied to the model's raw output ``x`` [B, C] and the integer labels ``y`` [B] with the
semantics of ``torch.nn.functional`` (``cross_entropy``, ``nll_loss``, ``mse_loss``,
``binary_cross_entropy_with_logits``; torch/nn/functional.py and aten/src/ATen/native/LossNLL.cpp):

- cross_entropy: ``logp = log_softmax(x)``; ``l_b = (1 - eps) w[y_b] (-logp[b, y_b])
  + eps / C * sum_c w[c] (-logp[b, c])``; mean = ``sum_b l_b / sum_b w[y_b]`` (``/ B`` without
  weight), sum = ``sum_b l_b`` (torch normalises the smoothing term by the same denominator);
- nll: the same with ``logp = x`` and ``eps = 0`` (x should hold log-probabilities);
- mse: ``(x - onehot(y))^2`` over all B*C elements, mean or sum;
- bce_with_logits: ``max(x, 0) - x t + log(1 + exp(-|x|))``, ``t = onehot(y)``, over all B*C
  elements, mean or sum.

"auto" is the rule of earlier versions: nll when the model ends in LogSoftmax, else
cross_entropy, mean. Accuracy is always ``argmax_c x[b, c] == y_b`` (first maximum on ties).
Standard library only (runs in Pyodide).
"""

import math
import struct

from ..backends.base import pack_params
from ..config import BY_NAME, ConfigError, parse

LOSSES = BY_NAME["loss"].choices
REDUCTIONS = BY_NAME["reduction"].choices
KEYS = ("loss", "reduction", "label_smoothing", "weight")
_FIELD = {"loss": "loss", "reduction": "reduction", "label_smoothing": "label_smoothing",
          "weight": "class_weights"}  # spec key -> the run configuration's field
DEFAULT = {k: BY_NAME[f].default for k, f in _FIELD.items()}

# Flags of the loss kernels (Params.inner in shaders/loss.wgsl).
_MEAN, _WEIGHTED = 1, 2


def normalize(spec, classes=None) -> dict:
    """The loss spec with every key filled in (``DEFAULT`` for those absent); "auto" is kept.

    ``spec``: None, a loss name, or a dict with keys of ``KEYS``; ``classes``: C, to check the
    length of ``weight`` (skipped when None). Checked by the run configuration's validator
    (``config.parse``, its loss fields); raises ConfigError (a ValueError) naming each bad key
    as ``loss.<key>`` with the allowed values. label_smoothing 0 and weight None mean "off"
    and fit every loss.
    """
    if spec is None:
        spec = {}
    elif isinstance(spec, str):
        spec = {"loss": spec}
    elif not isinstance(spec, dict):
        raise ConfigError([("loss", f"expected a loss name or a dict with keys {list(KEYS)}, "
                                    f"got {spec!r}")])
    unknown = [k for k in spec if k not in KEYS]
    if unknown:
        raise ConfigError([("loss", f"unknown key {unknown[0]!r} (known keys: "
                                    f"{', '.join(KEYS)})")])
    flat = {_FIELD[k]: v for k, v in spec.items()
            if v is not None and not (k == "label_smoothing" and v == 0)}
    try:
        cfg = parse(flat, classes=classes)
    except ConfigError as exc:
        key = {f: k for k, f in _FIELD.items()}
        raise ConfigError([(f"loss.{key.get(f, f)}", m) for f, m in exc.errors]) from None
    return {k: cfg.get(f, DEFAULT[k]) for k, f in _FIELD.items()}


def resolve(spec, ends_in_log_softmax: bool, classes=None) -> dict:
    """``normalize(spec, classes)`` with "auto" replaced by the loss it stands for: "nll" when
    the model ends in LogSoftmax, else "cross_entropy"."""
    out = normalize(spec, classes)
    if out["loss"] == "auto":
        out["loss"] = "nll" if ends_in_log_softmax and not out["label_smoothing"] \
            else "cross_entropy"
    return out


def _flags(spec) -> int:
    return (_MEAN if spec["reduction"] == "mean" else 0) | \
        (_WEIGHTED if spec.get("weight") is not None else 0)


def _eps_bits(eps: float) -> int:
    return struct.unpack("<I", struct.pack("<f", eps))[0]


async def nll_loss(b, spec, logp, labels, dlogp, metrics, weight=None):
    """NLLLoss of ``logp`` [B, C] (float32) against ``labels`` [B] (uint32), with label
    smoothing ``spec["label_smoothing"]`` (CrossEntropyLoss after a LogSoftmax; 0 for NLLLoss)
    and class weights ``weight`` (a [C] Tensor, or None): writes ``dlogp`` [B, C] = d loss /
    d logp and ``metrics[slot] = (loss, accuracy)``. One workgroup."""
    batch, classes = logp.shape
    await b.kernel("loss", "nll", pack_params(batch, classes, _flags(spec),
                                              _eps_bits(spec.get("label_smoothing", 0.0))),
                   [b.step, logp, weight if weight is not None else b.dummy, dlogp, labels,
                    metrics], (1, 1, 1))


async def elementwise_loss(b, spec, x, labels, dx, metrics):
    """MSELoss or BCEWithLogitsLoss (``spec["loss"]``) of ``x`` [B, C] against the one-hot
    labels, reduced over all B*C elements: writes ``dx`` [B, C] and ``metrics[slot] = (loss,
    accuracy)``. One workgroup."""
    batch, classes = x.shape
    entry = {"mse": "mse", "bce_with_logits": "bce_with_logits"}[spec["loss"]]
    await b.kernel("loss", entry, pack_params(batch, classes, _flags(spec), 0),
                   [b.step, x, b.dummy, dx, labels, metrics], (1, 1, 1))


def host_terms(spec, row, label: int):
    """One sample's ``(numerator, denominator)`` of the loss's mean form, in Python floats.

    ``row``: the C values the loss reads (log-probabilities for cross_entropy, the raw output
    otherwise). The mean loss over samples is ``sum(numerators) / sum(denominators)`` (weighted
    mean for class weights, per element for mse / bce_with_logits)."""
    kind, c = spec["loss"], len(row)
    if kind in ("cross_entropy", "nll"):
        w = spec.get("weight")
        wy = w[label] if w is not None else 1.0
        eps = spec.get("label_smoothing", 0.0)
        num = -row[label] * wy
        if eps:
            smooth = -sum(v * (w[k] if w is not None else 1.0) for k, v in enumerate(row))
            num = (1.0 - eps) * num + eps / c * smooth
        return num, wy
    if kind == "mse":
        return sum((v - (k == label)) ** 2 for k, v in enumerate(row)), float(c)
    if kind == "bce_with_logits":
        return sum(max(v, 0.0) - v * (k == label) + math.log1p(math.exp(-abs(v)))
                   for k, v in enumerate(row)), float(c)
    raise ValueError(f"loss.loss: {kind!r} is not a resolved loss")

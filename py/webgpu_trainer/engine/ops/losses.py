"""The training losses (PyTorch's criteria) on the GPU: spec validation and the loss dispatches.

A loss spec is a dict (or just its ``"loss"`` name as a string; None = all defaults)::

    {"loss": "auto" | "cross_entropy" | "nll" | "nll_log" | "mse" | "bce_with_logits",
     "reduction": "mean" | "sum",
     "label_smoothing": float in [0, 1]    # cross_entropy and nll_log only
     "weight": [C floats] | None}          # cross_entropy, nll and nll_log only

applied to the model's raw output ``x`` [B, C] and the integer labels ``y`` [B] with the
semantics of ``torch.nn.functional`` (``cross_entropy``, ``nll_loss``, ``mse_loss``,
``binary_cross_entropy_with_logits``; torch/nn/functional.py and aten/src/ATen/native/LossNLL.cpp):

- cross_entropy: ``logp = log_softmax(x)``; ``l_b = (1 - eps) w[y_b] (-logp[b, y_b])
  + eps / C * sum_c w[c] (-logp[b, c])``; mean = ``sum_b l_b / sum_b w[y_b]`` (``/ B`` without
  weight), sum = ``sum_b l_b`` (torch normalises the smoothing term by the same denominator);
- nll: the same with ``logp = x`` and ``eps = 0`` (x should hold log-probabilities);
- nll_log: for a model whose output ``p`` is a Softmax over the classes (probabilities), the
  NLL of ``log(p)``: ``F.nll_loss(torch.log(p), y)`` (with ``eps``:
  ``F.cross_entropy(torch.log(p), y, label_smoothing=eps)``, the same as NLL of log(p) with
  smoothing since log(p) sums to one under exp). Computed fused and numerically safe: the plan
  takes ``log(softmax(z)) = log_softmax(z)`` of the Softmax's input ``z``, so no log of a
  rounded-to-zero probability is ever taken; it is cross_entropy of ``z``;
- mse: ``(x - onehot(y))^2`` over all B*C elements, mean or sum;
- bce_with_logits: ``max(x, 0) - x t + log(1 + exp(-|x|))``, ``t = onehot(y)``, over all B*C
  elements, mean or sum.

"auto": nll when the model ends in LogSoftmax, nll_log when it ends in Softmax (over the
classes), else cross_entropy; mean. Accuracy is always ``argmax_c x[b, c] == y_b`` (first
maximum on ties). A label outside 0..C-1 never reaches a loss (the data is checked when it is
prepared and when a trainer starts); the loss kernels still ignore such a sample and flag it:
the step's accuracy in the metrics becomes minus the number of such labels (the trainer stops
with an error naming the step).
Standard library only (runs in Pyodide).
"""

import math

from ..backends.base import groups_1d
from ..config import BY_NAME, ConfigError, parse
from .reduction import per_row_workgroup

LOSSES = BY_NAME["loss"].choices
SMOOTHING = BY_NAME["label_smoothing"].losses  # the losses that take label_smoothing
REDUCTIONS = BY_NAME["reduction"].choices
KEYS = ("loss", "reduction", "label_smoothing", "weight")
_FIELD = {"loss": "loss", "reduction": "reduction", "label_smoothing": "label_smoothing",
          "weight": "class_weights"}  # spec key -> the run configuration's field
DEFAULT = {k: BY_NAME[f].default for k, f in _FIELD.items()}

# Flags of the loss kernels (Params.inner in shaders/loss.wgsl).
_MEAN, _WEIGHTED, _ELEMENTWISE, _THROUGH_LOG_SOFTMAX, _ALSO_DX, _FROM_SCORES = 1, 2, 4, 8, 16, 32
# Rows of WIDE classes or more: one workgroup per row, then rows_total (shaders/loss.wgsl):
# one thread looping over a whole row passes lavapipe's 65,535 loop iterations per shader.
WIDE = 1024


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


def final_op(graph: dict) -> str | None:
    """"LogSoftmax" or "Softmax" when the model's first output is computed by that op over the
    classes (axis 1 of a [batch, classes] output), else None. ``graph``: the bundle dict."""
    out = graph["outputs"][0]["name"]
    node = next((n for n in graph["nodes"] if out in n["outputs"]), None)
    if node is None or node["op_type"] not in ("LogSoftmax", "Softmax"):
        return None
    opset = int(graph.get("opset") or 17)
    axis = node.get("attrs", {}).get("axis", -1 if opset >= 13 else 1)
    return node["op_type"] if axis in (1, -1) else None


def resolve(spec, ends_in, classes=None) -> dict:
    """``normalize(spec, classes)`` with "auto" replaced by the loss it stands for: "nll" when
    the model ends in LogSoftmax, "nll_log" when it ends in Softmax, else "cross_entropy".

    ``ends_in``: ``final_op(graph)`` ("LogSoftmax", "Softmax" or None; True means
    "LogSoftmax", False None). Raises ValueError for a bad spec, and for "nll_log" on a model
    that does not end in Softmax (its probabilities are what it takes the log of)."""
    out = normalize(spec, classes)
    if ends_in is True or ends_in is False:
        ends_in = "LogSoftmax" if ends_in else None
    if out["loss"] == "auto":
        if ends_in == "LogSoftmax":
            out["loss"] = "cross_entropy" if out["label_smoothing"] else "nll"
        else:
            out["loss"] = "nll_log" if ends_in == "Softmax" else "cross_entropy"
    if out["loss"] == "nll_log" and ends_in != "Softmax":
        raise ValueError("loss.loss: nll_log (NLL of the log of the output) needs a model "
                         "whose output is a Softmax over the classes; this one ends in "
                         f"{ends_in or 'another op'} (use nll after a LogSoftmax, "
                         "cross_entropy on scores)")
    return out


def describe(spec: dict, ends_in) -> str:
    """One line for people: the loss a resolved ``spec`` computes on this model."""
    kind = spec["loss"]
    text = {"cross_entropy": "CrossEntropyLoss of the output",
            "nll": "NLLLoss of the output (log-probabilities)",
            "nll_log": "NLLLoss of log(output): the output is a Softmax's probabilities, so "
                       "the loss is computed as LogSoftmax of the Softmax's input (fused, "
                       "numerically safe)",
            "mse": "MSELoss of the output against one-hot labels",
            "bce_with_logits": "BCEWithLogitsLoss of the output against one-hot labels"}[kind]
    if kind == "cross_entropy" and ends_in == "Softmax":
        text += " (a second softmax over probabilities: nll_log is what such a model means)"
    extra = [spec["reduction"]]
    if spec.get("label_smoothing"):
        extra.append(f"label smoothing {spec['label_smoothing']:g}")
    if spec.get("weight") is not None:
        extra.append("class weights")
    return f"{kind}: {text}; {', '.join(extra)}"


def _flags(spec) -> int:
    return (_MEAN if spec["reduction"] == "mean" else 0) | \
        (_WEIGHTED if spec.get("weight") is not None else 0)


# Values at most that nll_loss's one workgroup takes through the LogSoftmax: it loops over each
# row twice more, where the LogSoftmax backward spreads the rows over the whole GPU.
FUSED_VALUES = 1 << 16


def fuses_head(b, batch: int, classes: int) -> bool:
    """True when ``nll_loss(..., through_log_softmax=True)`` should replace the head's
    LogSoftmax backward for ``batch`` rows of ``classes``: rows shorter than 256 (softmax.py
    runs longer rows a workgroup each) and at most ``FUSED_VALUES`` values, and on CPU
    adapters only where that backward sums each row in order (one thread a row), so the
    golden numbers keep their bits (tests/test_golden.py)."""
    return classes < 256 and batch * classes <= FUSED_VALUES and \
        (b.tiled or not per_row_workgroup(batch, classes))


FROM_SCORES_MAX = 32  # classes at most for nll's FROM_SCORES (each dx element its row's lse)


def takes_scores(b, batch: int, classes: int) -> bool:
    """Whether the head's LogSoftmax forward can run inside nll (``nll_loss(..., scores=z)``,
    ``Builder.FUSE_LOSS_SOFTMAX``): GPU adapters, where that forward is softmax.wgsl
    ``forward_seg`` (whose sums loss.wgsl ``row_lse`` repeats, so the same bits), rows of
    at most ``FROM_SCORES_MAX`` classes (every dx element recomputes its row's lse)."""
    from .softmax import segmented
    return bool(getattr(b, "FUSE_LOSS_SOFTMAX", False)) and segmented(b, classes, 1) and \
        classes <= FROM_SCORES_MAX and fuses_head(b, batch, classes)


async def nll_loss(b, spec, logp, labels, dlogp, metrics, weight=None,
                   through_log_softmax=False, also_dlogp=None, scores=None):
    """NLLLoss of ``logp`` [B, C] (float32) against ``labels`` [B] (uint32), with label
    smoothing ``spec["label_smoothing"]`` (CrossEntropyLoss after a LogSoftmax; 0 for NLLLoss)
    and class weights ``weight`` (a [C] Tensor, or None): writes ``dlogp`` [B, C] = d loss /
    d logp and ``metrics[slot] = (loss, accuracy)``. One workgroup (GPU adapters: several,
    ``nll_groups``).

    ``through_log_softmax`` (C below ``WIDE``; see ``fuses_head``): ``logp`` is log_softmax(z) over
    the classes and ``dlogp`` receives d loss / d z instead, dz = g - exp(logp) * sum_c g
    (PyTorch's _log_softmax_backward_data; g the gradient above), the same values and sums in
    the same order as softmax.backward would compute from g, one dispatch fewer;
    ``also_dlogp`` (a [B, C] Tensor or None) then receives g too. ``scores`` (with
    ``through_log_softmax``, no ``also_dlogp``; ``takes_scores``): the LogSoftmax's input z
    [B, C]; the dispatch computes logp = log_softmax(z) itself, as softmax.wgsl forward_seg
    would (the same bits), and writes it into ``logp``: the head's forward, another dispatch
    fewer."""
    batch, classes = logp.shape
    if scores is not None and (not through_log_softmax or also_dlogp is not None):
        raise ValueError("nll_loss: scores need through_log_softmax and no also_dlogp")
    flags = _flags(spec) | (_THROUGH_LOG_SOFTMAX if through_log_softmax else 0) | \
        (_ALSO_DX if through_log_softmax and also_dlogp is not None else 0) | \
        (_FROM_SCORES if scores is not None else 0)
    params = dict(outer=batch, C=classes, inner=flags, eps=spec.get("label_smoothing", 0.0))
    if through_log_softmax and classes >= WIDE:
        raise ValueError(f"nll_loss: {classes} classes take the two-dispatch loss, which "
                         "cannot write the LogSoftmax input's gradient")
    if classes >= WIDE:
        rows = b.temp(5 * batch, "loss_rows")
        await b.kernel("loss", "nll_rows", groups_1d(batch, 1), params=params, st=b.step,
                       x=logp, y=weight, out=dlogp, labels=labels, rows=rows)
        await b.kernel("loss", "rows_total", (1, 1, 1), params=params, st=b.step, rows=rows,
                       metrics=metrics)
        return
    gout = logp if scores is not None else also_dlogp if through_log_softmax else None
    await b.kernel("loss", "nll", (nll_groups(b, batch, classes), 1, 1), params=params,
                   st=b.step, x=logp if scores is None else scores, y=weight,
                   out=dlogp, labels=labels, metrics=metrics, gout=gout)


NLL_GROUPS = 64  # nll's workgroups on GPU adapters at most (each sums the whole batch)


def nll_groups(b, batch: int, classes: int) -> int:
    """Workgroups of loss.wgsl ``nll``: on GPU adapters (``Builder.NLL_WIDE``) one per 256
    elements of dx up to ``NLL_GROUPS``, each summing the batch as the one workgroup does (the
    same divisor, the same bits) and writing its share of dx (H200: at batch 1000 the one
    workgroup, ~4 rows a thread, was 0.1 ms of a 0.75 ms MLP step timed alone); else one."""
    if not (b.tiled and b.NLL_WIDE):
        return 1
    return max(1, min(NLL_GROUPS, -(-batch * classes // 256)))


async def elementwise_loss(b, spec, x, labels, dx, metrics):
    """MSELoss or BCEWithLogitsLoss (``spec["loss"]``) of ``x`` [B, C] against the one-hot
    labels, reduced over all B*C elements: writes ``dx`` [B, C] and ``metrics[slot] = (loss,
    accuracy)``. One workgroup."""
    batch, classes = x.shape
    entry = {"mse": "mse", "bce_with_logits": "bce_with_logits"}[spec["loss"]]
    params = dict(outer=batch, C=classes, inner=_flags(spec), eps=0.0)
    if classes >= WIDE:
        rows = b.temp(5 * batch, "loss_rows")
        await b.kernel("loss", f"{entry}_rows", groups_1d(batch, 1), params=params, st=b.step,
                       x=x, out=dx, labels=labels, rows=rows)
        await b.kernel("loss", "rows_total", (1, 1, 1),
                       params={**params, "inner": params["inner"] | _ELEMENTWISE}, st=b.step,
                       rows=rows, metrics=metrics)
        return
    await b.kernel("loss", entry, (1, 1, 1), params=params, st=b.step,
                   x=x, out=dx, labels=labels, metrics=metrics)


def host_terms(spec, row, label: int):
    """One sample's ``(numerator, denominator)`` of the loss's mean form, in Python floats.

    ``row``: the C values the loss reads (log-probabilities for cross_entropy, the raw output
    otherwise). The mean loss over samples is ``sum(numerators) / sum(denominators)`` (weighted
    mean for class weights, per element for mse / bce_with_logits)."""
    kind, c = spec["loss"], len(row)
    if kind in ("cross_entropy", "nll", "nll_log"):
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

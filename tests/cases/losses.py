"""The training losses (ops/losses.py, shaders/loss.wgsl): every loss x reduction x (class
weights, label smoothing where they apply) on models with raw logits and with a final
LogSoftmax, batch x classes from 1 x 7 to 64 x 10, and 5 x 1,030 (wide rows)."""

import numpy as np

from cases import case
from conftest import f32, head, node, rng_for

# id: (spec without weight; weight on/off). Every loss x reduction x weight / label smoothing.
SPECS = {
    "ce_mean": ({"loss": "cross_entropy"}, False),
    "ce_sum": ({"loss": "cross_entropy", "reduction": "sum"}, False),
    "ce_mean_weight": ({"loss": "cross_entropy"}, True),
    "ce_sum_weight": ({"loss": "cross_entropy", "reduction": "sum"}, True),
    "ce_mean_ls": ({"loss": "cross_entropy", "label_smoothing": 0.1}, False),
    "ce_sum_ls": ({"loss": "cross_entropy", "reduction": "sum", "label_smoothing": 0.3}, False),
    "ce_mean_weight_ls": ({"loss": "cross_entropy", "label_smoothing": 0.2}, True),
    "ce_sum_weight_ls": ({"loss": "cross_entropy", "reduction": "sum",
                          "label_smoothing": 0.05}, True),
    "nll_mean": ({"loss": "nll"}, False),
    "nll_sum": ({"loss": "nll", "reduction": "sum"}, False),
    "nll_mean_weight": ({"loss": "nll"}, True),
    "nll_sum_weight": ({"loss": "nll", "reduction": "sum"}, True),
    "mse_mean": ({"loss": "mse"}, False),
    "mse_sum": ({"loss": "mse", "reduction": "sum"}, False),
    "bce_mean": ({"loss": "bce_with_logits"}, False),
    "bce_sum": ({"loss": "bce_with_logits", "reduction": "sum"}, False),
    "auto": (None, False),
    "auto_ls": ({"label_smoothing": 0.1}, False),
}
SHAPES = [(7, 2), (1, 7), (64, 10), (7, 33)]  # (batch, classes)


def class_weights(classes, rng):
    return [float(v) for v in f32(rng.uniform(0.2, 2.0, classes))]


def spec_of(name, classes):
    """The loss spec of ``SPECS[name]`` for ``classes`` classes (None for "auto")."""
    spec, weighted = SPECS[name]
    spec = dict(spec or {})
    if weighted:
        spec["weight"] = class_weights(classes, rng_for("w", name, classes))
    return spec or None


def model(batch, classes, log_softmax_end, rng, features=5, hidden=6):
    """input [N, 5] -> Gemm -> Relu -> Gemm -> logits [N, C] (-> LogSoftmax -> output):
    (nodes, tensors, x, labels)."""
    w1 = f32(rng.standard_normal((hidden, features)) / np.sqrt(features))
    b1 = f32(rng.standard_normal(hidden) * 0.1)
    w2 = f32(rng.standard_normal((classes, hidden)))
    b2 = f32(rng.standard_normal(classes) * 0.5)
    nodes = [node("Gemm", ["input", "fc1.w", "fc1.b"], ["h"], transB=1),
             node("Relu", ["h"], ["r"]),
             node("Gemm", ["r", "fc2.w", "fc2.b"], ["logits"], transB=1)]
    if log_softmax_end:
        nodes.append(node("LogSoftmax", ["logits"], ["output"], axis=-1))
    tensors = [("fc1.w", w1, "param"), ("fc1.b", b1, "param"), ("fc2.w", w2, "param"),
               ("fc2.b", b2, "param")]
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)
    return nodes, tensors, x, labels


def _loss_case(name, batch, classes, log_softmax_end, seed, checks=()):
    rng = rng_for("loss", seed, batch, classes, log_softmax_end)
    nodes, tensors, x, labels = model(batch, classes, log_softmax_end, rng)
    out = nodes[-1]["outputs"][0]
    where = "after_log_softmax" if log_softmax_end else f"{batch}x{classes}"
    return case(f"losses/{name}_{where}", nodes, tensors, x, labels,
                loss=spec_of(name, classes), tag="loss:" + name.split("_")[0],
                acts=("r", "logits"), dacts=(out, "h"), checks=checks)


def _resolves_to(kind):
    def check(res, want):
        assert res["plan"].loss_spec["loss"] == kind
    return check


def _cross_entropy_on_raw_logits():
    """A model without a final LogSoftmax trains with CrossEntropyLoss(mean); the plan's own
    LogSoftmax gives the reference's log-probabilities."""
    batch, features, classes = 7, 33, 10
    rng = rng_for("cross_entropy")
    nodes, tensors = head("input", features, classes, rng)
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)

    def log_probabilities(res, want):
        from harness import check
        check("CrossEntropy", "fwd", res["acts"]["loss/log_softmax"], want["logp"],
              "log-probabilities")

    return case("losses/cross_entropy_on_raw_logits", nodes[:1], tensors, x, labels,
                tag="CrossEntropy", dacts=("logits",), checks=(log_probabilities,))


def _parity_losses():
    """Raw logits of one Gemm, batch 4, 5 classes (the browser's first loss cases)."""
    rng = rng_for("parity_losses")
    out = []
    for spec in ({"loss": "cross_entropy", "label_smoothing": 0.1,
                  "weight": [1.0, 2.0, 0.5, 1.5, 1.0]},
                 {"loss": "mse", "reduction": "sum"}, {"loss": "bce_with_logits"}):
        f, classes, batch = 6, 5, 4
        nodes = [node("Gemm", ["input", "w", "b"], ["logits"], transB=1)]
        tensors = [("w", f32(rng.standard_normal((classes, f))), "param"),
                   ("b", f32(rng.standard_normal(classes) * 0.1), "param")]
        x = f32(rng.standard_normal((batch, f)))
        out.append(case(f"losses/one_gemm_{spec['loss']}", nodes, tensors, x,
                        np.arange(batch) % classes, loss=spec, tag="loss:" + spec["loss"],
                        dacts=("logits",), selfcheck=True))
    return out


GRID = [_loss_case(name, batch, classes, False, k)
        for k, name in enumerate(SPECS) for batch, classes in SHAPES]
AFTER_LOG_SOFTMAX = [
    _loss_case(name, 7, 10, True, 99,
               checks=(_resolves_to({"auto": "nll"}.get(name, SPECS[name][0] and
                                                         SPECS[name][0].get("loss"))),))
    for name in ["auto", "nll_mean_weight", "ce_sum_weight_ls", "mse_sum", "bce_mean"]]
# Rows of ops.losses.WIDE (1,024) classes or more: one workgroup per row, then rows_total.
WIDE_ROWS = [_loss_case(name, 5, 1030, False, 200 + k)
             for k, name in enumerate(["ce_mean_weight_ls", "ce_sum_ls", "nll_sum_weight",
                                       "nll_mean", "mse_mean", "bce_sum", "auto"])]
CASES = GRID + AFTER_LOG_SOFTMAX + WIDE_ROWS + [_cross_entropy_on_raw_logits()] + \
    _parity_losses()

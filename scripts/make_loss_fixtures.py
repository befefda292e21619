"""Write tests/fixtures/losses.json: torch.nn.functional's loss values and input gradients that
tests/test_ops_losses.py compares with the numpy engine's losses (webgpu_trainer.cpu.losses).

For every loss spec (cross_entropy with weight / label_smoothing, nll with weight, mse,
bce_with_logits; reduction mean and sum) and a few [B, C] shapes (B in 1, 7, 64; C in 2, 7,
10, 33), in float64: the input x (9 significant digits, so JSON holds it exactly), the integer
labels, the loss and d loss / d x (13 significant digits). mse and bce_with_logits compare
with the one-hot labels as float targets; nll's input is a log_softmax. Some cases scale the
logits by 30 (saturated softmax / sigmoid). Only this script needs torch:
`.venv/bin/python scripts/make_loss_fixtures.py`.
"""

import json
import pathlib

import numpy as np
import torch
import torch.nn.functional as F

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "losses.json"

# (id, spec); every spec runs on SMALL shapes plus one of BIG (in turn) at scale 1.
SPECS = [
    ("ce_mean", {"loss": "cross_entropy", "reduction": "mean"}),
    ("ce_sum", {"loss": "cross_entropy", "reduction": "sum"}),
    ("ce_mean_weight", {"loss": "cross_entropy", "reduction": "mean", "weight": True}),
    ("ce_sum_weight", {"loss": "cross_entropy", "reduction": "sum", "weight": True}),
    ("ce_mean_ls", {"loss": "cross_entropy", "reduction": "mean", "label_smoothing": 0.1}),
    ("ce_sum_ls", {"loss": "cross_entropy", "reduction": "sum", "label_smoothing": 0.25}),
    ("ce_mean_weight_ls", {"loss": "cross_entropy", "reduction": "mean", "weight": True,
                           "label_smoothing": 0.1}),
    ("ce_sum_weight_ls", {"loss": "cross_entropy", "reduction": "sum", "weight": True,
                          "label_smoothing": 0.3}),
    ("ce_mean_ls1", {"loss": "cross_entropy", "reduction": "mean", "label_smoothing": 1.0}),
    ("nll_mean", {"loss": "nll", "reduction": "mean"}),
    ("nll_sum", {"loss": "nll", "reduction": "sum"}),
    ("nll_mean_weight", {"loss": "nll", "reduction": "mean", "weight": True}),
    ("nll_sum_weight", {"loss": "nll", "reduction": "sum", "weight": True}),
    ("mse_mean", {"loss": "mse", "reduction": "mean"}),
    ("mse_sum", {"loss": "mse", "reduction": "sum"}),
    ("bce_mean", {"loss": "bce_with_logits", "reduction": "mean"}),
    ("bce_sum", {"loss": "bce_with_logits", "reduction": "sum"}),
]
SMALL = [(1, 7), (7, 2)]
BIG = [(7, 33), (64, 10), (7, 10)]
LARGEST = ["ce_mean_weight_ls", "bce_sum"]  # also on (64, 33)
SCALED = ["ce_mean_weight_ls", "nll_sum", "mse_mean", "bce_mean", "bce_sum"]  # x * 30 on (7, 10)


def _round(a, digits):
    return [float(f"{v:.{digits}g}") for v in np.asarray(a, np.float64).ravel()]


def torch_loss(spec, x, labels, weight):
    """(loss, dx) of torch.nn.functional in float64."""
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    yt = torch.tensor(labels, dtype=torch.int64)
    wt = None if weight is None else torch.tensor(weight, dtype=torch.float64)
    kind, red = spec["loss"], spec["reduction"]
    if kind == "cross_entropy":
        loss = F.cross_entropy(xt, yt, weight=wt, reduction=red,
                               label_smoothing=spec.get("label_smoothing", 0.0))
    elif kind == "nll":
        loss = F.nll_loss(xt, yt, weight=wt, reduction=red)
    else:
        target = F.one_hot(yt, x.shape[1]).to(torch.float64)
        fn = F.mse_loss if kind == "mse" else F.binary_cross_entropy_with_logits
        loss = fn(xt, target, reduction=red)
    loss.backward()
    return loss.item(), xt.grad.numpy()


def make_case(case_id, spec, batch, classes, scale, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, classes)) * scale
    if spec["loss"] == "nll":
        x = torch.log_softmax(torch.tensor(x), dim=1).numpy()
    x = np.array(_round(x, 9)).reshape(batch, classes)
    labels = rng.integers(0, classes, batch)
    weight = _round(rng.uniform(0.2, 2.0, classes), 9) if spec.get("weight") else None
    loss, grad = torch_loss(spec, x, labels, weight)
    out_spec = {**spec, "weight": weight}
    return {"id": case_id, "spec": out_spec, "shape": [batch, classes], "x": _round(x, 9),
            "labels": [int(v) for v in labels], "loss": float(f"{loss:.13g}"),
            "grad": _round(grad, 13)}


def main():
    cases = []
    seed = 0
    for k, (name, spec) in enumerate(SPECS):
        shapes = SMALL + [BIG[k % len(BIG)]] + ([(64, 33)] if name in LARGEST else [])
        for batch, classes in shapes:
            seed += 1
            cases.append(make_case(f"{name}_{batch}x{classes}", spec, batch, classes, 1.0, seed))
        if name in SCALED:
            seed += 1
            cases.append(make_case(f"{name}_7x10_x30", spec, 7, 10, 30.0, seed))
    doc = {"torch": torch.__version__, "dtype": "float64", "cases": cases}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({len(cases)} cases, {OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()

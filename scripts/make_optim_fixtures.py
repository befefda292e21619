"""Write tests/fixtures/optim.json: torch.optim trajectories that tests/test_optim.py replays.

The problem: one Gemm (Linear, weight [3, 5] + bias [3]) -> LogSoftmax -> NLLLoss(mean) on a
fixed batch of 4. For each optimizer configuration, 20 steps of torch.optim in float64 from the
same float32-representable start; stored: the loss before every step and the parameters after
every step. Only this script needs torch: `python scripts/make_optim_fixtures.py`.
"""

import json
import pathlib

import numpy as np
import torch

STEPS = 20
OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "optim.json"

# name: (torch class, torch kwargs, engine class, engine kwargs)
CONFIGS = {
    "sgd": ("SGD", {"lr": 0.1}, "SGD", {}),
    "sgd_momentum_wd": ("SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-2}, "SGD",
                        {"momentum": 0.9, "weight_decay": 1e-2}),
    "sgd_nesterov_wd": ("SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-2,
                                "nesterov": True}, "SGD",
                        {"momentum": 0.9, "weight_decay": 1e-2, "nesterov": True}),
    "sgd_dampening": ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.5}, "SGD",
                      {"momentum": 0.9, "dampening": 0.5}),
    "adam": ("Adam", {"lr": 1e-2}, "Adam", {}),
    "adam_wd": ("Adam", {"lr": 1e-2, "weight_decay": 1e-2}, "Adam", {"weight_decay": 1e-2}),
    "adamw": ("AdamW", {"lr": 1e-2, "weight_decay": 1e-2}, "Adam",
              {"weight_decay": 1e-2, "decoupled": True}),
    "adam_betas_eps": ("Adam", {"lr": 3e-2, "betas": (0.8, 0.99), "eps": 1e-6}, "Adam",
                       {"betas": [0.8, 0.99], "eps": 1e-6}),
    "adagrad_decay_init": ("Adagrad", {"lr": 0.1, "lr_decay": 0.01,
                                       "initial_accumulator_value": 0.1}, "Adagrad",
                           {"lr_decay": 0.01, "initial_accumulator_value": 0.1}),
    "adagrad_wd": ("Adagrad", {"lr": 0.1, "weight_decay": 1e-2}, "Adagrad",
                   {"weight_decay": 1e-2}),
}


def main():
    rng = np.random.default_rng(20240607)
    batch, features, classes = 4, 5, 3
    x = rng.standard_normal((batch, features)).astype(np.float32)
    labels = np.array([0, 2, 1, 2])
    w0 = (rng.standard_normal((classes, features)) * 0.5).astype(np.float32)
    b0 = (rng.standard_normal(classes) * 0.5).astype(np.float32)
    out = {"problem": {"batch": batch, "features": features, "classes": classes,
                       "x": x.tolist(), "labels": labels.tolist(),
                       "params": {"fc.weight": w0.tolist(), "fc.bias": b0.tolist()}},
           "steps": STEPS, "torch": torch.__version__, "configs": {}}
    xt = torch.tensor(x, dtype=torch.float64)
    yt = torch.tensor(labels)
    for name, (tcls, tkw, ecls, ekw) in CONFIGS.items():
        w = torch.tensor(w0, dtype=torch.float64, requires_grad=True)
        b = torch.tensor(b0, dtype=torch.float64, requires_grad=True)
        opt = getattr(torch.optim, tcls)([w, b], **tkw)
        losses, traj = [], []
        for _ in range(STEPS):
            opt.zero_grad()
            loss = torch.nn.functional.nll_loss(torch.log_softmax(xt @ w.T + b, dim=1), yt)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            traj.append({"fc.weight": w.detach().numpy().tolist(),
                         "fc.bias": b.detach().numpy().tolist()})
        out["configs"][name] = {"torch": {"class": tcls, "kwargs": tkw},
                                "engine": {"class": ecls, "kwargs": ekw}, "lr": tkw["lr"],
                                "losses": losses, "params": traj}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out) + "\n")
    print(f"wrote {OUT} ({len(CONFIGS)} configurations x {STEPS} steps)")


if __name__ == "__main__":
    main()

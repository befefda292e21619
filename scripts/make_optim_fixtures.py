"""Write tests/fixtures/optim.json: torch.optim trajectories that tests/test_optim.py replays.

The problem: one Gemm (Linear, weight [3, 5] + bias [3]) -> LogSoftmax -> NLLLoss(mean) on a
fixed batch of 4. For each optimizer configuration, 20 steps of torch.optim in float64 from the
same float32-representable start; stored: the loss before every step and the parameters after
every step. A configuration may clip gradients (torch.nn.utils.clip_grad_norm_ before each step;
the grad norms are stored) or schedule the lr (a torch lr_scheduler stepped as SCHEDULE_EVERY
says). "schedulers": the lr of every optimizer step of each scheduler (SCHED_STEPS steps,
SCHED_PER_EPOCH steps per epoch; epoch-wise schedulers step after each epoch, OneCycleLR after
each batch). OneCycleLR with cycle_momentum=True (torch's default) also writes the optimizer's
momentum (SGD, RMSprop) or beta1 (Adam, AdamW) before every step: those configurations store it
("momenta"), and so do the scheduler cases that cycle it. Only this script needs torch:
`python scripts/make_optim_fixtures.py`.
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
    "rmsprop": ("RMSprop", {"lr": 1e-2}, "RMSprop", {}),
    "rmsprop_centered_momentum_wd": ("RMSprop", {"lr": 1e-2, "alpha": 0.9, "momentum": 0.9,
                                                 "centered": True, "weight_decay": 1e-2},
                                     "RMSprop", {"alpha": 0.9, "momentum": 0.9, "centered": True,
                                                 "weight_decay": 1e-2}),
    "rmsprop_momentum_eps": ("RMSprop", {"lr": 3e-3, "momentum": 0.5, "eps": 1e-4}, "RMSprop",
                             {"momentum": 0.5, "eps": 1e-4}),
    "adadelta": ("Adadelta", {"lr": 1.0}, "Adadelta", {}),
    "adadelta_rho_wd": ("Adadelta", {"lr": 0.5, "rho": 0.8, "eps": 1e-5, "weight_decay": 1e-2},
                        "Adadelta", {"rho": 0.8, "eps": 1e-5, "weight_decay": 1e-2}),
    "adam_amsgrad": ("Adam", {"lr": 1e-2, "amsgrad": True, "betas": (0.9, 0.9)}, "Adam",
                     {"amsgrad": True, "betas": [0.9, 0.9]}),
    "adamw_amsgrad": ("AdamW", {"lr": 1e-2, "weight_decay": 1e-2, "amsgrad": True,
                                "betas": (0.9, 0.9)}, "Adam",
                      {"weight_decay": 1e-2, "decoupled": True, "amsgrad": True,
                       "betas": [0.9, 0.9]}),
    "sgd_momentum_clip": ("SGD", {"lr": 0.1, "momentum": 0.9}, "SGD",
                          {"momentum": 0.9, "clip_grad_norm": 0.05}),
    "adam_clip": ("Adam", {"lr": 1e-2}, "Adam", {"clip_grad_norm": 0.1}),
    "adamw_onecycle": ("AdamW", {"lr": 1e-2, "weight_decay": 1e-2}, "Adam",
                       {"weight_decay": 1e-2, "decoupled": True}),
    "sgd_steplr": ("SGD", {"lr": 0.1, "momentum": 0.9}, "SGD", {"momentum": 0.9}),
    # OneCycleLR cycling the momentum / beta1 (cycle_momentum=True)
    "sgd_onecycle_momentum": ("SGD", {"lr": 0.1, "momentum": 0.9}, "SGD", {"momentum": 0.9}),
    "sgd_zero_momentum_onecycle": ("SGD", {"lr": 0.1}, "SGD", {}),
    "sgd_nesterov_onecycle_3phase": ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True,
                                             "weight_decay": 1e-2}, "SGD",
                                     {"momentum": 0.9, "nesterov": True, "weight_decay": 1e-2}),
    "adam_onecycle_beta1": ("Adam", {"lr": 1e-2}, "Adam", {}),
    "adamw_amsgrad_onecycle_beta1_3phase": ("AdamW", {"lr": 1e-2, "weight_decay": 1e-2,
                                                      "amsgrad": True}, "Adam",
                                            {"weight_decay": 1e-2, "decoupled": True,
                                             "amsgrad": True}),
    "rmsprop_centered_onecycle_momentum": ("RMSprop", {"lr": 1e-2, "momentum": 0.5,
                                                       "centered": True}, "RMSprop",
                                           {"momentum": 0.5, "centered": True}),
}

# configuration -> the lr scheduler it runs (the engine's schedulers.make spec); stepped every
# SCHEDULE_EVERY optimizer steps (OneCycleLR: every step).
SCHEDULE = {
    "adamw_onecycle": {"name": "OneCycleLR", "max_lr": 5e-2, "total_steps": STEPS,
                       "cycle_momentum": False},
    "sgd_steplr": {"name": "StepLR", "step_size": 2, "gamma": 0.5},
    "sgd_onecycle_momentum": {"name": "OneCycleLR", "max_lr": 0.2, "total_steps": STEPS},
    "sgd_zero_momentum_onecycle": {"name": "OneCycleLR", "max_lr": 0.2, "total_steps": STEPS},
    "sgd_nesterov_onecycle_3phase": {"name": "OneCycleLR", "max_lr": 0.2, "total_steps": STEPS,
                                     "three_phase": True, "anneal_strategy": "linear",
                                     "pct_start": 0.25, "base_momentum": 0.8,
                                     "max_momentum": 0.9},
    "adam_onecycle_beta1": {"name": "OneCycleLR", "max_lr": 5e-2, "total_steps": STEPS},
    "adamw_amsgrad_onecycle_beta1_3phase": {"name": "OneCycleLR", "max_lr": 5e-2,
                                            "total_steps": STEPS, "three_phase": True,
                                            "base_momentum": 0.7, "max_momentum": 0.9},
    "rmsprop_centered_onecycle_momentum": {"name": "OneCycleLR", "max_lr": 5e-3,
                                           "total_steps": STEPS},
}
SCHEDULE_EVERY = 4  # optimizer steps per "epoch" of the epoch-wise schedulers

SCHED_STEPS, SCHED_PER_EPOCH = 30, 3
SCHEDULERS = {
    "steplr": ({"name": "StepLR", "step_size": 2, "gamma": 0.7}, 0.1),
    "steplr_1": ({"name": "StepLR", "step_size": 1, "gamma": 0.7}, 1.0),
    "exponentiallr": ({"name": "ExponentialLR", "gamma": 0.9}, 0.05),
    "cosineannealinglr": ({"name": "CosineAnnealingLR", "T_max": 4, "eta_min": 1e-3}, 0.1),
    "cosineannealinglr_long": ({"name": "CosineAnnealingLR", "T_max": 10}, 0.3),
    "onecyclelr": ({"name": "OneCycleLR", "max_lr": 0.1, "total_steps": SCHED_STEPS,
                    "cycle_momentum": False}, 0.1),
    "onecyclelr_linear_3phase": ({"name": "OneCycleLR", "max_lr": 0.2, "total_steps": 40,
                                  "pct_start": 0.25, "anneal_strategy": "linear",
                                  "div_factor": 10.0, "final_div_factor": 100.0,
                                  "three_phase": True, "cycle_momentum": False}, 0.1),
    # cycle_momentum=True (torch's default): "momenta" holds SGD's momentum before each step,
    # Adam's beta1 for "onecyclelr_beta1_3phase".
    "onecyclelr_momentum": ({"name": "OneCycleLR", "max_lr": 0.1, "total_steps": SCHED_STEPS},
                            0.1),
    "onecyclelr_beta1_3phase": ({"name": "OneCycleLR", "max_lr": 0.2, "total_steps": 40,
                                 "pct_start": 0.25, "anneal_strategy": "linear",
                                 "three_phase": True, "base_momentum": 0.8,
                                 "max_momentum": 0.98}, 0.1),
}
SCHED_OPTIMIZER = {"onecyclelr_beta1_3phase": "Adam"}  # else SGD


def _torch_scheduler(opt, spec):
    kwargs = {k: v for k, v in spec.items() if k != "name"}
    return getattr(torch.optim.lr_scheduler, spec["name"])(opt, **kwargs)


def _momentum(opt):
    """The momentum / beta1 the optimizer's next step uses."""
    group = opt.param_groups[0]
    return group["betas"][0] if "betas" in group else group.get("momentum", 0.0)


def scheduler_lrs(spec, lr, optimizer="SGD"):
    """torch's lr and momentum (beta1 for Adam) at each of SCHED_STEPS optimizer steps."""
    w = torch.zeros(1, requires_grad=True)
    opt = getattr(torch.optim, optimizer)([w], lr=lr)
    sched = _torch_scheduler(opt, spec)
    per_batch = spec["name"] == "OneCycleLR"
    lrs, momenta = [], []
    for t in range(1, SCHED_STEPS + 1):
        lrs.append(opt.param_groups[0]["lr"])
        momenta.append(_momentum(opt))
        opt.step()
        if per_batch or t % SCHED_PER_EPOCH == 0:
            sched.step()
    return lrs, momenta


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
        spec = SCHEDULE.get(name)
        sched = _torch_scheduler(opt, spec) if spec else None
        max_norm = ekw.get("clip_grad_norm", 0.0)
        losses, traj, norms, lrs, momenta = [], [], [], [], []
        for t in range(1, STEPS + 1):
            opt.zero_grad()
            loss = torch.nn.functional.nll_loss(torch.log_softmax(xt @ w.T + b, dim=1), yt)
            loss.backward()
            if max_norm:
                norms.append(torch.nn.utils.clip_grad_norm_([w, b], max_norm).item())
            lrs.append(opt.param_groups[0]["lr"])
            momenta.append(_momentum(opt))
            opt.step()
            if sched and (spec["name"] == "OneCycleLR" or t % SCHEDULE_EVERY == 0):
                sched.step()
            losses.append(loss.item())
            traj.append({"fc.weight": w.detach().numpy().tolist(),
                         "fc.bias": b.detach().numpy().tolist()})
        if max_norm:
            assert min(norms) > max_norm, f"{name}: max_norm {max_norm} does not always clip"
        cfg = {"torch": {"class": tcls, "kwargs": tkw},
               "engine": {"class": ecls, "kwargs": ekw}, "lr": tkw["lr"],
               "losses": losses, "params": traj}
        if max_norm:
            cfg["grad_norms"] = norms
        if spec:
            cfg.update(scheduler=spec, steps_per_epoch=SCHEDULE_EVERY, lrs=lrs)
            if spec["name"] == "OneCycleLR" and spec.get("cycle_momentum", True):
                cfg["momenta"] = momenta
        out["configs"][name] = cfg
    out["schedulers"] = {}
    for name, (spec, lr) in SCHEDULERS.items():
        optimizer = SCHED_OPTIMIZER.get(name, "SGD")
        lrs, momenta = scheduler_lrs(spec, lr, optimizer)
        out["schedulers"][name] = {"spec": spec, "lr": lr, "steps_per_epoch": SCHED_PER_EPOCH,
                                   "steps": SCHED_STEPS, "lrs": lrs}
        if spec["name"] == "OneCycleLR" and spec.get("cycle_momentum", True):
            out["schedulers"][name].update(optimizer=optimizer, momenta=momenta)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out) + "\n")
    print(f"wrote {OUT} ({len(CONFIGS)} configurations x {STEPS} steps, "
          f"{len(SCHEDULERS)} schedulers x {SCHED_STEPS} steps)")


if __name__ == "__main__":
    main()

"""The command-line options of ``webgpu-trainer train`` (``add_train``: the run's config keys,
torch.optim's optimizer options, the learning-rate schedule, the loss) and the fine-tuning
options it shares with ``summary`` (``add_freeze_options``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..engine import train as train_mod
from ..engine.ops import losses

TRAIN_KEYS = ("optimizer", "lr", "batch_size", "epochs", "seed", "init", "momentum",
              "weight_decay", "max_steps", "eval_images", "report_every", "clip_grad_norm")

# Optimizer options -> config["optimizer_args"] under torch.optim's keyword names (argparse dest
# "opt_<keyword>"); optim.make refuses a keyword the chosen optimizer does not take.
OPTIMIZER_OPTIONS = (
    ("--nesterov", "nesterov", {"action": "store_true", "default": None,
                                "help": "SGD: Nesterov momentum (needs --momentum > 0)"}),
    ("--dampening", "dampening", {"type": float, "help": "SGD: dampening (default 0)"}),
    ("--betas", "betas", {"type": float, "nargs": 2, "metavar": ("BETA1", "BETA2"),
                          "help": "Adam/AdamW: betas (default 0.9 0.999)"}),
    ("--eps", "eps", {"type": float, "help": "term added to the denominator (default: Adam/AdamW "
                                            "and RMSprop 1e-8, Adagrad 1e-10, Adadelta 1e-6)"}),
    ("--amsgrad", "amsgrad", {"action": "store_true", "default": None,
                              "help": "Adam/AdamW: the AMSGrad variant"}),
    ("--alpha", "alpha", {"type": float, "help": "RMSprop: smoothing constant (default 0.99)"}),
    ("--centered", "centered", {"action": "store_true", "default": None,
                                "help": "RMSprop: centered (normalise by the variance)"}),
    ("--rho", "rho", {"type": float, "help": "Adadelta: rho (default 0.9)"}),
    ("--lr-decay", "lr_decay", {"type": float, "help": "Adagrad: lr decay (default 0)"}),
    ("--initial-accumulator-value", "initial_accumulator_value",
     {"type": float, "help": "Adagrad: initial accumulator value (default 0)"}),
)

# Schedule options -> config["scheduler"] under torch's keyword names (dest "sched_<keyword>").
SCHEDULER_OPTIONS = (
    ("--step-size", "step_size", {"type": int, "help": "steplr: epochs between decays "
                                                       "(default 1)"}),
    ("--gamma", "gamma", {"type": float, "help": "steplr: decay factor (default 0.1); "
                                                 "exponential: factor per epoch (required)"}),
    ("--t-max", "T_max", {"type": int, "help": "cosine: epochs from lr to --eta-min "
                                               "(default: --epochs)"}),
    ("--eta-min", "eta_min", {"type": float, "help": "cosine: minimum lr (default 0)"}),
    ("--max-lr", "max_lr", {"type": float, "help": "onecycle: peak lr (default: --lr)"}),
    ("--total-steps", "total_steps", {"type": int, "help": "onecycle: steps in the cycle "
                                                           "(default: epochs x steps per epoch; "
                                                           "--max-steps only stops early)"}),
    ("--pct-start", "pct_start", {"type": float, "help": "onecycle: fraction of the cycle "
                                                         "raising the lr (default 0.3)"}),
    ("--anneal-strategy", "anneal_strategy", {"choices": ["cos", "linear"],
                                              "help": "onecycle: default cos"}),
    ("--div-factor", "div_factor", {"type": float, "help": "onecycle: initial lr = max_lr / "
                                                           "div_factor (default 25)"}),
    ("--final-div-factor", "final_div_factor", {"type": float, "help": "onecycle: final lr = "
                                                "initial lr / final_div_factor (default 1e4)"}),
    ("--three-phase", "three_phase", {"action": "store_true", "default": None,
                                      "help": "onecycle: three phases (fastai's two otherwise)"}),
    ("--no-cycle-momentum", "cycle_momentum", {"action": "store_const", "const": False,
                                               "default": None,
                                               "help": "onecycle: keep momentum / beta1 fixed "
                                                       "(torch cycles them by default)"}),
    ("--base-momentum", "base_momentum", {"type": float, "help": "onecycle: momentum / beta1 "
                                                                 "at the peak lr (default 0.85)"}),
    ("--max-momentum", "max_momentum", {"type": float, "help": "onecycle: momentum / beta1 at "
                                                               "the ends (default 0.95)"}),
    ("--scheduler-interval", "interval", {"choices": ["epoch", "step"],
                                          "help": "steplr, exponential, cosine: step the "
                                                  "schedule per epoch (default) or per batch"}),
)
# --scheduler choice -> (class name in schedulers.NAMES, the keywords it takes)
SCHEDULERS = {
    "none": (None, ()),
    "steplr": ("StepLR", ("step_size", "gamma", "interval")),
    "exponential": ("ExponentialLR", ("gamma", "interval")),
    "cosine": ("CosineAnnealingLR", ("T_max", "eta_min", "interval")),
    "onecycle": ("OneCycleLR", ("max_lr", "total_steps", "pct_start", "anneal_strategy",
                                "div_factor", "final_div_factor", "three_phase",
                                "cycle_momentum", "base_momentum", "max_momentum")),
}


def _metavar(key, kw) -> dict:
    """argparse keywords with a metavar named after the keyword (not after the dest)."""
    if "type" in kw and "metavar" not in kw:
        return {**kw, "metavar": key.upper()}
    return kw


def add_train(sub) -> argparse.ArgumentParser:
    from ..engine import optim
    d = train_mod.DEFAULTS
    p = sub.add_parser("train", help="train a model natively (wgpu-py, or numpy with --device "
                                     "cpu) on MNIST, with checkpoints, metrics and the trained "
                                     ".onnx")
    p.add_argument("model", type=Path, nargs="?", default=None,
                   help="the .onnx model (optional with --resume)")
    # Defaults are None so that --resume can tell what was given on the command line.
    p.add_argument("--optimizer", choices=list(optim.NAMES), help=f"default {d['optimizer']}")
    p.add_argument("--lr", type=float, help=f"learning rate (default {d['lr']})")
    p.add_argument("--batch-size", dest="batch_size", type=int,
                   help=f"default {d['batch_size']}")
    p.add_argument("--epochs", type=int, help=f"default {d['epochs']}")
    p.add_argument("--seed", type=int, help=f"default {d['seed']}")
    p.add_argument("--init", choices=["scratch", "finetune"], help=f"default {d['init']}")
    p.add_argument("--momentum", type=float, help="SGD / RMSprop momentum (default 0)")
    p.add_argument("--weight-decay", dest="weight_decay", type=float,
                   help="default 0 (AdamW: 0 means torch's 1e-2)")
    p.add_argument("--max-steps", dest="max_steps", type=int, help="0 = no cap (default)")
    p.add_argument("--train-images", dest="train_images", type=int,
                   help="train on the first N training images (0 = all 60000, default)")
    p.add_argument("--eval-images", dest="eval_images", type=int,
                   help=f"validate on the first N test images (default {d['eval_images']})")
    p.add_argument("--report-every", dest="report_every", type=int,
                   help=f"steps between metric readbacks (default {d['report_every']})")
    p.add_argument("--device", choices=["gpu", "cpu"], default=None,
                   help="gpu (wgpu-py, default) or cpu (the numpy engine, float32)")
    p.add_argument("--data-dir", dest="data_dir", type=Path, default=None,
                   help="MNIST cache (default <repo>/.cache/mnist)")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (default runs/<model>-<timestamp>)")
    p.add_argument("--resume", type=Path, default=None,
                   help="continue the run in DIR from its last checkpoint")
    p.add_argument("--no-progress", dest="no_progress", action="store_true",
                   help="no progress bar")
    p.add_argument("--force", action="store_true",
                   help="train on the GPU even when its self-check (webgpu-trainer doctor) "
                        "finds wrong results")
    g = p.add_argument_group("optimizer options (torch.optim's names)")
    g.add_argument("--clip-grad-norm", dest="clip_grad_norm", type=float,
                   help="clip gradients to this global L2 norm (0 = off, default)")
    for flag, key, kw in OPTIMIZER_OPTIONS:
        g.add_argument(flag, dest="opt_" + key, **_metavar(key, kw))
    g = p.add_argument_group("learning-rate schedule (torch.optim.lr_scheduler)")
    g.add_argument("--scheduler", choices=list(SCHEDULERS), default=None,
                   help="none (default), steplr, exponential, cosine (CosineAnnealingLR), "
                        "onecycle (OneCycleLR, per batch; cycles momentum / beta1 unless "
                        "--no-cycle-momentum)")
    for flag, key, kw in SCHEDULER_OPTIONS:
        g.add_argument(flag, dest="sched_" + key, **_metavar(key, kw))
    add_freeze_options(p)
    g = p.add_argument_group("loss (torch.nn.functional's criteria)")
    g.add_argument("--loss", choices=list(losses.LOSSES), default=None,
                   help="auto (default: nll after a final LogSoftmax, nll_log after a final "
                        "Softmax, else cross_entropy), cross_entropy, nll, nll_log (NLL of "
                        "log(output), for a model ending in Softmax), mse or bce_with_logits "
                        "(on one-hot labels)")
    g.add_argument("--reduction", choices=list(losses.REDUCTIONS), default=None,
                   help="mean (default) or sum over the batch")
    g.add_argument("--label-smoothing", dest="label_smoothing", type=float, metavar="F",
                   help="cross_entropy / nll_log: label smoothing in [0, 1] (default 0)")
    g.add_argument("--class-weights", dest="class_weights", metavar="W0,W1,...",
                   help="cross_entropy / nll / nll_log: one weight per class, "
                        "comma-separated")
    return p


def add_freeze_options(p) -> None:
    """``--trainable`` | ``--freeze`` | ``--head-only`` (mutually exclusive; see
    ``resolve_trainable``), for ``train`` and ``summary``."""
    g = p.add_argument_group("fine-tuning (which parameters train; the rest stay frozen)")
    x = g.add_mutually_exclusive_group()
    x.add_argument("--trainable", metavar="NAME[,NAME...]", default=None,
                   help="train only these parameters (initializer names)")
    x.add_argument("--freeze", metavar="NAME[,NAME...]", default=None,
                   help="train all but these parameters; a name may be a prefix, e.g. conv1. "
                        "(conv1.weight and conv1.bias)")
    x.add_argument("--head-only", dest="head_only", action="store_true", default=None,
                   help="train only the classifier head (the last Conv / Gemm / MatMul and the "
                        "layers after it; see `webgpu-trainer summary`)")

"""Native command-line trainer, predictor and model summary (CPython): ``webgpu-trainer train |
predict | summary``.

``train MODEL.onnx`` runs the same ``train.Trainer`` as the browser on wgpu-py (``--device gpu``,
the default) or ``cpu.trainer.CpuTrainer`` on the numpy engine (``--device cpu``, float32: the
"no GPU" path; same data order, optimizers, schedulers and guard, its own seeded init and dropout
masks) and writes into ``--out`` (default ``runs/<model>-<timestamp>``):

- ``config.json``: the full config, the data subset, the model's sha256, package versions and
  the adapter;
- ``metrics.jsonl``: one JSON line per epoch (epoch, step, train_loss, train_acc = means over the
  epoch's steps, valid_loss, valid_acc, elapsed_s);
- ``checkpoints/epoch-NNN.ckpt`` (``epoch-NNN-step-SSSSSSS.ckpt`` when ``--max-steps`` stops
  inside an epoch): see ``write_checkpoint`` (weights + optimizer state + epoch +
  step + RNG state), written atomically (temp file, fsync, rename);
- ``model.onnx``: ``onnx_io.export_onnx`` of the trained weights with provenance.

``--resume DIR`` loads DIR's config and last checkpoint and continues in DIR; options given on the
command line (e.g. ``--epochs``, ``--lr``) override the stored config. The data order depends only
on (seed, epoch) (``random.Random(seed * 1000003 + epoch)``), dropout on (seed, step) and the lr
and momentum schedules on the step, so a resumed run repeats the uninterrupted run's losses
exactly. Checkpoints of both devices share one format (weights in the plan's layout, the
optimizer state of ``optim.Optimizer.state_bytes``), so a run may also resume on the other
device (not bit for bit: other dropout masks, other float32 rounding).

Optimizer and schedule options (``add_train``): every optimizer of ``optim.NAMES`` with
torch.optim's keyword names (``config["optimizer_args"]``: ``--nesterov``, ``--betas``, ``--eps``
...), ``--clip-grad-norm`` (``config["clip_grad_norm"]``) and ``--scheduler`` with its parameters
(``config["scheduler"]``, the ``schedulers.make`` spec with every default resolved, e.g. a
OneCycleLR's ``total_steps``), all stored in config.json and reused by ``--resume``.

Fine-tuning options: ``--trainable NAME[,NAME...]``, ``--freeze NAME[,NAME...]`` (names or name
prefixes) and ``--head-only`` (``summary.head_params``) are resolved against the model
(``resolve_trainable``) into ``config["trainable"]``, the sorted-in-graph-order list of the
parameters that train (None: all of them); ``--loss``, ``--reduction``, ``--label-smoothing`` and
``--class-weights`` make ``config["loss"]``, the ``ops.losses.normalize`` spec. Both are stored in
config.json and reused by ``--resume`` (given again, they replace the stored value: a new
``--loss`` starts a new spec, ``--reduction`` etc. alone update the stored one).

``summary MODEL.onnx`` prints ``summary.summarize`` as a table (layers, output shapes for one
sample, parameters, multiply-adds, trainable marks, totals); a model that cannot be imported or
trained exits 2 after listing every problem, one per line.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import platform
import struct
import sys
import time
from pathlib import Path

from . import train as train_mod
from .data import atomic_write
from .ops import losses

CKPT_MAGIC = b"WGTCKPT1"
CKPT_FORMAT = "webgpu-trainer/checkpoint@1"
EXIT_DIVERGED = 3


# ------------------------------------------------------------------------------ checkpoints

def write_checkpoint(path: Path, header: dict, sections: dict[str, bytes]) -> None:
    """File layout: ``WGTCKPT1``, u32 little-endian header length, header JSON (utf-8), then the
    binary sections back to back. The header lists each section as ``{name: {offset, nbytes,
    sha256}}`` (offset from the start of the binary part)."""
    header = dict(header, format=CKPT_FORMAT, sections={})
    offset = 0
    for name, blob in sections.items():
        header["sections"][name] = {"offset": offset, "nbytes": len(blob),
                                    "sha256": hashlib.sha256(blob).hexdigest()}
        offset += len(blob)
    head = json.dumps(header, sort_keys=True).encode()
    atomic_write(path, CKPT_MAGIC + struct.pack("<I", len(head)) + head
                 + b"".join(sections.values()))


def read_checkpoint(path: Path) -> tuple[dict, dict[str, bytes]]:
    """``(header, {section: bytes})``; raises ValueError on a bad or corrupt file."""
    raw = Path(path).read_bytes()
    if raw[:8] != CKPT_MAGIC:
        raise ValueError(f"{path}: not a webgpu-trainer checkpoint")
    (n,) = struct.unpack("<I", raw[8:12])
    header = json.loads(raw[12:12 + n])
    body = raw[12 + n:]
    sections = {}
    for name, s in header["sections"].items():
        blob = body[s["offset"]:s["offset"] + s["nbytes"]]
        if len(blob) != s["nbytes"] or hashlib.sha256(blob).hexdigest() != s["sha256"]:
            raise ValueError(f"{path}: section {name} is truncated or corrupt")
        sections[name] = blob
    return header, sections


def last_checkpoint(run_dir: Path) -> Path | None:
    ckpts = sorted((Path(run_dir) / "checkpoints").glob("epoch-*.ckpt"))
    return ckpts[-1] if ckpts else None


async def optimizer_state(dev, opt) -> bytes:
    """The optimizer state section (``optim.Optimizer.state_bytes``; the numpy optimizers of
    ``cpu.optim`` write the same format, ``dev`` unused)."""
    return bytes(await opt.state_bytes(dev))


def load_optimizer_state(dev, opt, data: bytes) -> None:
    opt.load_state_bytes(dev, data)


async def read_weights(dev, trainer) -> bytes:
    """The checkpoint's "weights" section: the whole plan-layout weight buffer."""
    if is_cpu(dev):
        return trainer.weights_blob()
    return bytes(await dev.read(trainer.plan.P))


def write_weights(dev, trainer, blob: bytes, where="checkpoint") -> None:
    if is_cpu(dev):
        try:
            trainer.load_weights(blob)
        except ValueError:
            raise ValueError(f"{where}: weights do not fit this model's layout") from None
        return
    if len(blob) != trainer.plan.wbytes:
        raise ValueError(f"{where}: weights do not fit this model's layout")
    dev.write(trainer.plan.P, blob)


# ------------------------------------------------------------------------------ helpers

def versions() -> dict:
    from importlib import metadata
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in ("webgpu-trainer", "wgpu", "numpy", "onnx", "onnxruntime"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class CpuDevice:
    """``--device cpu``: no device object is needed by the numpy engine; this one names it in
    config.json (``info``) and tells the code paths apart (``is_cpu``)."""

    is_numpy = True

    def __init__(self):
        import numpy as np
        self.info = {"backend": "numpy", "device": "numpy float32 (CPU)",
                     "description": f"numpy {np.__version__}, {os.cpu_count()} CPU cores"}


def is_cpu(dev) -> bool:
    return getattr(dev, "is_numpy", False)


def open_device(kind: str):
    """``CpuDevice()`` for "cpu", the wgpu-py device for "gpu"."""
    if kind == "cpu":
        return CpuDevice()
    if kind != "gpu":
        raise ValueError(f"unknown device {kind!r}: choose gpu or cpu")
    from .backends.wgpu_native import Device
    return Device()


def make_trainer(dev, graph, weights, cfg, train_set, test_set, emit=None):
    """``train.Trainer`` on the GPU ``dev``, ``cpu.trainer.CpuTrainer`` for a ``CpuDevice``."""
    if is_cpu(dev):
        from .cpu.trainer import CpuTrainer
        return CpuTrainer(graph, weights, cfg, train_set, test_set, emit)
    return train_mod.Trainer(dev, graph, weights, cfg, train_set, test_set, emit)


def load_splits(data_dir, train_images: int = 0, eval_images: int = 10000):
    """``(train Split, test Split, manifest source)`` from the MNIST cache (prepared if needed);
    ``train_images`` > 0 keeps the first N training images, the test split keeps the first
    ``eval_images``."""
    from . import data
    manifest = data.prepare(data_dir)
    out = []
    for name, keep in (("train", train_images), ("test", eval_images)):
        images, labels = data.load(data_dir, name)
        if keep and keep > 0:
            images, labels = images[:keep], labels[:keep]
        lab = labels.tobytes()
        out.append(train_mod.Split(images.tobytes(), lab, len(labels), lab,
                                   images.shape[1] * images.shape[2]))
    return out[0], out[1], manifest.get("source")


# ------------------------------------------------------------------------------ train

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
    from . import optim
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
                   help="auto (default: nll after a final LogSoftmax, else cross_entropy), "
                        "cross_entropy, nll, mse or bce_with_logits (on one-hot labels)")
    g.add_argument("--reduction", choices=list(losses.REDUCTIONS), default=None,
                   help="mean (default) or sum over the batch")
    g.add_argument("--label-smoothing", dest="label_smoothing", type=float, metavar="F",
                   help="cross_entropy: label smoothing in [0, 1] (default 0)")
    g.add_argument("--class-weights", dest="class_weights", metavar="W0,W1,...",
                   help="cross_entropy / nll: one weight per class, comma-separated")
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


def train(args) -> int:
    try:
        return asyncio.run(_train(args))
    except train_mod.TrainingDiverged as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_DIVERGED
    except (NotImplementedError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _flag(options, key) -> str:
    return next(f for f, k, _ in options if k == key)


def _scheduler_spec(args, stored):
    """config["scheduler"] from --scheduler and its options, on top of ``stored`` (the resumed
    run's spec, or None): a new --scheduler replaces it, options alone update it."""
    params = {k: getattr(args, "sched_" + k) for _, k, _ in SCHEDULER_OPTIONS
              if getattr(args, "sched_" + k, None) is not None}
    name = getattr(args, "scheduler", None)
    if name is None:
        if not params:
            return stored
        if not stored:
            raise ValueError(f"{_flag(SCHEDULER_OPTIONS, next(iter(params)))} needs "
                             "--scheduler")
        key = next(k for k, (cls, _) in SCHEDULERS.items()
                   if cls and cls.lower() == str(stored.get("name", "")).lower())
        spec = {**stored, **params}
    else:
        key, spec = name, {"name": SCHEDULERS[name][0], **params}
    allowed = SCHEDULERS[key][1]
    for k in params:
        if k not in allowed:
            raise ValueError(f"{_flag(SCHEDULER_OPTIONS, k)} does not apply to --scheduler "
                             f"{key}")
    return spec if key != "none" else None


def _name_list(text: str, flag: str) -> list:
    names = list(dict.fromkeys(n.strip() for n in str(text).split(",") if n.strip()))
    if not names:
        raise ValueError(f"{flag}: no parameter names given")
    return names


def resolve_trainable(graph: dict, trainable: str | None = None, freeze: str | None = None,
                      head_only: bool = False) -> list | None:
    """``config["trainable"]`` from the fine-tuning options, for the bundle ``graph``: the
    names of the parameters (role "param" tensors) that train, in graph order; None when no
    option is given (everything trains).

    ``trainable``: comma-separated parameter names, exactly; ``freeze``: comma-separated names
    or name prefixes (``conv1.`` matches ``conv1.weight`` and ``conv1.bias``; a plain string
    prefix, so ``conv`` matches every ``conv*``), every parameter but those trains;
    ``head_only``: ``summary.head_params(graph)``. Raises ValueError naming the unknown names
    (and a buffer named as a parameter) and listing the model's parameters, or when nothing
    would train."""
    roles = {t["name"]: t["role"] for t in graph["tensors"]}
    params = [n for n, r in roles.items() if r == "param"]
    listing = f"the model's parameters: {', '.join(params) or '(none)'}"

    def quote(names):
        return ", ".join(map(repr, names))

    if head_only:
        from .summary import head_params
        keep = set(head_params(graph))
        if not keep:
            raise ValueError("--head-only: the model has no parameters to train")
    elif trainable is not None:
        names = _name_list(trainable, "--trainable")
        unknown = [n for n in names if n not in roles]
        if unknown:
            raise ValueError(f"--trainable: no parameter named {quote(unknown)}; {listing}")
        buffers = [n for n in names if roles[n] != "param"]
        if buffers:
            what = "is a buffer" if len(buffers) == 1 else "are buffers"
            raise ValueError(f"--trainable: {quote(buffers)} {what} (BatchNorm running "
                             f"statistics, updated in training mode but never trained), not "
                             f"a parameter; {listing}")
        keep = set(names)
    elif freeze is not None:
        frozen, missing = set(), []
        for item in _name_list(freeze, "--freeze"):
            hit = [n for n in params if n.startswith(item)]
            frozen.update(hit)
            if not hit:
                missing.append(item)
        if missing:
            buffers = [n for n in roles if roles[n] != "param" and n.startswith(tuple(missing))]
            note = (f" ({quote(buffers)}: buffers, BatchNorm running statistics, which never "
                    "train)") if buffers else ""
            raise ValueError(f"--freeze: no parameter named or starting with {quote(missing)}"
                             f"{note}; {listing}")
        keep = set(params) - frozen
        if not keep:
            raise ValueError("--freeze: every parameter would be frozen, nothing would train; "
                             f"{listing}")
    else:
        return None
    return [n for n in params if n in keep]


def _freeze_given(args) -> bool:
    return any(getattr(args, k, None) is not None for k in ("trainable", "freeze", "head_only"))


def _class_weights(text: str) -> list:
    out = []
    for piece in str(text).split(","):
        try:
            out.append(float(piece))
        except ValueError:
            raise ValueError(f"--class-weights: {piece.strip()!r} is not a number (give one "
                             "weight per class, comma-separated)") from None
    return out


def _loss_spec(args, stored) -> dict:
    """config["loss"] (``losses.normalize``'s full spec) from --loss, --reduction,
    --label-smoothing and --class-weights on top of ``stored`` (the resumed run's spec, None for
    a new run): a --loss replaces it, the other options alone update it. Raises ValueError with
    the spec's message."""
    given = {k: getattr(args, a, None) for k, a in (("loss", "loss"), ("reduction", "reduction"),
                                                     ("label_smoothing", "label_smoothing"))}
    given = {k: v for k, v in given.items() if v is not None}
    if getattr(args, "class_weights", None) is not None:
        given["weight"] = _class_weights(args.class_weights)
    base = {} if "loss" in given else losses.normalize(stored)
    return losses.normalize({**base, **given})


def complete_schedule(cfg: dict, steps_per_epoch: int) -> dict | None:
    """``cfg["scheduler"]`` with the defaults that depend on the run filled in (StepLR step_size
    1; CosineAnnealingLR T_max = the epochs; OneCycleLR max_lr = lr and total_steps = epochs x
    steps per epoch), so that config.json states the whole schedule and --resume keeps it."""
    spec = cfg.get("scheduler")
    if not spec:
        return None
    spec = dict(spec)
    name = str(spec.get("name", "")).lower()
    epochs = int(cfg["epochs"])
    if name == "steplr":
        spec.setdefault("step_size", 1)
    elif name == "exponentiallr" and "gamma" not in spec:
        raise ValueError("--scheduler exponential needs --gamma")
    elif name == "cosineannealinglr":
        spec.setdefault("T_max", epochs * (steps_per_epoch if spec.get("interval") == "step"
                                           else 1))
    elif name == "onecyclelr":
        spec.setdefault("max_lr", float(cfg["lr"]))
        spec.setdefault("total_steps", max(1, epochs * steps_per_epoch))
    return spec


def check_config(cfg: dict, steps_per_epoch: int) -> None:
    """Build the optimizer and the schedule of ``cfg`` on the host (no device work) and step
    the schedule to the run's last step: raises ValueError for a bad option before anything is
    written."""
    from . import optim, schedulers
    per = max(1, steps_per_epoch)
    total = per * int(cfg["epochs"])
    if int(cfg["max_steps"]) > 0:
        total = min(total, int(cfg["max_steps"]))
    sched = schedulers.make(cfg, per, total)
    try:
        for t in sorted({1, max(total, 1)}):
            sched.lr_at(t)
    except ValueError as exc:
        raise ValueError(f"scheduler {cfg['scheduler'].get('name')}: {exc}; this run takes "
                         f"{total} steps (give a larger --total-steps, or fewer --epochs)") \
            from None
    opt = optim.make(cfg["optimizer"], float(cfg["lr"]), float(cfg["momentum"]),
                     float(cfg["weight_decay"]),
                     clip_grad_norm=float(cfg.get("clip_grad_norm") or 0.0),
                     **(cfg.get("optimizer_args") or {}))
    opt.follow(sched)


def _resolve_config(args) -> tuple[dict, Path, Path, dict | None]:
    """``(config, model path, out dir, stored config.json or None)``."""
    given = {k: getattr(args, k) for k in TRAIN_KEYS + ("train_images", "device")
             if getattr(args, k, None) is not None}
    opt_args = {k: getattr(args, "opt_" + k) for _, k, _ in OPTIMIZER_OPTIONS
                if getattr(args, "opt_" + k, None) is not None}
    if args.resume:
        run_dir = Path(args.resume)
        stored = json.loads((run_dir / "config.json").read_text())
        cfg = {**stored["config"], **given}
        cfg["optimizer_args"] = {**(stored["config"].get("optimizer_args") or {}), **opt_args}
        cfg["scheduler"] = _scheduler_spec(args, stored["config"].get("scheduler"))
        cfg["loss"] = _loss_spec(args, stored["config"].get("loss"))
        model = Path(args.model) if args.model else Path(stored["model"]["path"])
        if args.out and Path(args.out).resolve() != run_dir.resolve():
            raise ValueError("--out and --resume name different folders; a resumed run "
                             "continues in its own folder")
        for k in ("optimizer", "batch_size", "seed", "train_images"):
            if k in given and given[k] != stored["config"].get(k):
                raise ValueError(f"--{k.replace('_', '-')} differs from the run being resumed "
                                 f"({stored['config'].get(k)}): it would not continue exactly")
        return cfg, model, run_dir, stored
    if args.model is None:
        raise ValueError("MODEL.onnx is required (unless --resume DIR)")
    cfg = {**train_mod.DEFAULTS, "train_images": 0, "device": "gpu", "clip_grad_norm": 0.0,
           **given, "optimizer_args": opt_args, "scheduler": _scheduler_spec(args, None),
           "loss": _loss_spec(args, None)}
    model = Path(args.model)
    out = args.out or Path("runs") / f"{model.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    return cfg, model, Path(out), None


async def _train(args) -> int:
    from . import onnx_io
    cfg, model_path, out, stored = _resolve_config(args)
    if not model_path.is_file():
        raise FileNotFoundError(f"model {model_path} not found")
    graph, weights = onnx_io.load_bundle(model_path)
    if _freeze_given(args):
        cfg["trainable"] = resolve_trainable(graph, args.trainable, args.freeze, args.head_only)
    train_mod.trainable_names(graph, cfg.get("trainable"))  # a stored list still fits
    from .graph import Graph
    g = Graph(graph)
    losses.normalize(cfg["loss"], g.shapes(2)[g.output][1])  # --class-weights: one per class
    dev = open_device(cfg.get("device", "gpu"))
    ckpt_path = last_checkpoint(out) if stored else None
    header, sections = read_checkpoint(ckpt_path) if ckpt_path else (None, None)
    if header and header["model_sha256"] != _sha256(model_path):
        raise ValueError(f"{model_path} is not the model the checkpoint {ckpt_path} was "
                         "trained from")
    train_set, test_set, source = load_splits(args.data_dir, int(cfg.get("train_images") or 0),
                                              int(cfg["eval_images"]))
    batch = int(cfg["batch_size"])
    per_epoch = train_set.count // max(batch, 1)
    cfg["scheduler"] = complete_schedule(cfg, per_epoch)
    check_config(cfg, per_epoch)
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    config_doc = {
        "config": cfg,
        "model": {"path": str(model_path.resolve()), "name": graph["name"],
                  "sha256": _sha256(model_path)},
        "data": {"dataset": "MNIST", "source": source, "train_images": train_set.count,
                 "eval_images": test_set.count, "data_dir": str(args.data_dir or "")},
        "versions": versions(), "adapter": dev.info,
        "command": sys.argv[1:] if sys.argv else [],
        "created": (stored or {}).get("created") or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "resumes": (stored or {}).get("resumes", []) + (
            [{"from": str(ckpt_path), "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "device": cfg.get("device", "gpu")}] if ckpt_path else []),
    }
    atomic_write(out / "config.json", (json.dumps(config_doc, indent=2) + "\n").encode())

    trainer = make_trainer(dev, graph, weights, cfg, train_set, test_set)
    await trainer.setup()
    if header:
        write_weights(dev, trainer, sections["weights"], str(ckpt_path))
        load_optimizer_state(dev, trainer.opt, sections["optimizer"])
        # Epochs fully done (a --max-steps stop can checkpoint in the middle of an epoch).
        trainer.epoch = int(header.get("epochs_completed", header["epoch"]))
        trainer.step = int(header["step"])
        print(f"resuming {out} from {ckpt_path.name} (epoch {trainer.epoch}, step "
              f"{trainer.step})", file=sys.stderr)
    if cfg.get("trainable") is not None:
        sizes = {t["name"]: math.prod(t["shape"]) for t in graph["tensors"]
                 if t["role"] == "param"}
        n_all = sum(sizes.values())
        n_train = sum(sizes[n] for n in cfg["trainable"])
        print(f"training {len(cfg['trainable'])} of {len(sizes)} parameters ({n_train:,} of "
              f"{n_all:,} values): {', '.join(cfg['trainable'])}", file=sys.stderr)
        if cfg["init"] == "scratch" and not header:
            print("note: --init scratch re-initialises the frozen parameters too (fine-tuning "
                  "usually wants --init finetune)", file=sys.stderr)

    total = per_epoch * int(cfg["epochs"])
    if int(cfg["max_steps"]) > 0:
        total = min(total, int(cfg["max_steps"]))
    bar = None
    if not getattr(args, "no_progress", False):
        from tqdm import tqdm
        bar = tqdm(total=total, initial=trainer.step, unit="step", dynamic_ncols=True,
                   desc="train", file=sys.stderr)
    t0 = time.perf_counter()

    def emit(kind, **kw):
        if kind == "progress" and bar is not None:
            bar.update(kw["step"] - bar.n)
            loss, acc = (kw["losses"][-1][1:] if kw["losses"] else (float("nan"),) * 2)
            bar.set_postfix_str(f"epoch {kw['epoch']}/{kw['epochs']} loss {loss:.4f} "
                                f"acc {acc:.3f} {kw['images_per_s']:.0f} img/s", refresh=True)

    dropout = "numpy default_rng([seed, step])" if is_cpu(dev) else "pcg(seed, step, node)"

    async def on_epoch(epoch, step, m):
        row = {"epoch": epoch, "step": step, "train_loss": m["train_loss"],
               "train_acc": m["train_acc"], "valid_loss": m["val_loss"],
               "valid_acc": m["val_acc"], "elapsed_s": round(time.perf_counter() - t0, 3)}
        wblob = await read_weights(dev, trainer)
        head = {"epoch": epoch, "step": step, "epochs_completed": step // per_epoch,
                "rng": {"seed": int(cfg["seed"]), "next_epoch": epoch,
                        "shuffle": "random.Random(seed * 1000003 + epoch)",
                        "dropout": dropout},
                "device": cfg.get("device", "gpu"),
                "optimizer": cfg["optimizer"], "config": cfg,
                "model_sha256": config_doc["model"]["sha256"], "metrics": row}
        # A --max-steps stop inside an epoch: epoch-NNN-step-SSSSSSS.ckpt (sorts before the
        # epoch's own checkpoint, so the last file by name is the latest).
        name = f"epoch-{epoch:03d}" + (f"-step-{step:07d}" if step % per_epoch else "")
        write_checkpoint(out / "checkpoints" / f"{name}.ckpt", head,
                         {"weights": wblob,
                          "optimizer": await optimizer_state(dev, trainer.opt)})
        with open(out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
        msg = (f"epoch {epoch}: train loss {row['train_loss']:.4f} acc {row['train_acc']:.4f}"
               f" | valid loss {row['valid_loss']:.4f} acc {row['valid_acc']:.4f}")
        (bar.write(msg, file=sys.stderr) if bar is not None else print(msg, file=sys.stderr))

    trainer.emit, trainer.on_epoch = emit, on_epoch
    try:
        result = await trainer.run()
    finally:
        if bar is not None:
            bar.close()
    trained = await trainer.trained_weights()
    provenance = {"dataset": "MNIST", "epochs": result["epochs_done"],
                  "steps": result["steps"], "optimizer": cfg["optimizer"], "lr": cfg["lr"],
                  "batch_size": cfg["batch_size"], "seed": cfg["seed"], "init": cfg["init"],
                  "final_accuracy": result["test_acc"], "eval_images": trainer.n_eval,
                  "train_images": train_set.count,
                  "backend": "numpy" if is_cpu(dev) else "wgpu-native",
                  "adapter": dev.info.get("device") or dev.info.get("description", "")}
    if cfg.get("scheduler"):
        provenance["scheduler"] = cfg["scheduler"]
    if cfg["loss"] != losses.DEFAULT:
        provenance["loss"] = cfg["loss"]
    if cfg.get("trainable") is not None:
        provenance["trainable"] = cfg["trainable"]
    atomic_write(out / "model.onnx", onnx_io.export_onnx(model_path, trained, provenance))
    print(f"done: {result['steps']} steps, valid acc {result['test_acc']:.4f} loss "
          f"{result['test_loss']:.4f} on {trainer.n_eval} test images; wrote {out}")
    return 0


# ------------------------------------------------------------------------------ predict

async def engine_log_probs(dev, model_path: Path, images, labels) -> list[list[float]]:
    """Eval-mode log-probabilities of the engine (weights as in the model: fine-tune init) for
    ``images`` (uint8 [n, 28, 28], n >= 1), via the trainer's evaluate (its normalisation): the
    GPU's ``train.Trainer`` on a wgpu device, the numpy ``CpuTrainer`` on a ``CpuDevice``."""
    import numpy as np

    from . import onnx_io
    graph, weights = onnx_io.load_bundle(model_path)
    images = np.asarray(images, np.uint8)
    labels = np.asarray(labels, np.uint8)
    n = len(labels)
    if n < 2:  # the plan's batch (BatchNorm training needs >= 2) is never run in train mode
        images = np.concatenate([images, images])
        labels = np.concatenate([labels, labels])
    split = train_mod.Split(images.tobytes(), labels.tobytes(), len(labels), labels.tobytes(),
                            images.shape[1] * images.shape[2])
    trainer = make_trainer(dev, graph, weights,
                           {"init": "finetune", "batch_size": 2, "eval_images": n}, split, split)
    await trainer.setup()
    _, _, raw = await trainer.evaluate()
    vals = np.frombuffer(raw, np.float32).reshape(n, trainer.classes)
    return vals.astype(np.float64)


def onnxruntime_probs(model_path: Path, images):
    """Probabilities of onnxruntime on the inference form of the model (BatchNorm with running
    statistics, Dropout off), input normalised as the trainer does."""
    import numpy as np
    import onnxruntime as ort

    from . import onnx_io
    graph, weights = onnx_io.load_bundle(model_path)
    model = onnx_io.export_onnx(model_path, weights, {})
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    x = (np.asarray(images, np.float32) / 255.0 - train_mod.MNIST_MEAN) / train_mod.MNIST_STD
    x = x.reshape(len(x), 1, *x.shape[1:]).astype(np.float32)
    out = sess.run(None, {sess.get_inputs()[0].name: x})[0].astype(np.float64)
    if graph["nodes"] and graph["nodes"][-1]["op_type"] == "LogSoftmax":
        return np.exp(out)
    e = np.exp(out - out.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def add_predict(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("predict", help="predict one MNIST test image with the engine (eval "
                                       "mode) and with onnxruntime")
    p.add_argument("model", type=Path, help="the .onnx model")
    p.add_argument("--index", type=int, default=12, help="MNIST test image (default 12)")
    p.add_argument("--data-dir", dest="data_dir", type=Path, default=None,
                   help="MNIST cache (default <repo>/.cache/mnist)")
    p.add_argument("--device", choices=["gpu", "cpu"], default="gpu",
                   help="gpu (wgpu-py, default) or cpu (the numpy engine, float32)")
    return p


def predict(args) -> int:
    import numpy as np

    from . import data
    try:
        dev = open_device(args.device)
        data.prepare(args.data_dir)
        images, labels = data.load(args.data_dir, "test")
        if not 0 <= args.index < len(labels):
            raise ValueError(f"--index must be in [0, {len(labels)})")
        img, label = images[args.index:args.index + 1], labels[args.index:args.index + 1]
        probs = np.exp(asyncio.run(engine_log_probs(dev, args.model, img, label))[0])
        ref = onnxruntime_probs(args.model, img)[0]
    except (NotImplementedError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    digit, ref_digit = int(probs.argmax()), int(ref.argmax())
    print(f"MNIST test image {args.index} (label {int(label[0])}): predicted digit {digit}")
    print("engine      " + " ".join(f"{d}:{p:.4f}" for d, p in enumerate(probs)))
    print("onnxruntime " + " ".join(f"{d}:{p:.4f}" for d, p in enumerate(ref)))
    print(f"onnxruntime digit {ref_digit}; max |engine - onnxruntime| = "
          f"{float(np.abs(probs - ref).max()):.2e}")
    return 0


# ------------------------------------------------------------------------------ summary

def add_summary(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("summary", help="print a model's layers, output shapes, parameters, "
                                       "multiply-adds and trainable parameters (or why it "
                                       "cannot be trained)")
    p.add_argument("model", type=Path, help="the .onnx model")
    p.add_argument("--json", action="store_true", help="print summary.summarize's JSON instead")
    add_freeze_options(p)
    return p


def _shape_text(shape) -> str:
    return "-" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def _si(n: int) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return str(n)


def format_summary(s: dict) -> str:
    """``summary.summarize``'s dict as a text table (torchinfo-like): one row per layer (name,
    op, output shape for one sample, parameters, multiply-adds, "yes" / "no" / "partly" for
    whether its parameters train), then the totals and the head."""
    trains = {t["name"]: t["trainable"] for t in s["tensors"] if t["role"] == "param"}
    rows = []
    for layer in s["layers"]:
        owned = [trains[n] for n in layer["tensors"] if n in trains]
        mark = "" if not owned else "yes" if all(owned) else "no" if not any(owned) \
            else "partly"
        rows.append((layer["name"], layer["op"], _shape_text(layer["output_shape"]),
                     f"{layer['params']:,}" if layer["params"] else "-",
                     f"{layer['macs']:,}" if layer["macs"] else "-", mark))
    head = ("Layer", "Op", "Output shape", "Params", "Mult-adds", "Trainable")
    widths = [max(len(r[k]) for r in rows + [head]) for k in range(len(head))]
    right = (False, False, False, True, True, False)

    def line(r):
        return "  ".join(v.rjust(w) if ra else v.ljust(w)
                         for v, w, ra in zip(r, widths, right)).rstrip()
    rule = "-" * len(line(tuple("x" * w for w in widths)))
    t = s["totals"]
    inp = s["input"]
    about = ", ".join(x for x in (f"opset {s['opset']}" if s.get("opset") else "",
                                  s.get("producer") or "") if x)
    out = [f"{s.get('name') or 'model'}" + (f" ({about})" if about else "")
           + f"; input {inp['name']!r} {_shape_text(inp['shape'])}",
           rule, line(head), rule, *(line(r) for r in rows), rule]
    width = len(f"{max(t['params'], t['macs']):,}")
    out += [f"Total params:      {t['params']:>{width},}",
            f"Trainable params:  {t['trainable']:>{width},}",
            f"Frozen params:     {t['frozen']:>{width},}",
            f"Buffers:           {t['buffers']:>{width},}  (BatchNorm running statistics)",
            f"Mult-adds:         {t['macs']:>{width},}  per sample ({_si(t['macs'])})",
            "Shapes and mult-adds for one sample (batch 1).",
            f"Head (--head-only): {', '.join(s['head']) or '-'}"]
    frozen = [x["name"] for x in s["tensors"] if x["role"] == "param" and not x["trainable"]]
    if frozen:
        out.append(f"Frozen: {', '.join(frozen)}")
    return "\n".join(out)


def summary(args) -> int:
    from . import onnx_io
    from .graph import Graph, GraphError
    from .summary import summarize
    try:
        graph, _ = onnx_io.load_bundle(args.model)
    except ValueError as exc:  # OnnxImportError: every problem at once
        problems = [str(p) for p in getattr(exc, "problems", None) or [str(exc)]]
        print(f"error: {args.model} cannot be imported ({len(problems)} problem"
              f"{'s' if len(problems) != 1 else ''}):", file=sys.stderr)
        for p in problems:
            print(f"- {p}", file=sys.stderr)
        return 2
    try:
        trainable = resolve_trainable(graph, getattr(args, "trainable", None),
                                      getattr(args, "freeze", None),
                                      bool(getattr(args, "head_only", None)))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = summarize(graph, trainable)
    problems = list(result["errors"])
    try:
        Graph(graph).shapes(2)
    except (GraphError, NotImplementedError) as exc:
        problems.append(str(exc))
    problems = list(dict.fromkeys(problems))
    print(json.dumps(result, indent=2) if getattr(args, "json", False)
          else format_summary(result))
    if problems:
        print(f"error: {args.model} cannot be trained ({len(problems)} problem"
              f"{'s' if len(problems) != 1 else ''}):", file=sys.stderr)
        for p in problems:
            print(f"- {p}", file=sys.stderr)
        return 2
    return 0


COMMANDS = {"train": (add_train, train), "predict": (add_predict, predict),
            "summary": (add_summary, summary)}

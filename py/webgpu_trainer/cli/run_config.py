"""A native run's config (config.json's ``config``) from the ``train`` options, on top of the
stored config of a resumed run: the optimizer's and the scheduler's specs, the loss spec,
the trainable parameters (``resolve_trainable``), the schedule's run-dependent defaults
(``complete_schedule``) and a host-side check of all of it (``check_config``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..engine import train as train_mod
from ..engine.ops import losses
from .options import OPTIMIZER_OPTIONS, SCHEDULER_OPTIONS, SCHEDULERS, TRAIN_KEYS


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
        from ..engine.summary import head_params
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
    from ..engine import optim, schedulers
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
        if not (run_dir / "config.json").is_file():
            raise ValueError(f"--resume {run_dir}: not a run folder (no config.json; give the "
                             "--out folder of an earlier train)")
        try:
            stored = json.loads((run_dir / "config.json").read_text())
        except ValueError as exc:
            raise ValueError(f"--resume {run_dir}: config.json is not valid JSON ({exc})") \
                from None
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

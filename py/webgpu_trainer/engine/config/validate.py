"""The one validator of a run configuration: ``parse(dict) -> RunConfig`` (standard library only).

Checks every key against ``schema.FIELDS``: unknown keys, wrong types (``1.5`` for an integer
is an error, never rounded; ``True`` is not a number), values out of range, options that do not
belong to the chosen optimizer / scheduler / loss, and the rules between fields (Nesterov needs
momentum; OneCycleLR's momentum cycling needs an optimizer with momentum or beta1; ...). With
the data size (``train_images``) it also checks the batch size against the images and
resolves the defaults that depend on the run (``resolve``). Every problem is collected; one
``ConfigError`` lists them all as ``(field, message)`` pairs, each message naming the allowed
values.

Input is the flat dict of the page, the CLI and config.json, or the nested dict of earlier
versions' config.json (``optimizer_args``, a ``scheduler`` spec, a ``loss`` spec): see
``upgrade``.
"""

from __future__ import annotations

import math
import re

from ..errors import UserError
from .schema import (BY_NAME, F32_MAX, F32_TINY, FINETUNE, FIELDS, SCHEDULERS, applies,
                     default_for, describe)
from .run import RunConfig, steps, train_used

CHOOSERS = ("optimizer", "scheduler", "loss")  # fields that pick which other fields apply
MAX_UNKNOWN = 3  # unknown options named one by one; the rest are only counted
SHOWN = 40       # characters of a bad value an error message shows at most


def shown(value, most: int = SHOWN) -> str:
    """``value`` as an error message shows it, at most about ``most`` characters: a long
    string is cut (its length named), a huge integer named by its digits, a list or object
    by its size (never a deep or huge repr).

    >>> shown("x" * 100, 5), shown(10 ** 400), shown([[1]] * 9)
    ("'xxxxx'... (100 characters)", 'an integer of 401 digits', 'a list of 9 items')
    """
    if isinstance(value, str):
        return repr(value) if len(value) <= most else \
            f"{value[:most]!r}... ({len(value):,} characters)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        digits = int(value.bit_length() * math.log10(2)) + 1
        try:
            digits = len(str(abs(value)))
        except ValueError:  # past Python's 4,300-digit conversion limit
            return f"an integer of about {digits:,} digits"
        return f"an integer of {digits:,} digits"
    if isinstance(value, (list, tuple)):
        if len(value) <= 4 and all(isinstance(v, (int, float, str)) for v in value):
            return "[" + ", ".join(shown(v, most // 4) for v in value) + "]"
        return f"a list of {len(value):,} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, dict):
        return f"an object of {len(value):,} key{'s' if len(value) != 1 else ''}"
    text = repr(value)
    return text if len(text) <= most else f"{text[:most]}..."


class ConfigError(UserError, ValueError):
    """Bad configuration: ``errors`` lists every problem as ``(field, message)``; the message
    names the allowed values. ``str()`` joins them as "field: message; ..."."""

    def __init__(self, errors):
        self.errors = [(str(f), str(m)) for f, m in errors]
        super().__init__("; ".join(f"{f}: {m}" for f, m in self.errors))


def upgrade(data: dict) -> dict:
    """The flat form of an earlier version's config (config.json of older runs, the trainers'
    dict): ``optimizer_args`` and the ``scheduler`` / ``loss`` specs become fields, options the
    old code ignored (``momentum`` of Adam, the loss spec's defaults) are dropped, and AdamW's
    weight_decay 0 (which meant torch's 1e-2 there) becomes 0.01; ``val_images`` is 0 (they
    validated on the test images and trained on every training image). A flat dict is returned as
    it is."""
    sched, loss = data.get("scheduler"), data.get("loss")
    if not ("optimizer_args" in data or isinstance(sched, dict) or isinstance(loss, dict)):
        return data
    out = {k: v for k, v in data.items() if k not in ("optimizer_args", "scheduler", "loss")}
    out.update(data.get("optimizer_args") or {})
    if isinstance(sched, dict):
        name = str(sched.get("name", "")).lower().replace("_", "")
        key = next((k for k, cls in SCHEDULERS.items() if cls and name in (k, cls.lower())),
                   name)
        out.update({k: v for k, v in sched.items() if k != "name"}, scheduler=key)
    elif sched is not None:
        out["scheduler"] = sched
    if isinstance(loss, dict):
        spec = {("class_weights" if k == "weight" else k): v for k, v in loss.items()}
        out.update(spec)
    elif loss is not None:
        out["loss"] = loss
    if out.get("optimizer") == "adamw" and out.get("weight_decay") == 0:
        out["weight_decay"] = 0.01
    out.setdefault("val_images", 0)  # earlier versions trained on every training image
    choices = {k: out.get(k, BY_NAME[k].default) for k in CHOOSERS}
    return {k: v for k, v in out.items()
            if k not in BY_NAME or applies(BY_NAME[k], choices)}


def _check_value(f, value):
    """``value`` converted to the field's type (int stays int, a float field gets float), or
    raise ValueError with the message."""
    want = describe(f)
    if f.type == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"must be {want}, got {shown(value)}")
        return value
    if f.type == "choice":
        if not isinstance(value, str) or value not in f.choices:
            raise ValueError(f"must be {want}, got {shown(value)}")
        return value
    if f.type == "str":
        if not isinstance(value, str) or not re.fullmatch(f.pattern, value):
            raise ValueError(f"must be {want}, got {shown(value)}")
        return value
    if f.type == "list":
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"must be {want}, got {shown(value)}")
        if f.length and len(value) != f.length:
            raise ValueError(f"must be {want}, got {len(value)} value(s)")
        if not f.length and not value:
            raise ValueError(f"must be {want}, got an empty list" +
                             (": nothing would train (leave it out to train every parameter)"
                              if f.name == "trainable" else ""))
        if f.item == "str":
            if not all(isinstance(v, str) and v for v in value):
                raise ValueError(f"must be {want}, got {shown(value)}")
            return list(dict.fromkeys(value))
        return [_number(f, v, want, float) for v in value]
    return _number(f, value, want, int if f.type == "int" else float)


def _number(f, value, want, kind):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (kind is int and not isinstance(value, int)) or \
            (isinstance(value, float) and not math.isfinite(value)):
        raise ValueError(f"must be {want}, got {shown(value)}")
    lo_bad = f.min is not None and (value <= f.min if f.min_open else value < f.min)
    hi_bad = f.max is not None and (value >= f.max if f.max_open else value > f.max)
    if lo_bad or hi_bad:
        raise ValueError(f"must be {want}, got {shown(value)}")
    if kind is float and abs(value) > F32_MAX:
        raise ValueError(f"must be {want} and at most {F32_MAX:.4g} (the largest float32, "
                         f"which the GPU computes in), got {shown(value)}")
    if kind is float and f.min_open and f.min == 0 and value < F32_TINY:
        raise ValueError(f"must be {want} and at least {F32_TINY:.4g} (smaller is 0 in "
                         f"float32, which the GPU computes in), got {shown(value)}")
    return kind(value)


def _owner(f) -> tuple[str, tuple]:
    """("optimizer" | "scheduler" | "loss", the choices field ``f`` belongs to)."""
    for kind, names in (("optimizer", f.optimizers), ("scheduler", f.schedulers),
                        ("loss", f.losses)):
        if names:
            return kind, names
    return "", ()


def parse(data, *, train_images: int | None = None, classes: int | None = None,
          test_images: int | None = None) -> RunConfig:
    """A checked, complete ``RunConfig`` from ``data`` (a dict or a RunConfig).

    ``train_images``: the training images available (the whole split; ``train_images`` of the
    config picks a prefix): when given, the batch size is checked against the images used and
    the run-dependent defaults are resolved (``resolve``). ``test_images``: the test images
    available: ``eval_images`` must not exceed them (its default becomes at most them).
    ``classes``: the model's output classes, to check ``class_weights``. Raises ConfigError
    listing every problem."""
    if isinstance(data, RunConfig):
        data = data.to_dict()
    if not isinstance(data, dict):
        raise ConfigError([("config", f"must be an object of options, got {data!r}")])
    data = {k: v for k, v in upgrade(data).items() if v is not None}
    errors, values = [], {}
    errors += unknown_options(data, BY_NAME)
    for name in CHOOSERS:  # the choosers first: they decide which fields apply
        if name in data:
            try:
                values[name] = _check_value(BY_NAME[name], data[name])
            except ValueError as exc:
                errors.append((name, str(exc)))
        values.setdefault(name, BY_NAME[name].default)
    for f in FIELDS:
        if f.name in CHOOSERS:
            continue
        if not applies(f, values):
            if f.name in data:
                kind, names = _owner(f)
                errors.append((f.name, f"applies to {kind} {', '.join(names)} only, not "
                                       f"{kind} {values[kind]}"))
            continue
        if f.name in data:
            try:
                values[f.name] = _check_value(f, data[f.name])
            except ValueError as exc:
                errors.append((f.name, str(exc)))
                continue
        else:
            values[f.name] = default_for(f, values["optimizer"], values["scheduler"])
        if values[f.name] is None and values["scheduler"] in f.required_by:
            errors.append((f.name, f"required by scheduler {values['scheduler']} "
                                   f"({describe(f)})"))
    errors += _rules(values)
    if not errors:
        errors += packed(values, 1)
    if not errors and train_images is not None:
        if "val_images" not in data:  # the default: at most a tenth of a small dataset
            values["val_images"] = min(values["val_images"], train_images // 10)
        errors += resolve(values, train_images)
    if not errors and test_images is not None:
        if "eval_images" not in data:  # the default: the whole test split up to 10,000
            values["eval_images"] = max(1, min(values["eval_images"], test_images))
        elif values["eval_images"] > test_images:
            errors.append(("eval_images", f"must be an integer in [1, {test_images:,}] (the "
                                          f"dataset's {test_images:,} test images), got "
                                          f"{values['eval_images']:,}"))
    if not errors and classes is not None and values.get("class_weights") is not None \
            and len(values["class_weights"]) != classes:
        errors.append(("class_weights", f"must be {classes} numbers, each >= 0 (one per class "
                                        f"of the model), got {len(values['class_weights'])}"))
    if errors:
        raise ConfigError(errors)
    return RunConfig(values)


def unknown_options(data: dict, known) -> list:
    """The errors of the keys of ``data`` not in ``known``: the first ``MAX_UNKNOWN`` named
    (cut to ``SHOWN`` characters), the list of known options once, the rest counted."""
    bad = [k for k in data if k not in known]
    if not bad:
        return []
    errors = [(shown(k)[1:-1] if isinstance(k, str) and len(k) <= SHOWN else shown(k),
               "unknown option" + (f" (known: {', '.join(known)})" if i == 0 else ""))
              for i, k in enumerate(bad[:MAX_UNKNOWN])]
    if len(bad) > MAX_UNKNOWN:
        rest = len(bad) - MAX_UNKNOWN
        errors.append(("config", f"{rest:,} more unknown option{'s' if rest != 1 else ''} "
                                 "(not listed)"))
    return errors


def _rules(v: dict) -> list:
    """The rules between fields (no data needed)."""
    errors = []
    if v.get("nesterov") and (not v.get("momentum") or v.get("dampening")):
        errors.append(("nesterov", "needs momentum > 0 and dampening 0 (momentum is "
                                   f"{v.get('momentum', 0):g}, dampening "
                                   f"{v.get('dampening', 0):g})"))
    if v.get("cycle_momentum") and v["optimizer"] in ("adagrad", "adadelta"):
        errors.append(("cycle_momentum", f"{v['optimizer']} has no momentum or beta1 for "
                                         "OneCycleLR to cycle: must be false with it"))
    given = [k for k in FINETUNE if v.get(k)]
    if len(given) > 1:
        errors.append((given[1], f"give one of {', '.join(FINETUNE)}, not both {given[0]} "
                                 f"and {given[1]}"))
    return errors


def packed(v: dict, per_epoch: int) -> list:
    """The errors of the products the GPU computes in float32 from the options (each option
    alone is checked against float32 by ``_number``): the learning rate a StepLR /
    ExponentialLR with gamma > 1 reaches by the last step (``per_epoch`` steps per epoch; 1
    gives a lower bound), Adam's lr / (1 - beta1) of its first step, lr x weight_decay and the
    sum of the class weights."""
    errors, lr, name = [], v["lr"], "lr"
    sched, gamma = v["scheduler"], v.get("gamma") or 0.0
    if sched == "onecycle" and (v.get("max_lr") or 0) > lr:
        lr, name = v["max_lr"], "max_lr"
    if sched in ("steplr", "exponential") and gamma > 1:
        count = v["epochs"] * (per_epoch if v.get("interval") == "step" else 1)
        if v.get("interval") == "step" and v.get("max_steps"):
            count = min(count, v["max_steps"])
        decays = (count - 1) // (v.get("step_size") or 1) if sched == "steplr" else count - 1
        if math.log(lr) + decays * math.log(gamma) > math.log(F32_MAX):
            errors.append(("gamma", f"lr x gamma^{decays:,} (the learning rate of the last "
                                    f"step) is above {F32_MAX:.4g}, the largest float32: "
                                    f"lower gamma (now {gamma:g}) or lr ({v['lr']:g})"))
            return errors
        lr *= gamma ** decays
    if v["optimizer"] in ("adam", "adamw"):
        cycled = sched == "onecycle" and v.get("cycle_momentum")
        beta1 = max(v["betas"][0], v.get("max_momentum", 0) if cycled else 0)
        if lr / (1 - beta1) > F32_MAX:
            errors.append((name, f"{name} / (1 - beta1) = {lr / (1 - beta1):.4g} (Adam's step "
                                 f"size at step 1) is above {F32_MAX:.4g}, the largest "
                                 f"float32: lower {name} (now {lr:g})"))
    if lr * (v.get("weight_decay") or 0.0) > F32_MAX:
        errors.append(("weight_decay", f"{name} x weight_decay = {lr * v['weight_decay']:.4g} "
                                       f"is above {F32_MAX:.4g}, the largest float32: lower "
                                       f"weight_decay (now {v['weight_decay']:g})"))
    if sum(v.get("class_weights") or ()) > F32_MAX:
        errors.append(("class_weights", f"the weights sum to more than {F32_MAX:.4g}, the "
                                        "largest float32 (the mean divides by their sum)"))
    return errors


def resolve(v: dict, train_images: int) -> list:
    """With ``train_images`` available: check ``train_images`` and ``batch_size`` against them
    and fill the run-dependent defaults into ``v`` (StepLR step_size is static; CosineAnnealingLR
    T_max = the epochs, x steps per epoch with interval "step"; OneCycleLR max_lr = lr and
    total_steps = epochs x steps per epoch, which must cover the run's steps, and whose first
    phase must have steps). Returns the errors."""
    val = v.get("val_images") or 0
    if train_images < 2:  # no option fits: say so (not "in [0, 0]... got 0")
        images = f"{train_images:,} training image{'s' if train_images != 1 else ''}"
        held = f" and {val:,} validation images (--val-images)" if val else ""
        return [("val_images" if val else "batch_size",
                 f"the dataset has {images}, but a batch of {int(v['batch_size']):,} "
                 f"(--batch-size){held} need{'' if val else 's'} {int(v['batch_size']) + val:,}"
                 ": a run needs at least 2 training images (a batch of 2, --val-images 0); "
                 "give the dataset more training images")]
    if val > train_images - 2:
        return [("val_images", f"must be an integer in [0, {max(train_images - 2, 0):,}] (the "
                               f"{train_images:,} training images less a batch of 2 to train "
                               f"on; 0 = no validation), got {val:,}")]
    if v["train_images"] > train_images - val:
        return [("train_images", f"must be an integer in [0, {train_images - val:,}] (the "
                                 f"{train_images:,} training images less the last {val:,} "
                                 f"held out for validation; 0 = all of them), got "
                                 f"{v['train_images']:,}")]
    used = train_used(v, train_images)
    if v["batch_size"] > used:
        return [("batch_size", f"must be an integer in [2, {used:,}] (at most the {used:,} "
                               f"training images), got {v['batch_size']:,}")]
    per_epoch, total = steps(v, train_images)
    if packed(v, per_epoch):
        return packed(v, per_epoch)
    name = v["scheduler"]
    if name == "cosine" and v.get("T_max") is None:
        v["T_max"] = v["epochs"] * (per_epoch if v["interval"] == "step" else 1)
    elif name == "onecycle":
        if v.get("max_lr") is None:
            v["max_lr"] = v["lr"]
        if v.get("total_steps") is None:
            v["total_steps"] = max(1, v["epochs"] * per_epoch)
        if v["total_steps"] < total:
            return [("total_steps", f"must be an integer >= {total:,} (this run takes "
                                    f"{total:,} steps; torch refuses to step past "
                                    f"total_steps), got {v['total_steps']:,}")]
        if v["pct_start"] * v["total_steps"] == 1:
            return [("pct_start", f"must not be 1/total_steps ({1 / v['total_steps']:g}): the "
                                  "first phase of the cycle would have no steps (torch divides "
                                  "by zero)")]
    return []


def replace(cfg: RunConfig, **changes) -> RunConfig:
    """A new, re-checked RunConfig: ``cfg`` with ``changes`` (None removes a key)."""
    return parse({**cfg.to_dict(), **changes})


def resume_with(cfg: RunConfig, given: dict) -> RunConfig:
    """A stored run's config ``cfg`` with the options ``given`` again on ``--resume``: a new
    optimizer / scheduler / loss choice starts that group afresh (its stored options go),
    the other options update the stored ones. Raises ConfigError for an option that may
    not change on resume (its field's ``resume`` is false), naming the stored value."""
    stored = cfg.to_dict()
    errors = [(k, f"may not change on --resume (the run has {stored.get(k)!r}, "
                  f"{v!r} given): it would not continue exactly")
              for k, v in given.items() if k in BY_NAME and not BY_NAME[k].resume
              and v != stored.get(k, BY_NAME[k].default)]
    if errors:
        raise ConfigError(errors)
    base = cfg.to_json()
    for chooser, group in (("scheduler", "schedule"), ("loss", "loss")):
        if chooser in given:
            base = {k: v for k, v in base.items() if BY_NAME[k].group != group}
    if any(k in given for k in ("trainable", "freeze", "head_only")):
        base.pop("trainable", None)
    return parse({**base, **given})

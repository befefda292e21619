"""A class session's run configuration: one checking function, ``check_config``.

The session stores the config as a plain JSON dict (the page's start config: ``model`` plus the
training options) and ``pinned``, the keys students may not change. ``check_config`` checks it
with the run configuration's validator (``engine/config``: ``config.parse``), the same code as
the CLI, the page and the worker; the options are the page's fields of its schema.
"""

from __future__ import annotations

from ...engine import config as run_config
from ...engine.config import ConfigError as ConfigError
from ...engine.config.validate import shown, unknown_options

# the page's options (the schema's fields the page shows; trainable is the model summary's)
OPTIONS = tuple(f.name for f in run_config.FIELDS
                if "page" in f.where and f.group != "finetune")
# every option's default (the default optimizer's, scheduler's and loss's), for the teacher's form
DEFAULTS = {"model": "seednet", **{
    f.name: run_config.default_for(f, run_config.BY_NAME["optimizer"].default,
                                   run_config.BY_NAME["scheduler"].default)
    for f in run_config.FIELDS if f.name in OPTIONS}}
PINNABLE = ("model", *OPTIONS)


def check_config(config, models: set | None = None, *, train_images: int | None = None,
                 classes_of=None) -> dict:
    """The checked, complete config of a session: ``model`` and every option that applies to
    the chosen optimizer, scheduler and loss (defaults filled in; options of another choice are
    left out: the teacher's form sends them all; so are options that are off, None).
    ``models``: the model names the server has (the ``model`` must be one);
    ``train_images``: the training split's images and ``classes_of(model)``: the model's
    classes (None: unknown), to check the config against them as the trainer will (batch size
    against the images left after the validation hold-out, one class weight per class, the
    schedule's steps). Raises ConfigError naming each bad field.

    >>> check_config({"model": "seednet", "lr": 0.01})["batch_size"]
    64
    """
    if not isinstance(config, dict):
        raise ConfigError([("config", "must be an object of options")])
    errors = unknown_options(config, PINNABLE)
    model = config.get("model", DEFAULTS["model"])
    if not isinstance(model, str) or not model or (models is not None and model not in models):
        known = ", ".join(sorted(models or ())) or "(none)"
        errors.append(("model", f"unknown model {shown(model)} (this server has: {known})"))
    options = {k: v for k, v in config.items() if k in OPTIONS}
    chosen = {k: options.get(k, run_config.BY_NAME[k].default)
              for k in ("optimizer", "scheduler", "loss")}
    options = {k: v for k, v in options.items()
               if run_config.applies(run_config.BY_NAME[k], chosen)}
    classes = classes_of(model) if classes_of and isinstance(model, str) and model else None
    try:
        cfg = run_config.parse(options)  # stored as given: auto values resolve per student
        run_config.parse(options, train_images=train_images, classes=classes)
    except ConfigError as exc:
        errors += exc.errors
    if errors:
        raise ConfigError(errors)
    return {"model": model, **{k: v for k, v in cfg.to_json().items()
                               if k in OPTIONS and v is not None}}


def check_pinned(pinned) -> list:
    """The pinned keys, checked: a list of ``PINNABLE`` names."""
    if not isinstance(pinned, list) or not all(isinstance(p, str) for p in pinned):
        raise ConfigError([("pinned", "must be a list of option names")])
    bad = [p for p in pinned if p not in PINNABLE]
    if bad:
        more = f" and {len(bad) - 3:,} more" if len(bad) > 3 else ""
        raise ConfigError([("pinned", f"unknown option {', '.join(map(shown, bad[:3]))}{more} "
                                      f"(known: {', '.join(PINNABLE)})")])
    return sorted(set(pinned))


def effective(session_config: dict, pinned: list, student_config: dict | None) -> dict:
    """What a student runs: their config with the pinned keys taken from the session."""
    cfg = dict(student_config or session_config)
    cfg.update({k: session_config[k] for k in pinned if k in session_config})
    return cfg

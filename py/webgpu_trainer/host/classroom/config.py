"""A class session's run configuration: one checking function, ``check_config``.

The session stores the config as a plain JSON dict (the page's start config: ``model`` plus the
training options) and ``pinned``, the keys students may not change. ``check_config`` is the ONE
place that validates it; today it checks the page's options against ``engine.train.DEFAULTS``
(names, types, ranges) and builds the optimizer on the host. When the run-configuration schema
(``engine/config``) lands, its ``validate.parse`` replaces the body and nothing else changes.
"""

from __future__ import annotations

import math

from ...engine import train as train_mod

# the page's options (docs/ARCHITECTURE.md, "Worker protocol") with their kinds and limits
OPTIONS = {
    "optimizer": ("choice", ("adam", "adamw", "adagrad", "sgd", "rmsprop", "adadelta")),
    "lr": ("float", (0.0, 10.0)),
    "batch_size": ("int", (2, 60000)),
    "epochs": ("int", (1, 1000)),
    "seed": ("int", (0, 2 ** 32 - 1)),
    "init": ("choice", ("scratch", "finetune")),
    "momentum": ("float", (0.0, 1.0)),
    "weight_decay": ("float", (0.0, 1.0)),
    "max_steps": ("int", (0, 10 ** 7)),
    "eval_images": ("int", (1, 10000)),
}
DEFAULTS = {"model": "seednet", **{k: train_mod.DEFAULTS[k] for k in OPTIONS}}
PINNABLE = ("model", *OPTIONS)


class ConfigError(ValueError):
    """A bad session config; ``errors`` is ``[(field, message), ...]`` and the text names
    every field."""

    def __init__(self, errors):
        self.errors = [(str(f), str(m)) for f, m in errors]
        super().__init__("; ".join(f"{f}: {m}" for f, m in self.errors))


def _check(name: str, value) -> str | None:
    kind, spec = OPTIONS[name]
    if kind == "choice":
        return None if value in spec else f"must be one of {', '.join(spec)}, got {value!r}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number, got {value!r}"
    if kind == "int" and not float(value).is_integer():
        return f"must be a whole number, got {value!r}"
    if not math.isfinite(value) or not spec[0] <= value <= spec[1]:
        return f"must be in [{spec[0]}, {spec[1]}], got {value!r}"
    if name == "lr" and value <= 0:
        return f"must be > 0, got {value!r}"
    return None


def check_config(config, models: set | None = None) -> dict:
    """The checked, complete config of a session: every option of ``DEFAULTS`` (defaults
    filled in), numbers as int / float. ``models``: the model names the server has (the
    ``model`` must be one). Raises ConfigError naming each bad field.

    >>> check_config({"model": "seednet", "lr": 0.01})["batch_size"]
    64
    """
    if not isinstance(config, dict):
        raise ConfigError([("config", "must be an object of options")])
    errors = [(k, f"unknown option (known: {', '.join(DEFAULTS)})")
              for k in config if k not in DEFAULTS]
    out = dict(DEFAULTS)
    for k, v in config.items():
        if k == "model":
            if not isinstance(v, str) or not v or (models is not None and v not in models):
                known = ", ".join(sorted(models or ())) or "(none)"
                errors.append(("model", f"unknown model {v!r} (this server has: {known})"))
            else:
                out["model"] = v
        elif k in OPTIONS:
            problem = _check(k, v)
            if problem:
                errors.append((k, problem))
            else:
                out[k] = int(v) if OPTIONS[k][0] == "int" else (
                    float(v) if OPTIONS[k][0] == "float" else v)
    if not errors:
        from ...engine import optim
        try:
            optim.make(out["optimizer"], out["lr"], out["momentum"], out["weight_decay"])
        except (ValueError, TypeError) as exc:
            errors.append(("optimizer", str(exc)))
    if errors:
        raise ConfigError(errors)
    return out


def check_pinned(pinned) -> list:
    """The pinned keys, checked: a list of ``PINNABLE`` names."""
    if not isinstance(pinned, list) or not all(isinstance(p, str) for p in pinned):
        raise ConfigError([("pinned", "must be a list of option names")])
    bad = [p for p in pinned if p not in PINNABLE]
    if bad:
        raise ConfigError([("pinned", f"unknown option {', '.join(map(repr, bad))} (known: "
                                      f"{', '.join(PINNABLE)})")])
    return sorted(set(pinned))


def effective(session_config: dict, pinned: list, student_config: dict | None) -> dict:
    """What a student runs: their config with the pinned keys taken from the session."""
    cfg = dict(student_config or session_config)
    cfg.update({k: session_config[k] for k in pinned if k in session_config})
    return cfg

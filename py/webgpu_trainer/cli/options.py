"""The command-line options of ``webgpu-trainer train``, made from the run configuration's
schema (``engine/config``): one flag per field whose ``where`` has "cli", named ``--name``
(``_`` as ``-``) unless the field states its ``flag``, with the field's help, allowed values,
default and owners in ``--help``. ``add_freeze_options`` adds the fine-tuning fields alone (for
``summary``). ``given(args)`` is the ``{field: value}`` of the flags given."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..engine import config
from ..engine.config import BY_NAME, FIELDS, GROUPS


def _names(text: str) -> list:
    names = [n.strip() for n in str(text).split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("no parameter names given")
    return names


def _numbers(text: str) -> list:
    out = []
    for piece in str(text).split(","):
        try:
            out.append(float(piece))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{piece.strip()!r} is not a number (give one "
                                             "weight per class, comma-separated)") from None
    return out


def _default_text(f) -> str:
    if f.auto:
        return f"default: {f.auto}"
    parts = [] if f.default is None else [f"default {_show(f.default)}"]
    parts += [f"{k} {_show(v)}" for k, v in f.defaults.items()]
    if f.required_by:
        parts.append(f"required by {', '.join(f.required_by)}")
    if not parts:
        return "default: off"
    return "; ".join(parts if f.default is not None else ["default: " + parts[0]] + parts[1:])


def _show(v) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, list):
        return " ".join(f"{x:g}" for x in v)
    return f"{v:g}" if isinstance(v, float) else str(v)


def help_text(f) -> str:
    """``--help``'s line of field ``f``: what it is, the allowed values, the default, which
    optimizer / scheduler / loss it belongs to, and whether ``--resume`` may change it."""
    owners = next((f"{k}: {', '.join(v)}" for k, v in (
        ("optimizer", f.optimizers), ("scheduler", f.schedulers), ("loss", f.losses)) if v), "")
    parts = ([] if f.type in ("choice", "bool") else [config.describe(f)]) + \
        [_default_text(f)] + ([owners] if owners else []) + \
        ([] if f.resume else ["fixed on --resume"])
    return f"{f.help}: {'; '.join(parts)}".replace("%", "%%")


def _add(g, f) -> None:
    kw = {"dest": f.name, "default": argparse.SUPPRESS, "help": help_text(f)}
    if f.type == "bool":  # --x / --no-x (a fine-tuning input: --x alone)
        kw["action"] = "store_true" if f.group == "finetune" else \
            argparse.BooleanOptionalAction
    elif f.type == "choice":
        kw["choices"] = list(f.choices)
    elif f.type == "str":
        kw["metavar"] = f.metavar or f.name.upper()
    elif f.type == "list" and f.length:
        kw.update(type=float, nargs=f.length, metavar=tuple(
            f"{f.metavar or f.name.upper()}{i + 1}" for i in range(f.length)))
    elif f.type == "list":
        kw.update(type=_names if f.item == "str" else _numbers, metavar=f.metavar)
    else:
        kw.update(type=int if f.type == "int" else float,
                  metavar=f.metavar or f.name.upper())
    g.add_argument(f.cli_flag, **kw)


def add_config_options(p, groups=tuple(GROUPS)) -> None:
    """One argument group per schema group in ``groups``, one flag per CLI field; the
    fine-tuning fields are mutually exclusive."""
    for group in groups:
        g = p.add_argument_group(GROUPS[group])
        if group == "finetune":
            g = g.add_mutually_exclusive_group()
        for f in FIELDS:
            if f.group == group and "cli" in f.where:
                _add(g, f)


def add_freeze_options(p) -> None:
    """``--trainable`` | ``--freeze`` | ``--head-only`` (mutually exclusive; see
    ``run_config.resolve_trainable``), for ``train`` and ``summary``."""
    add_config_options(p, ("finetune",))


def given(args) -> dict:
    """``{field: value}`` of the config flags given on the command line (the others are absent
    from ``args``)."""
    return {k: v for k, v in vars(args).items() if k in BY_NAME}


def add_train(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("train", help="train a model natively (wgpu-py, or numpy with --device "
                                     "cpu) on a dataset (MNIST by default), with checkpoints, "
                                     "metrics and the trained .onnx")
    p.add_argument("model", type=Path, nargs="?", default=None,
                   help="the .onnx model (optional with --resume)")
    p.add_argument("--data-dir", dest="data_dir", type=Path, default=None,
                   help="the dataset's folder (default <data root>/<--data NAME>)")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (default runs/<model>-<timestamp>)")
    p.add_argument("--data-root", dest="data_root", type=Path, default=None,
                   help="the folder of prepared datasets (default <repo>/.cache/datasets); "
                        "--data-dir names the dataset's folder directly")
    p.add_argument("--resume", type=Path, default=None,
                   help="continue the run in DIR from its last checkpoint, with its "
                        "config.json; options given again override the stored ones")
    p.add_argument("--no-progress", dest="no_progress", action="store_true",
                   help="no progress bar")
    p.add_argument("--force", action="store_true",
                   help="train on the GPU even when its self-check (webgpu-trainer doctor) "
                        "finds wrong results")
    add_config_options(p)
    return p

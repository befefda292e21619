"""A native run's config (config.json's ``config``, a ``config.RunConfig``) from the ``train``
options, on top of the stored config of a resumed run (``resolve_config``), the fine-tuning
options resolved against the model (``resolve_trainable``), and the CLI's form of a
``ConfigError`` (``flag_errors``: the fields named by their flags)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..engine import config
from ..engine.config import BY_NAME, ConfigError
from ..engine.tools.summary import head_params
from .options import given as given_options


def _name_list(names, flag: str) -> list:
    if isinstance(names, str):
        names = names.split(",")
    names = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    if not names:
        raise ValueError(f"{flag}: no parameter names given")
    return names


def resolve_trainable(graph: dict, trainable=None, freeze=None,
                      head_only: bool = False) -> list | None:
    """``config["trainable"]`` from the fine-tuning options, for the bundle ``graph``: the
    names of the parameters (role "param" tensors) that train, in graph order; None when no
    option is given (everything trains).

    ``trainable``: parameter names (a list, or comma-separated), exactly; ``freeze``: names
    or name prefixes, likewise (``conv1.`` matches ``conv1.weight`` and ``conv1.bias``; a
    plain string prefix, so ``conv`` matches every ``conv*``), every parameter but those
    trains;
    ``head_only``: ``summary.head_params(graph)``. Raises ValueError naming the unknown names
    (and a buffer named as a parameter) and listing the model's parameters, or when nothing
    would train."""
    roles = {t["name"]: t["role"] for t in graph["tensors"]}
    params = [n for n, r in roles.items() if r == "param"]
    listing = f"the model's parameters: {', '.join(params) or '(none)'}"

    def quote(names):
        return ", ".join(map(repr, names))

    if head_only:
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


def flag_errors(exc: ConfigError) -> list:
    """The lines of ``exc`` with each field named by its CLI flag (``--batch-size: ...``)."""
    return [f"{BY_NAME[f].cli_flag if f in BY_NAME else f}: {m}" for f, m in exc.errors]


def _freeze_given(args) -> bool:
    return any(getattr(args, k, None) for k in ("trainable", "freeze", "head_only"))


def with_trainable(cfg: config.RunConfig, graph: dict, args) -> config.RunConfig:
    """``cfg`` with ``trainable`` resolved from the fine-tuning options given (``--trainable``,
    ``--freeze``, ``--head-only``) against the model ``graph``; ``freeze`` and ``head_only``
    are inputs only (config.json stores the resolved ``trainable``)."""
    if not _freeze_given(args):
        return cfg
    names = resolve_trainable(graph, getattr(args, "trainable", None),
                              getattr(args, "freeze", None),
                              bool(getattr(args, "head_only", False)))
    return config.replace(cfg, trainable=names, freeze=None, head_only=None)


def read_stored(path: Path) -> dict:
    """A run folder's config.json, checked for what ``--resume`` reads: ValueError naming the
    file and the problem (not JSON, with its position; a missing or mistyped key)."""
    try:
        stored = json.loads(path.read_bytes())
    except ValueError as exc:
        raise ValueError(f"--resume: {path} is not valid JSON ({exc})") from None
    if not isinstance(stored, dict):
        raise ValueError(f"--resume: {path} holds {type(stored).__name__}, not a JSON object")
    for key, what in (("config", "the run's settings"), ("model", "the model's path")):
        if not isinstance(stored.get(key), dict):
            state = "has no" if key not in stored else "has a malformed"
            raise ValueError(f"--resume: {path} {state} {key!r} object ({what})")
    if not isinstance(stored["model"].get("path"), str):
        raise ValueError(f"--resume: {path} has no 'model' 'path' (the model's file)")
    return stored


def resolve_config(args) -> tuple[config.RunConfig, Path, Path, dict | None]:
    """``(config, model path, out dir, stored config.json or None)`` from the ``train``
    options: a new run's config, or the resumed run's stored config updated with the options
    given again (``RunConfig.updated``; config.json of earlier versions is read too). Raises
    ConfigError for a bad option, ValueError for a bad folder."""
    given = given_options(args)
    if args.resume:
        run_dir = Path(args.resume)
        if not (run_dir / "config.json").is_file():
            raise ValueError(f"--resume {run_dir}: not a run folder (no config.json; give the "
                             "--out folder of an earlier train)")
        stored = read_stored(run_dir / "config.json")
        try:  # runs of earlier versions trained on every training image (no validation)
            cfg = config.parse({"val_images": 0, **stored["config"]})
        except ConfigError as exc:
            lines = "; ".join(f"{k}: {m}" for k, m in exc.errors)
            raise ValueError(f"--resume: {run_dir / 'config.json'}: its 'config' is not a "
                             f"valid run configuration: {lines}") from None
        cfg = config.resume_with(cfg, given)
        model = Path(args.model) if args.model else Path(stored["model"]["path"])
        if args.out and Path(args.out).resolve() != run_dir.resolve():
            raise ValueError("--out and --resume name different folders; a resumed run "
                             "continues in its own folder")
        return cfg, model, run_dir, stored
    if args.model is None:
        raise ValueError("MODEL.onnx is required (unless --resume DIR)")
    cfg = config.parse(given)
    model = Path(args.model)
    out = Path(args.out or Path("runs") / f"{model.stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    if (out / "config.json").exists() or any((out / "checkpoints").glob("*.ckpt")):
        raise ValueError(f"--out {out} already holds a run (config.json or checkpoints) that a "
                         f"new run would overwrite: give another folder, or --resume {out} to "
                         "continue it")
    return cfg, model, out, None

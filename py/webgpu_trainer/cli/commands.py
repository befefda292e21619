"""Native command-line trainer, predictor and model summary (CPython): ``webgpu-trainer train |
predict | summary``.

``train MODEL.onnx`` runs the same ``train.Trainer`` as the browser, over the GPU engine on
wgpu-py (``--device gpu``, the default) or the numpy engine (``--device cpu``, float32: the "no
GPU" path; the same loop, data order, init and dropout bits, optimizers, schedulers and guard)
and writes into ``--out`` (default ``runs/<model>-<timestamp>``):

- ``config.json``: the full config, the data subset, the model's sha256, package versions and
  the adapter;
- ``metrics.jsonl``: one JSON line per epoch (epoch, step, train_loss, train_acc = means over the
  epoch's steps, valid_loss, valid_acc, elapsed_s);
- ``checkpoints/epoch-NNN.ckpt`` (``epoch-NNN-step-SSSSSSS.ckpt`` inside an epoch: when
  ``--max-steps`` stops there, and every ``--checkpoint-every-s`` seconds, the newest replacing
  the older ones): see ``write_checkpoint`` (weights + optimizer state + epoch + step + RNG
  state + the epoch's running sums), written atomically (temp file, fsync, rename);
- ``model.onnx``: ``onnx_io.export_onnx`` of the trained weights with provenance.

``--resume DIR`` loads DIR's config and last checkpoint and continues in DIR; options given on the
command line (e.g. ``--epochs``, ``--lr``) override the stored config. The data order depends only
on (seed, epoch) (``random.Random(seed * 1000003 + epoch)``), dropout on (seed, step) and the lr
and momentum schedules on the step, so a resumed run repeats the uninterrupted run's losses
exactly. Checkpoints of both devices share one format (weights in the plan's layout, the
optimizer state of ``optim.Optimizer.state_bytes``), so a run may also resume on the other
device (the same dropout masks; not bit for bit: float32 rounding in another order). A damaged
run folder is refused naming the file and the problem (``checkpoints.read_last``,
``run_config.read_stored``), as is a config.json edited away from its checkpoint
(``checkpoints.fixed_on_resume``); a run that fails before its first step leaves ``--out`` as
it was (``checkpoints.undo_for``).

The options (``options.add_train``) are the fields of the run configuration's schema
(``engine/config``): the optimizer and its torch.optim keywords, clipping, the schedule, the
loss, the fine-tuning options; ``config.parse`` checks them all at once (exit 2 listing every
bad option by its flag) and resolves the defaults that depend on the run (e.g. OneCycleLR's
``total_steps``) before anything is written. config.json's ``config`` is the flat
``RunConfig.to_json()``; ``--resume`` reuses it (``RunConfig.updated``: a new ``--scheduler`` or
``--loss`` starts that group afresh, other options update the stored ones; config.json files of
earlier versions are read too). ``--trainable NAME[,NAME...]``, ``--freeze NAME[,NAME...]``
(names or name prefixes) and ``--head-only`` (``summary.head_params``) are resolved against the
model (``resolve_trainable``) into ``trainable``, the list of the parameters that train in graph
order (None: all of them).

``summary MODEL.onnx`` prints ``summary.summarize`` as a table (layers, output shapes for one
sample, parameters, multiply-adds, trainable marks, totals); a model that cannot be imported or
trained exits 2 after listing every problem, one per line.

The pieces live in ``checkpoints.py`` (the checkpoint file and its sections), ``devices.py``
(``--device`` and the trainer for it), ``predict.py`` (the ``predict`` command), ``options.py``
(the options of ``train`` and the fine-tuning options, from the schema), ``run_config.py`` (the
config from the options, ``--resume``), ``train_outputs.py`` (config.json, the call-backs that
write metrics.jsonl and the checkpoints, the provenance) and ``summary_table.py``
(``summary``'s table); their names stay importable from here.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import platform
import sys
from pathlib import Path

from . import doctor, run_data
from ..engine import config as run_config
from ..engine.train import data as train_data, loop as train_mod
from ..engine.train import checkpoint as engine_ckpt
from .checkpoints import (CKPT_FORMAT as CKPT_FORMAT, CKPT_MAGIC as CKPT_MAGIC,  # noqa: F401
                          fixed_on_resume, last_checkpoint, load_optimizer_state,
                          optimizer_state, read_checkpoint, read_last, read_weights, undo_for,
                          write_checkpoint, write_weights)
from ..host.data import atomic_write
from .devices import CpuDevice as CpuDevice, is_numpy, make_trainer, open_device
from ..engine.ops import losses
from .summary_table import format_summary
from .run_config import flag_errors, resolve_config, resolve_trainable, with_trainable
from .options import add_freeze_options, add_train, given as given_options
from .train_outputs import callbacks, config_document, print_trainable, provenance
from .predict import (add_predict, engine_log_probs as engine_log_probs, predict,
                      onnxruntime_probs as onnxruntime_probs)

EXIT_DIVERGED = 3


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


def load_splits(data_dir, train_images: int = 0, eval_images: int = 10000):
    """``(train Split, test Split, manifest)`` of the dataset in ``data_dir`` (default MNIST's
    folder, prepared if needed); ``train_images`` > 0 keeps the first N training samples, the
    test split keeps the first ``eval_images``."""
    train, test, manifest, _, _ = run_data.load_dataset(
        run_data.dataset_folder("mnist", data_dir), "mnist", train_images, eval_images)
    return train, test, manifest


# ------------------------------------------------------------------------------ train

def train(args) -> int:
    from ..host.data import DataError
    try:
        return asyncio.run(_train(args))
    except train_mod.TrainingDiverged as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_DIVERGED
    except run_config.ConfigError as exc:
        lines = flag_errors(exc)
        print("error: " + (lines[0] if len(lines) == 1 else f"{len(lines)} bad options:\n- "
                           + "\n- ".join(lines)), file=sys.stderr)
        return 2
    except (NotImplementedError, ValueError, FileNotFoundError, DataError,
            doctor.SelfCheckFailed) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - never a traceback: name the failure
        print(f"error: training failed unexpectedly ({type(exc).__name__}: {exc})",
              file=sys.stderr)
        return 1


def _resolve(args):
    """``args``' config checked against its model: ``(cfg, model_path, out, stored, graph,
    weights, classes)``; the loss is printed where a final Softmax decides it."""
    from .. import onnx_io
    cfg, model_path, out, stored = resolve_config(args)
    if not model_path.is_file():
        raise FileNotFoundError(f"model {model_path} not found")
    graph, weights = onnx_io.load_bundle(model_path)
    cfg = with_trainable(cfg, graph, args)
    train_data.trainable_names(graph, cfg["trainable"])  # a stored list still fits
    from ..engine.graph import Graph
    g = Graph(graph)
    classes = g.shapes(2)[g.output][1]
    cfg = run_config.parse(cfg, classes=classes)  # --class-weights: one per class
    # nll_log only after a final Softmax.
    spec = losses.resolve(cfg.trainer_config()["loss"], losses.final_op(graph), classes)
    if losses.final_op(graph) == "Softmax":
        print(f"loss: {losses.describe(spec, 'Softmax')}", file=sys.stderr)
    return cfg, model_path, out, stored, graph, weights, classes


def folder_of(args, cfg) -> Path:
    """The folder of the run's dataset: ``--data-dir``, else ``<--data-root>/<dataset>``."""
    return run_data.dataset_folder(cfg["dataset"], args.data_dir,
                                   getattr(args, "data_root", None))


def resume_data_dir(args, stored) -> None:
    """A resumed run (``stored``: its config.json) given neither ``--data-dir`` nor
    ``--data-root`` trains on the folder it trained on (config.json's ``data.data_dir``),
    where that folder still exists; the manifest's sha256 check then still refuses changed
    data. Sets ``args.data_dir``."""
    if stored is None or args.data_dir or getattr(args, "data_root", None):
        return
    was = ((stored.get("data") or {}).get("data_dir") or "")
    was = was.strip() if isinstance(was, str) else ""
    if was and Path(was).is_dir():
        args.data_dir = Path(was)
    elif was:
        print(f"note: the folder this run trained on, {was} (config.json), is not there; "
              "looking in the default data root (--data-dir names another)", file=sys.stderr)


def _dataset(args, cfg, stored):
    """``(cfg, (train, test, manifest, spec, manifest sha256))``: the run's dataset loaded
    (both splits whole: ``eval_images`` is checked against the test split's size later);
    with ``--data-dir`` the config's ``dataset`` becomes the folder's. ValueError when
    ``--data`` and ``--data-dir`` name different datasets, or a resumed run's dataset is
    not the one given (both named)."""
    loaded = run_data.load_dataset(folder_of(args, cfg), cfg["dataset"])
    name = loaded[3].name
    if name != cfg["dataset"]:
        if stored is not None:
            raise ValueError(f"--resume: the run trained on dataset {cfg['dataset']}, but "
                             f"{folder_of(args, cfg)} holds dataset {name}: resume it on "
                             f"{cfg['dataset']}")
        if "dataset" in given_options(args):
            raise ValueError(f"--data {cfg['dataset']} and --data-dir {args.data_dir} "
                             f"(dataset {name}) name different datasets")
        cfg = run_config.replace(cfg, dataset=name)
    return cfg, loaded


def _nothing_to_train(cfg, out, step, total) -> bool:
    """True (and says so) when a resumed run is already at or past its last step."""
    if step < total:
        return False
    why = (f"--max-steps {cfg['max_steps']}" if cfg["max_steps"] > 0
           and total == cfg["max_steps"] else f"--epochs {cfg['epochs']}")
    print(f"error: nothing to train: {out} is at step {step} and the run ends at "
          f"step {total} ({why}); resume with a larger --epochs or --max-steps",
          file=sys.stderr)
    return True


async def _run(trainer, args, cfg, out, config_doc, per_epoch, total) -> dict:
    """Writes config.json, then runs ``trainer`` with the progress bar and the per-epoch
    call-backs; a run failing before its first step leaves ``out`` as it was."""
    undo, stepped = undo_for(out), [False]  # a run failing before its first step: no trace
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    atomic_write(out / "config.json", (json.dumps(config_doc, indent=2) + "\n").encode())
    bar = None
    if not getattr(args, "no_progress", False):
        from tqdm import tqdm
        bar = tqdm(total=total, initial=trainer.step, unit="step", dynamic_ncols=True,
                   desc="train", file=sys.stderr)
    trainer.emit, trainer.on_epoch, trainer.on_checkpoint = callbacks(
        trainer, cfg, out, bar, per_epoch, config_doc["model"]["sha256"], stepped)
    try:
        return await trainer.run()
    except train_mod.TrainingDiverged:
        raise  # a step ran: config.json says with what
    except BaseException:
        if not stepped[0]:
            undo()
        raise
    finally:
        if bar is not None:
            bar.close()


async def _train(args) -> int:
    from .. import onnx_io
    cfg, model_path, out, stored, graph, weights, classes = _resolve(args)
    ckpt_path, header, sections = read_last(out) if stored else (None, None, None)
    if header:
        fixed_on_resume(header, cfg, out / "config.json", ckpt_path)
    if header and header["model_sha256"] != _sha256(model_path):
        raise ValueError(f"{model_path} is not the model the checkpoint {ckpt_path} was "
                         "trained from")
    resume_data_dir(args, stored)
    # the whole training split: the trainer holds its last val_images out for validation
    cfg, (train_set, test_set, manifest, spec, manifest_sha) = _dataset(args, cfg, stored)
    note = run_data.check_model_fits(spec, classes, model_path,
                                     (("training", train_set), ("test", test_set)))
    from ..engine.graph import Graph
    # the model fits the data (input shape, tokens, labels) before any count check
    train_data.check_fits(Graph(graph), spec, train_set, test_set)
    run_data.check_augment(spec, cfg)
    if note:
        print(f"note: {note}", file=sys.stderr)
    was = ((stored or {}).get("data") or {}).get("manifest_sha256")
    if was and was != manifest_sha:
        raise ValueError(f"--resume: dataset {cfg['dataset']} in {folder_of(args, cfg)} is not "
                         f"the data the run trained on (manifest sha256 {was[:12]}... then, "
                         f"{manifest_sha[:12]}... now: prepared again from other data, or "
                         "another folder of that name); resume with the data it trained on, "
                         "or start a new run")
    source = manifest.get("source")
    dataset = spec.title if spec.name != "own" else f"own ({source})"
    # checked against the data, the run-dependent defaults (e.g. OneCycleLR's total_steps)
    # resolved
    values = cfg.to_dict()
    for key in ("val_images", "eval_images"):
        if stored is None and key not in given_options(args):
            del values[key]  # the defaults: at most a tenth / all of a small dataset's
    cfg = run_config.parse(values, train_images=train_set.count, classes=classes,
                           test_images=test_set.count)
    if cfg["eval_images"] < test_set.count:
        test_set = test_set.part(0, cfg["eval_images"])
    per_epoch, total = cfg.steps(train_set.count)
    dev = open_device(cfg["device"])
    check = None if is_numpy(dev) else await doctor.gate(dev, getattr(args, "force", False))
    # Every check (the trainer's set-up included) passes before anything is written to --out.
    trainer = make_trainer(dev, graph, weights, cfg, train_set, test_set)
    await trainer.setup()
    if header:  # weights, optimizer state, epoch and step (engine/train/checkpoint.py)
        engine_ckpt.restore(trainer, header, sections, str(ckpt_path))
    config_doc = config_document(
        cfg, model_path=model_path, model_sha256=_sha256(model_path), graph=graph,
        dataset=dataset, source=source, trainer=trainer, test_set=test_set,
        data_dir=folder_of(args, cfg), manifest_sha256=manifest_sha,
        versions=versions(), dev=dev, check=check, stored=stored, ckpt_path=ckpt_path)
    if header:
        # the epoch as the checkpoint's name counts it: 1-based, the one step S is in
        print(f"resuming {out} from {ckpt_path.name} (epoch {-(-trainer.step // per_epoch)}, "
              f"step {trainer.step})", file=sys.stderr)
    print_trainable(cfg, graph, bool(header))
    if header and _nothing_to_train(cfg, out, trainer.step, total):
        return 2
    result = await _run(trainer, args, cfg, out, config_doc, per_epoch, total)
    trained = await trainer.trained_weights()
    atomic_write(out / "model.onnx", onnx_io.export_onnx(
        model_path, trained, provenance(cfg, result, trainer, dev, dataset, total)))
    val = (f"valid acc {result['val_acc']:.4f} loss {result['val_loss']:.4f}, "
           if result["val_acc"] is not None else "")
    print(f"done: {result['steps']} steps, {val}test acc {result['test_acc']:.4f} loss "
          f"{result['test_loss']:.4f} on {trainer.n_eval} test images; wrote {out}")
    if result["verdict"] != "ok":
        print(f"warning: {result['reason']}", file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------ summary

def add_summary(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("summary", help="print a model's layers, output shapes, parameters, "
                                       "multiply-adds and trainable parameters (or why it "
                                       "cannot be trained)")
    p.add_argument("model", type=Path, help="the .onnx model")
    p.add_argument("--json", action="store_true", help="print summary.summarize's JSON instead")
    p.add_argument("--batch", type=int, default=None, metavar="N",
                   help="also estimate the GPU memory of training at batch N")
    p.add_argument("--memory-budget", type=float, default=None, metavar="MIB",
                   help="with --batch: refuse above MIB mebibytes, print the largest batch "
                        "that fits")
    add_freeze_options(p)
    return p


def summary(args) -> int:
    from .. import onnx_io
    from ..engine.graph import Graph, GraphError
    from ..engine.tools.summary import memory_at, summarize
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
    if getattr(args, "batch", None) and not problems:
        budget = args.memory_budget and int(args.memory_budget * 2 ** 20)
        result["memory"] = memory_at(graph, args.batch, trainable, budget=budget)
        problems += result["memory"]["problems"]
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

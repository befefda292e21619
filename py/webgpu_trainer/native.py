"""Native command-line trainer and predictor (CPython): ``webgpu-trainer train | predict``.

``train MODEL.onnx`` runs the same ``train.Trainer`` as the browser on wgpu-py and writes into
``--out`` (default ``runs/<model>-<timestamp>``):

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
on (seed, epoch) (``random.Random(seed * 1000003 + epoch)``) and dropout on (seed, step), so a
resumed run repeats the uninterrupted run's losses exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import struct
import sys
import time
from pathlib import Path

from . import train as train_mod
from .data import atomic_write

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


# Optimizer state: switch to opt.state_bytes / load_state_bytes once optim.py has them.

async def optimizer_state(dev, opt) -> bytes:
    if hasattr(opt, "state_bytes"):
        return bytes(await opt.state_bytes(dev))
    parts = []
    for buf in opt.state_buffers():
        data = await dev.read(buf)
        parts.append(struct.pack("<Q", len(data)) + data)
    return b"".join(parts)


def load_optimizer_state(dev, opt, data: bytes) -> None:
    if hasattr(opt, "load_state_bytes"):
        opt.load_state_bytes(dev, data)
        return
    pos = 0
    for buf in opt.state_buffers():
        (n,) = struct.unpack("<Q", data[pos:pos + 8])
        dev.write(buf, data[pos + 8:pos + 8 + n])
        pos += 8 + n
    if pos != len(data):
        raise ValueError("optimizer state does not match this optimizer's buffers")


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


def open_device(kind: str):
    if kind == "cpu":
        raise NotImplementedError("--device cpu is not implemented yet (numpy backend pending); "
                                  "use --device gpu (lavapipe works on a machine without a GPU)")
    if kind != "gpu":
        raise ValueError(f"unknown device {kind!r}: choose gpu or cpu")
    from .backends.wgpu_native import Device
    return Device()


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
              "weight_decay", "max_steps", "eval_images", "report_every")


def add_train(sub) -> argparse.ArgumentParser:
    d = train_mod.DEFAULTS
    p = sub.add_parser("train", help="train a model natively (wgpu-py) on MNIST, with "
                                     "checkpoints, metrics and the trained .onnx")
    p.add_argument("model", type=Path, nargs="?", default=None,
                   help="the .onnx model (optional with --resume)")
    # Defaults are None so that --resume can tell what was given on the command line.
    p.add_argument("--optimizer", choices=["adam", "adamw", "adagrad", "sgd"],
                   help=f"default {d['optimizer']}")
    p.add_argument("--lr", type=float, help=f"learning rate (default {d['lr']})")
    p.add_argument("--batch-size", dest="batch_size", type=int,
                   help=f"default {d['batch_size']}")
    p.add_argument("--epochs", type=int, help=f"default {d['epochs']}")
    p.add_argument("--seed", type=int, help=f"default {d['seed']}")
    p.add_argument("--init", choices=["scratch", "finetune"], help=f"default {d['init']}")
    p.add_argument("--momentum", type=float, help="SGD momentum (default 0)")
    p.add_argument("--weight-decay", dest="weight_decay", type=float, help="default 0")
    p.add_argument("--max-steps", dest="max_steps", type=int, help="0 = no cap (default)")
    p.add_argument("--train-images", dest="train_images", type=int,
                   help="train on the first N training images (0 = all 60000, default)")
    p.add_argument("--eval-images", dest="eval_images", type=int,
                   help=f"validate on the first N test images (default {d['eval_images']})")
    p.add_argument("--report-every", dest="report_every", type=int,
                   help=f"steps between metric readbacks (default {d['report_every']})")
    p.add_argument("--device", choices=["gpu", "cpu"], default=None, help="default gpu")
    p.add_argument("--data-dir", dest="data_dir", type=Path, default=None,
                   help="MNIST cache (default <repo>/.cache/mnist)")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (default runs/<model>-<timestamp>)")
    p.add_argument("--resume", type=Path, default=None,
                   help="continue the run in DIR from its last checkpoint")
    p.add_argument("--no-progress", dest="no_progress", action="store_true",
                   help="no progress bar")
    return p


def train(args) -> int:
    try:
        return asyncio.run(_train(args))
    except train_mod.TrainingDiverged as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_DIVERGED
    except (NotImplementedError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _resolve_config(args) -> tuple[dict, Path, Path, dict | None]:
    """``(config, model path, out dir, checkpoint header or None)``."""
    given = {k: getattr(args, k) for k in TRAIN_KEYS + ("train_images", "device")
             if getattr(args, k, None) is not None}
    if args.resume:
        run_dir = Path(args.resume)
        stored = json.loads((run_dir / "config.json").read_text())
        cfg = {**stored["config"], **given}
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
    cfg = {**train_mod.DEFAULTS, "train_images": 0, "device": "gpu", **given}
    model = Path(args.model)
    out = args.out or Path("runs") / f"{model.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    return cfg, model, Path(out), None


async def _train(args) -> int:
    from . import onnx_io
    cfg, model_path, out, stored = _resolve_config(args)
    if not model_path.is_file():
        raise FileNotFoundError(f"model {model_path} not found")
    dev = open_device(cfg.get("device", "gpu"))
    ckpt_path = last_checkpoint(out) if stored else None
    header, sections = read_checkpoint(ckpt_path) if ckpt_path else (None, None)
    if header and header["model_sha256"] != _sha256(model_path):
        raise ValueError(f"{model_path} is not the model the checkpoint {ckpt_path} was "
                         "trained from")
    train_set, test_set, source = load_splits(args.data_dir, int(cfg.get("train_images") or 0),
                                              int(cfg["eval_images"]))
    graph, weights = onnx_io.load_bundle(model_path)
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
            [{"from": str(ckpt_path), "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}]
            if ckpt_path else []),
    }
    atomic_write(out / "config.json", (json.dumps(config_doc, indent=2) + "\n").encode())

    trainer = train_mod.Trainer(dev, graph, weights, cfg, train_set, test_set)
    await trainer.setup()
    if header:
        wblob = sections["weights"]
        if len(wblob) != trainer.plan.wbytes:
            raise ValueError(f"{ckpt_path}: weights do not fit this model's layout")
        dev.write(trainer.plan.P, wblob)
        load_optimizer_state(dev, trainer.opt, sections["optimizer"])
        # Epochs fully done (a --max-steps stop can checkpoint in the middle of an epoch).
        trainer.epoch = int(header.get("epochs_completed", header["epoch"]))
        trainer.step = int(header["step"])
        print(f"resuming {out} from {ckpt_path.name} (epoch {trainer.epoch}, step "
              f"{trainer.step})", file=sys.stderr)

    batch = trainer.plan.batch
    per_epoch = train_set.count // batch
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

    async def on_epoch(epoch, step, m):
        row = {"epoch": epoch, "step": step, "train_loss": m["train_loss"],
               "train_acc": m["train_acc"], "valid_loss": m["val_loss"],
               "valid_acc": m["val_acc"], "elapsed_s": round(time.perf_counter() - t0, 3)}
        wblob = await dev.read(trainer.plan.P)
        head = {"epoch": epoch, "step": step, "epochs_completed": step // per_epoch,
                "rng": {"seed": int(cfg["seed"]), "next_epoch": epoch,
                        "shuffle": "random.Random(seed * 1000003 + epoch)",
                        "dropout": "pcg(seed, step, node)"},
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
                  "train_images": train_set.count, "backend": "wgpu-native",
                  "adapter": dev.info.get("device") or dev.info.get("description", "")}
    atomic_write(out / "model.onnx", onnx_io.export_onnx(model_path, trained, provenance))
    print(f"done: {result['steps']} steps, valid acc {result['test_acc']:.4f} loss "
          f"{result['test_loss']:.4f} on {trainer.n_eval} test images; wrote {out}")
    return 0


# ------------------------------------------------------------------------------ predict

async def engine_log_probs(dev, model_path: Path, images, labels) -> list[list[float]]:
    """Eval-mode log-probabilities of the engine (weights as in the model: fine-tune init) for
    ``images`` (uint8 [n, 28, 28], n >= 1), via Trainer.evaluate (GPU normalisation)."""
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
    trainer = train_mod.Trainer(dev, graph, weights,
                                {"init": "finetune", "batch_size": 2, "eval_images": n},
                                split, split)
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
    p.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
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


COMMANDS = {"train": (add_train, train), "predict": (add_predict, predict)}

"""What ``webgpu-trainer train`` writes to ``--out`` and prints besides the loop itself: the
config document (``config.json``), the trainable-parameters line, the trainer's call-backs (the
progress bar, ``metrics.jsonl`` and the checkpoints) and the provenance ``model.onnx`` carries.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

from ..engine.ops import losses
from ..engine.train import checkpoint as engine_ckpt
from .checkpoints import write_checkpoint
from .devices import is_numpy


def config_document(cfg, *, model_path, model_sha256, graph, dataset, source, trainer, test_set,
                    data_dir, manifest_sha256, versions, dev, check, stored,
                    ckpt_path) -> dict:
    """config.json's document: the config, the model, the data subset, package versions, the
    adapter, the self-check, the command, when the run was created and each resume."""
    return {
        "config": cfg.to_json(),
        "model": {"path": str(model_path.resolve()), "name": graph["name"],
                  "sha256": model_sha256},
        "data": {"dataset": dataset, "name": cfg["dataset"], "source": source,
                 "manifest_sha256": manifest_sha256,
                 "train_images": trainer.train_set.count,
                 "val_images": trainer.val_set.count if trainer.val_set else 0,
                 "eval_images": test_set.count,
                 "data_dir": str(Path(data_dir).resolve()) if data_dir else ""},
        "versions": versions, "adapter": dev.info, "selfcheck": check,
        "command": sys.argv[1:] if sys.argv else [],
        "created": (stored or {}).get("created") or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "resumes": (stored or {}).get("resumes", []) + (
            [{"from": str(ckpt_path), "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "device": cfg["device"]}] if ckpt_path else []),
    }


def print_trainable(cfg, graph, resuming) -> None:
    """With ``--trainable``/``--freeze``/``--head-only``: which parameters train (to stderr),
    and a note when ``--init scratch`` re-initialises the frozen ones of a fresh run."""
    if cfg["trainable"] is None:
        return
    sizes = {t["name"]: math.prod(t["shape"]) for t in graph["tensors"] if t["role"] == "param"}
    n_all = sum(sizes.values())
    n_train = sum(sizes[n] for n in cfg["trainable"])
    print(f"training {len(cfg['trainable'])} of {len(sizes)} parameters ({n_train:,} of "
          f"{n_all:,} values): {', '.join(cfg['trainable'])}", file=sys.stderr)
    if cfg["init"] == "scratch" and not resuming:
        print("note: --init scratch re-initialises the frozen parameters too (fine-tuning "
              "usually wants --init finetune)", file=sys.stderr)


def callbacks(trainer, cfg, out, bar, per_epoch, model_sha256, stepped):
    """``(emit, on_epoch, on_checkpoint)`` for ``trainer``: the progress bar (``stepped[0]``
    set at the first step), a checkpoint and a ``metrics.jsonl`` line per epoch, and the
    ``--checkpoint-every-s`` checkpoint inside an epoch replacing the older ones."""
    t0 = time.perf_counter()

    def emit(kind, **kw):
        if kind == "progress":
            stepped[0] = True
        if kind == "setup" and kw.get("memory_estimate"):
            print(f"GPU memory: {kw['memory_estimate'] / 2 ** 20:.1f} MiB for the training step "
                  f"at batch {cfg['batch_size']} (estimate), "
                  f"{kw['memory_bytes'] / 2 ** 20:.1f} MiB with the data", file=sys.stderr)
        if kind == "progress" and bar is not None:
            bar.update(kw["step"] - bar.n)
            loss, acc = (kw["losses"][-1][1:] if kw["losses"] else (float("nan"),) * 2)
            bar.set_postfix_str(f"epoch {kw['epoch']}/{kw['epochs']} loss {loss:.4f} "
                                f"acc {acc:.3f} {kw['images_per_s']:.0f} img/s", refresh=True)

    def head(epoch, step, metrics):
        return {**engine_ckpt.header(trainer, epoch, step), "device": cfg["device"],
                "optimizer": cfg["optimizer"], "config": cfg.to_json(),
                "model_sha256": model_sha256, "metrics": metrics}

    async def on_epoch(epoch, step, m):
        row = {"epoch": epoch, "step": step, "train_loss": m["train_loss"],
               "train_acc": m["train_acc"], "valid_loss": m["val_loss"],
               "valid_acc": m["val_acc"], "elapsed_s": round(time.perf_counter() - t0, 3)}
        # A --max-steps stop inside an epoch: epoch-NNN-step-SSSSSSS.ckpt (sorts before the
        # epoch's own checkpoint, so the last file by name is the latest).
        name = f"epoch-{epoch:03d}" + (f"-step-{step:07d}" if step % per_epoch else "")
        write_checkpoint(out / "checkpoints" / f"{name}.ckpt", head(epoch, step, row),
                         await engine_ckpt.capture(trainer))
        with open(out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
        msg = f"epoch {epoch}: train loss {row['train_loss']:.4f} acc {row['train_acc']:.4f}"
        if row["valid_loss"] is not None:
            msg += (f" | valid loss {row['valid_loss']:.4f} acc {row['valid_acc']:.4f} "
                    f"({trainer.val_set.count:,} held-out training images)")
        (bar.write(msg, file=sys.stderr) if bar is not None else print(msg, file=sys.stderr))

    async def on_checkpoint(epoch, step):  # every --checkpoint-every-s, inside an epoch
        older = list((out / "checkpoints").glob("epoch-*-step-*.ckpt"))
        write_checkpoint(out / "checkpoints" / f"epoch-{epoch:03d}-step-{step:07d}.ckpt",
                         head(epoch, step, None), await engine_ckpt.capture(trainer))
        for path in older:  # superseded: the newest one is what --resume takes
            path.unlink(missing_ok=True)

    return emit, on_epoch, on_checkpoint


def provenance(cfg, result, trainer, dev, dataset, total) -> dict:
    """The provenance ``onnx_io.export_onnx`` writes into the trained ``model.onnx``."""
    out = {"dataset": dataset, "epochs": result["epochs_done"],
           "steps": result["steps"], "total_steps": total,
           "optimizer": cfg["optimizer"], "lr": cfg["lr"],
           "batch_size": cfg["batch_size"], "seed": cfg["seed"], "init": cfg["init"],
           "final_accuracy": result["test_acc"], "eval_images": trainer.n_eval,
           "train_images": trainer.train_set.count,
           "backend": "numpy" if is_numpy(dev) else "wgpu-native",
           "adapter": dev.info.get("device") or dev.info.get("description", "")}
    engine_cfg = cfg.trainer_config()
    if engine_cfg["scheduler"]:
        out["scheduler"] = engine_cfg["scheduler"]
    if engine_cfg["loss"] != losses.DEFAULT:
        out["loss"] = engine_cfg["loss"]
    if cfg["trainable"] is not None:
        out["trainable"] = cfg["trainable"]
    return out

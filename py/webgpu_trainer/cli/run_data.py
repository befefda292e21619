"""The dataset a run (``train``, ``predict``) reads: where a dataset NAME lives (``<data
root>/NAME``, the root ``--data-root``, default ``<repo>/.cache/datasets``; ``--data-dir``
names one folder directly) and its splits read from the folder's ``manifest.json`` and
shards, each shard checked against the manifest's size and sha256 (``load_dataset``; the
manifest read and checked by ``host.datasets.store``, the one reader of manifests). MNIST
is prepared on first use (``host.data.prepare``); another dataset must have been prepared
(``webgpu-trainer data``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..engine.train.data import DataSpec, Split
from ..host.datafiles import DataError
from .paths import repo_root


def default_root() -> Path:
    """``<repo>/.cache/datasets`` (the current directory's when not run from a checkout)."""
    return repo_root() / ".cache" / "datasets"


def dataset_folder(name: str, data_dir=None, data_root=None) -> Path:
    """The folder of dataset ``name``: ``data_dir`` when given, else ``<data_root>/<name>``;
    MNIST without a root: ``host.data.default_cache_dir()``."""
    if data_dir:
        return Path(data_dir)
    if name == "mnist" and not data_root:
        from ..host import data
        return data.default_cache_dir()
    return Path(data_root or default_root()) / name


def _read_manifest(folder: Path, name: str) -> tuple[dict, str]:
    """``(manifest, its sha256)`` of ``folder`` (``store.load_manifest``); MNIST prepared
    there first when missing. ValueError naming the folder and the datasets beside it (the
    valid ones, and the invalid ones with the reason) when there is none."""
    from ..host.datasets import store
    path = folder / "manifest.json"
    if name == "mnist" and not path.is_file():
        from ..host import data
        data.prepare(folder)
    if not path.is_file():
        root = folder.parent
        valid, invalid = store.scan_root(root, clean=False)  # maybe not a data root
        bad = "".join(f"; invalid there: {n} ({why})" for n, why in invalid[:3])
        raise ValueError(f"no dataset {name} in {root} (no {path}; prepared there: "
                         f"{', '.join(r['name'] for r in valid) or 'none'}{bad}): prepare it "
                         "with `webgpu-trainer data --source ...`")
    try:
        return store.load_manifest(folder, check_files=False)
    except DataError as exc:
        raise ValueError(str(exc)) from None


def _shard(folder: Path, ent, what: str, size: int, count: int) -> bytes:
    """The bytes of one shard of the manifest entry ``ent``: ``count`` records of ``size``
    bytes, checked against the manifest's byte count and sha256 (ValueError naming the
    file)."""
    if not isinstance(ent, dict) or not isinstance(ent.get("file"), str) \
            or "/" in ent["file"] or "\\" in ent["file"] or ent["file"].startswith("."):
        raise ValueError(f"{folder / 'manifest.json'}: {what} has no valid 'file' entry")
    path = folder / ent["file"]
    if not path.is_file():
        raise ValueError(f"{path} ({what}) is missing: prepare the dataset again")
    data = path.read_bytes()
    if len(data) != size * count or len(data) != ent.get("bytes"):
        raise ValueError(f"{path} ({what}) holds {len(data)} bytes; the manifest says "
                         f"{ent.get('bytes')} ({count} x {size}): prepare the dataset again")
    digest = hashlib.sha256(data).hexdigest()
    if ent.get("sha256") != digest:
        raise ValueError(f"{path} ({what}) has sha256 {digest[:12]}..., the manifest "
                         f"{str(ent.get('sha256'))[:12]}... (corrupt): prepare it again")
    return data


def load_dataset(folder: Path, name: str, train_images: int = 0, eval_images: int = 0):
    """``(train Split, test Split, manifest, DataSpec, manifest sha256)`` of the dataset in
    ``folder`` (``name``: what the user asked for, for the messages; MNIST is prepared when
    missing). ``train_images`` > 0 keeps the first N training samples, ``eval_images`` > 0
    the first N test samples. Raises ValueError (or ``host.data.DataError``) naming the file
    and the problem."""
    folder = Path(folder)
    manifest, sha = _read_manifest(folder, name)
    spec = DataSpec.from_manifest(manifest)
    splits = manifest.get("splits")
    out = []
    for split, keep in (("train", train_images), ("test", eval_images)):
        ent = splits.get(split) if isinstance(splits, dict) else None
        if not isinstance(ent, dict) or not isinstance(ent.get("count"), int) \
                or ent["count"] < 1:
            raise ValueError(f"{folder / 'manifest.json'}: no {split} split with a count")
        count = ent["count"]
        images = _shard(folder, ent.get("images"), f"{split} images", spec.sample_bytes, count)
        labels = _shard(folder, ent.get("labels"), f"{split} labels", 1, count)
        if keep and 0 < keep < count:
            images, labels, count = images[:keep * spec.sample_bytes], labels[:keep], keep
        out.append(Split(images, labels, count, labels, spec))
    return out[0], out[1], manifest, spec, sha


def check_model_fits(spec: DataSpec, model_classes: int, model: Path, splits) -> str:
    """Before any work: refuse a model whose output has fewer classes than the dataset (both
    named), and a split holding a label outside the DATASET's classes (``splits``: ``(what,
    Split)`` pairs; the dataset, split, index and value named). Returns a note when the model
    has more outputs than the dataset has classes (they are never a label), else ""."""
    k = len(spec.classes)
    names = ", ".join(spec.classes[:4]) + (", ..." if k > 4 else "")
    if model_classes < k:
        raise ValueError(f"model {Path(model).name} has {model_classes} output classes, "
                         f"dataset {spec.name} has {k} ({names}): use a model whose output "
                         f"is [N, {k}]")
    for what, split in splits:
        labels = split.labels_host
        if labels and max(labels) >= k:
            i = next(i for i, v in enumerate(labels) if v >= k)
            raise ValueError(f"dataset {spec.name}: {what} label {labels[i]} at index {i} is "
                             f"outside 0..{k - 1} (the dataset's {k} classes): prepare it "
                             "again with `webgpu-trainer data --source ...`")
    if model_classes > k:
        return (f"model {Path(model).name} has {model_classes} output classes, dataset "
                f"{spec.name} {k}: outputs {k}..{model_classes - 1} are never a label")
    return ""


def check_augment(spec: DataSpec, cfg) -> None:
    """Refuse ``augment_flip`` / ``augment_crop`` for a table dataset (ValueError naming the
    option and the dataset): they apply to images only and would be recorded while ignored."""
    on = [f for f, v in (("--augment-flip", cfg["augment_flip"]),
                         (f"--augment-crop {cfg['augment_crop']}", cfg["augment_crop"])) if v]
    if spec.kind == "table" and on:
        raise ValueError(f"{' and '.join(on)}: dataset {spec.name} is a table "
                         f"({spec.describe()}); random crop and flip apply to images only: "
                         "leave them out")

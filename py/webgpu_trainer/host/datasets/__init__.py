"""Datasets: sources read into ``Arrays``, checked and written by ``store`` (CPython: numpy).

``SOURCES`` lists the source kinds ``webgpu-trainer data --source PATH`` tries, in order: each
is ``(detect, read)`` where ``detect(path) -> bool`` looks at names only (no parsing; a tar is
listed once and kept for ``read``) and ``read(path, log, **options) -> Arrays`` reads and checks
everything, raising ``DataError`` naming the file, the record or line, and the value (the
options a kind takes, e.g. ``size``: ``OPTIONS``). Another source kind
plugs in by adding its pair (before ``digits_csv``, the most general). Built in:

- ``cifar``: CIFAR-10 / CIFAR-100, binary or python version, folder or .tar.gz;
- ``idx``: four IDX files of any image size (MNIST and Fashion-MNIST recognised by md5);
- ``images``: a folder or .zip of class folders of photos (``images.py``);
- ``table``: one .csv table, a label column and numeric features (``table.py``);
- ``digits_csv``: two CSV files of 28x28 digits (``label, 784 pixels``; ``datafiles``).
"""

from __future__ import annotations

from pathlib import Path


from .. import datafiles
from ..datafiles import DataError
from . import archive, cifar, idx, images, store, table
from .arrays import Arrays


def _detect_digits_csv(path: Path) -> bool:
    try:
        return Path(path).is_dir() and datafiles.find_files(path)[0] == "csv"
    except DataError:
        return False


def _read_digits_csv(path: Path, log=print) -> Arrays:
    """Two CSV files of 28x28 digits (the MNIST CSV format; MNIST's names and counts must also
    match its checksums) as ``Arrays``."""
    arrays, source, claims = datafiles.read_folder(path, log)
    md5s = {(s, p): idx.idx_md5(a) for s, pair in arrays.items() for p, a in zip(idx.PARTS, pair)}
    mnist = md5s == idx.MNIST_MD5
    if claims and not mnist:
        bad = next(k for k in sorted(md5s) if md5s[k] != idx.MNIST_MD5[k])
        raise DataError(f"checksum mismatch for {bad[0]} {bad[1]} from {source}: md5 of the IDX "
                        f"equivalent is {md5s[bad]}, expected {idx.MNIST_MD5[bad]}; the files "
                        "carry MNIST's names and counts but are corrupt or not MNIST")
    (tx, ty), (sx, sy) = arrays["train"], arrays["test"]
    return Arrays(tx.reshape(-1, 1, 28, 28), ty, sx.reshape(-1, 1, 28, 28), sy,
                  [str(d) for d in range(10)], "MNIST" if mnist else Path(path).name, source,
                  name="mnist" if mnist else idx.slug(Path(path).name),
                  idx_md5=md5s if mnist else {})


SOURCES: list = [(cifar.detect, cifar.read), (idx.detect, idx.read),
                 (images.detect, images.read), (table.detect, table.read),
                 (_detect_digits_csv, _read_digits_csv)]

OPTIONS = {images.read: ("a folder or .zip of photos", ("size", "color", "test", "seed")),
           table.read: ("a CSV table", ("label", "test", "seed"))}
"""The reading options a source kind's ``read`` takes as keywords (``--size`` ...), with the
kind's name for the message refusing an option a source does not take."""


def refused_option(read, options) -> tuple[str, str] | None:
    """``(option, kinds)``: the first of ``options`` that the source kind of ``read`` does not
    take (``OPTIONS``) and the kinds that do, for the message; None when it takes them all.
    The one rule of ``--source`` (``webgpu-trainer data``) and of ``POST /api/datasets``."""
    takes = OPTIONS.get(read, ("", ()))[1]
    extra = [k for k in options if k not in takes]
    if not extra:
        return None
    return extra[0], " or ".join(kind for kind, opts in OPTIONS.values() if extra[0] in opts)


def _check_options(path: Path, read, options: dict) -> None:
    """DataError naming an option the source kind of ``read`` does not take, and the kinds
    that do."""
    refused = refused_option(read, options)
    if refused:
        raise DataError(f"{path}: --{refused[0]} applies to {refused[1]} only, and this "
                        "source is not one: leave it out")


def read_source(path: Path, log=print, **options) -> Arrays:
    """The first source kind in ``SOURCES`` that detects ``path``, read with ``options``
    (``OPTIONS``: e.g. ``size=64``; one the kind does not take is refused); DataError when
    no kind detects it (saying what was looked for)."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"source {path} does not exist")
    try:
        for detect, read in SOURCES:
            if detect(path):
                _check_options(path, read, options)
                return read(path, log, **options)
    finally:
        archive.forget()
    raise DataError(f"{path}: no dataset found: expected a folder or .tar.gz of CIFAR-10/100 "
                    "(binary or python version) or of four IDX files (train/t10k images and "
                    "labels), a folder or .zip of class folders of images, a .csv table, or "
                    "another source kind (`webgpu-trainer data --help`)")


BUILT_IN = ("mnist", "fashion-mnist", "cifar10", "cifar100")
"""Names kept for the datasets they name: another source may not take them."""


def prepare_source(path: Path, root: Path | None = None, name: str | None = None,
                   log=print, **options) -> tuple[dict, Path]:
    """Read ``path`` (``read_source``, with ``options``) and write it as dataset ``name``
    (default: the source's own: ``cifar10``, ``fashion-mnist`` ..., else made from the file
    name, ``idx.slug``) into ``root`` (default ``store.default_root()``). A given ``name``
    replaces the dataset of that name; a default name other than a built-in one never does
    (DataError naming the dataset there: give ``--name`` to replace it). Returns ``(manifest,
    folder)``; raises DataError with nothing written. The shards' gzip copies are left to the
    server (``shard_gzip``: at its start or after the first request; they took 2/3 of
    Fashion-MNIST's preparation)."""
    root = Path(root) if root else store.default_root()
    if name is not None:
        store.check_name(name)  # before reading a large source
    arrays = read_source(path, log, **options)
    given, name = name, name or arrays.name or idx.slug(Path(path).name)
    if name in BUILT_IN and arrays.name != name:
        raise DataError(f"dataset name {name!r} is a built-in dataset's and {path} is not "
                        f"{name}: choose another --name")
    if given is None and name not in BUILT_IN and (root / name).exists():
        raise DataError(f"dataset {name!r} already exists in {root} ({_what(root / name)}): "
                        f"not replacing it; give --name {name} to replace it, or another "
                        "--name")
    manifest = store.write_dataset(root, name, arrays, log)
    return manifest, root / name


def _what(folder: Path) -> str:
    """What the dataset folder ``folder`` holds, for a message: its title and source."""
    try:
        m = store.read_manifest(folder, check_files=False)
    except DataError:
        return "a folder that is not a valid dataset"
    return f"{m['title']}, from {m['source'][:80]}"


__all__ = ["Arrays", "BUILT_IN", "DataError", "OPTIONS", "SOURCES", "prepare_source", "read_source",
           "refused_option"]

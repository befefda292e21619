"""CIFAR-10 and CIFAR-100 in their official distributions (cs.toronto.edu/~kriz/cifar.html),
from the extracted folder or the ``.tar.gz`` as downloaded.

Binary version: records of 1 label byte (CIFAR-100: coarse then fine, 2 bytes) and 3,072 pixel
bytes (1,024 red, 1,024 green, 1,024 blue, each 32x32 row-major); CIFAR-10 has
``data_batch_1..5.bin`` + ``test_batch.bin`` and its class names in ``batches.meta.txt``;
CIFAR-100 ``train.bin`` + ``test.bin`` and ``fine_label_names.txt``. Python version: pickled
dicts (``data`` uint8 ``[N, 3072]``, ``labels`` / ``fine_labels``) in ``data_batch_1..5`` +
``test_batch`` + ``batches.meta`` (CIFAR-10) or ``train`` + ``test`` + ``meta`` (CIFAR-100),
read with ``unpickle.load_plain`` (plain data and numeric numpy arrays only). CIFAR-100 uses
the 100 fine labels. Errors name the file, the record (and its byte offset) and the value.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..datafiles import DataError
from . import archive
from .arrays import Arrays
from .unpickle import load_plain

PIXELS = 3 * 32 * 32
TRAIN10 = [f"data_batch_{i}" for i in range(1, 6)]
LAYOUTS = {  # (name, version): (train files, test files, meta file, classes)
    ("cifar10", "binary"): ([f"{b}.bin" for b in TRAIN10], ["test_batch.bin"],
                            "batches.meta.txt", 10),
    ("cifar100", "binary"): (["train.bin"], ["test.bin"], "fine_label_names.txt", 100),
    ("cifar10", "python"): (TRAIN10, ["test_batch"], "batches.meta", 10),
    ("cifar100", "python"): (["train"], ["test"], "meta", 100),
}
TITLES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}


def _find(files: archive.Files) -> tuple | None:
    """``(name, version, folder, {base name: file name})`` of the first layout whose test batch
    and meta file sit in one folder of ``files`` (missing training batches are named later)."""
    for folder, names in sorted(archive.by_dir(files.names).items()):
        for (name, version), (_, test, meta, _) in LAYOUTS.items():
            if all(f in names for f in [*test, meta]):
                return name, version, folder, names
    return None


def detect(path: Path) -> bool:
    """Whether ``path`` (a folder or a tar) holds a CIFAR-10/100 distribution (by name)."""
    path = Path(path)
    if not (path.is_dir() or archive.is_archive(path)):
        return False
    return _find(archive.open_files(path)) is not None


def binary_batch(raw: bytes, where: str, label_bytes: int, k: int) -> tuple:
    """``(images uint8 [N, 3, 32, 32], labels int64 [N])`` of a binary batch (the last label
    byte is the label: CIFAR-100's fine one). DataError naming ``where`` for a truncated
    record (index and byte offset) or a label outside ``0..k-1``."""
    rec = label_bytes + PIXELS
    n, rest = divmod(len(raw), rec)
    if rest:
        raise DataError(f"{where}: truncated: record {n:,} (byte offset {n * rec:,}) holds "
                        f"{rest:,} of its {rec:,} bytes")
    if not n:
        raise DataError(f"{where}: no records")
    table = np.frombuffer(raw, np.uint8).reshape(n, rec)
    for col, top, what in ((label_bytes - 1, k, "label"), (0, 20, "coarse label")):
        if what == "coarse label" and label_bytes == 1:
            continue
        bad = np.flatnonzero(table[:, col] >= top)
        if bad.size:
            i = int(bad[0])
            raise DataError(f"{where}: record {i:,} (byte offset {i * rec + col:,}): {what} "
                            f"{int(table[i, col])} is outside 0..{top - 1}")
    return table[:, label_bytes:].reshape(n, 3, 32, 32).copy(), table[:, label_bytes - 1].astype(
        np.int64)


def _get(d: dict, key: str):
    return d.get(key.encode(), d.get(key))


def python_batch(raw: bytes, where: str, k: int) -> tuple:
    """``(images, labels)`` of a pickled batch (``load_plain``); DataError naming ``where``
    when it is not a CIFAR batch, or a label (with its index) outside ``0..k-1``."""
    d = load_plain(raw, where)
    key = "labels" if k == 10 else "fine_labels"
    if not isinstance(d, dict) or _get(d, "data") is None or _get(d, key) is None:
        keys = ", ".join(sorted(str(x)[:30] for x in d)[:8]) if isinstance(d, dict) else ""
        raise DataError(f"{where}: not a CIFAR batch: expected a dict with 'data' and {key!r}"
                        + (f" (keys: {keys})" if isinstance(d, dict) else
                           f" (found a {type(d).__name__})"))
    data, labels = _get(d, "data"), _get(d, key)
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 \
            or data.shape[1] != PIXELS:
        shown = (f"{data.dtype} {list(data.shape)}" if isinstance(data, np.ndarray)
                 else type(data).__name__)
        raise DataError(f"{where}: 'data' is {shown}, expected uint8 [N, 3072]")
    try:
        y = np.asarray(labels, np.int64)
    except (TypeError, ValueError, OverflowError):
        raise DataError(f"{where}: {key!r} is not a list of integers") from None
    if y.shape != (len(data),):
        raise DataError(f"{where}: {len(data):,} images but {key!r} has shape {list(y.shape)}")
    bad = np.flatnonzero((y < 0) | (y >= k))
    if bad.size:
        i = int(bad[0])
        raise DataError(f"{where}: record {i:,}: label {int(y[i])} is outside 0..{k - 1}")
    return data.reshape(-1, 3, 32, 32).copy(), y


def _names(files: archive.Files, name: str, version: str, meta: str, k: int) -> list[str]:
    where = files.label(meta)
    raw = files.read(meta)
    if version == "binary":
        try:
            names = [ln.strip() for ln in raw.decode("utf-8").splitlines() if ln.strip()]
        except UnicodeDecodeError as exc:
            raise DataError(f"{where}: not UTF-8 text (byte offset {exc.start:,})") from None
    else:
        d = load_plain(raw, where)
        key = "label_names" if name == "cifar10" else "fine_label_names"
        got = _get(d, key) if isinstance(d, dict) else None
        if not isinstance(got, list) or not all(isinstance(s, (bytes, str)) for s in got):
            raise DataError(f"{where}: not a CIFAR meta file: expected a dict with {key!r}, a "
                            "list of names")
        names = [s.decode("utf-8", "replace") if isinstance(s, bytes) else s for s in got]
    if len(names) != k:
        raise DataError(f"{where}: {len(names)} class names, expected {k}")
    return names


def read(path: Path, log=print) -> Arrays:
    """The CIFAR-10/100 distribution in the folder or tar ``path`` (see the module
    docstring). Raises DataError naming the file, record and value."""
    path = Path(path)
    files = archive.open_files(path)
    found = _find(files)
    if found is None:
        raise DataError(f"{path}: no CIFAR-10/100 files (test batch and meta file)")
    name, version, folder, names = found
    train, test, meta, k = LAYOUTS[(name, version)]
    missing = [f for f in train if f not in names]
    if missing:
        raise DataError(f"{files.label(folder)}: {', '.join(missing)} missing (the "
                        f"{TITLES[name]} {version} version has {', '.join([*train, *test])})")
    classes = _names(files, name, version, names[meta], k)
    out = []
    for batch in (train, test):
        xs, ys = [], []
        for base in batch:
            where = files.label(names[base])
            log(f"reading {where}")
            raw = files.read(names[base])
            x, y = (binary_batch(raw, where, 1 if k == 10 else 2, k) if version == "binary"
                    else python_batch(raw, where, k))
            xs.append(x)
            ys.append(y)
        out += [np.concatenate(xs), np.concatenate(ys)]
    notes = ["fine labels used (the 20 coarse ones are not)"] if k == 100 else []
    return Arrays(*out, classes=classes, title=TITLES[name],
                  source=f"{path.name} ({version} version)", notes=notes, name=name)

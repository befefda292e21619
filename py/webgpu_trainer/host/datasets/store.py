"""The dataset store: ``<root>/<name>/`` holds ``manifest.json`` (``webgpu-trainer/dataset@1``)
and the content-addressed shards it names (docs/ARCHITECTURE.md, "Datasets").

``write_dataset`` checks an ``Arrays`` (shapes, dtypes, 2..256 classes, labels in range, every
class present in the training split), computes the per-channel mean and std of ``x/255`` over
the training split, and writes the shards and the manifest into a temp folder inside the root,
which then replaces ``<root>/<name>`` in one rename (``atomic.py``, which also removes what a
killed prepare left). On any error nothing under the root changes.
``read_manifest`` reads and checks one folder's manifest (the old ``webgpu-trainer/mnist@1``
included); ``list_datasets`` summarises every prepared dataset.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Callable

import numpy as np

from ..text import hidden_character
from ..datafiles import DataError
from . import atomic, tokens
from .arrays import MAX_SAMPLE_DIM, Arrays
from .atomic import fsync_dir, write_file

FORMAT = "webgpu-trainer/dataset@1"
LEGACY_FORMAT = "webgpu-trainer/mnist@1"
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
MIN_CLASSES, MAX_CLASSES = 2, 256
SPLITS = ("train", "test")
MNIST_MEAN, MNIST_STD = [0.1307], [0.3081]
_CHUNK = 1 << 22  # values per pass of channel_stats (8 MB of uint16)

Log = Callable[[str], None]


def _log(msg: str) -> None:
    print(f"[data] {msg}", flush=True)


def default_root() -> Path:
    """``<repo>/.cache/datasets`` when running from the source tree, else ``./.cache/datasets``."""
    repo = Path(__file__).resolve().parents[4]
    base = repo if (repo / "pyproject.toml").is_file() else Path.cwd()
    return base / ".cache" / "datasets"


def check_name(name: str) -> str:
    """``name`` when it is a valid dataset name, else DataError saying the rule."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        shown = repr(name if not isinstance(name, str) or len(name) <= 50 else name[:50] + "...")
        raise DataError(f"dataset name {shown} is not valid: use 1-40 characters, lowercase "
                        "letters, digits, '-' or '_', starting with a letter or digit")
    return name


# ---------------------------------------------------------------- checks

def _check_classes(classes) -> int:
    if not isinstance(classes, (list, tuple)):
        raise DataError(f"class names: expected a list, got {type(classes).__name__}")
    k = len(classes)
    if k > MAX_CLASSES:
        raise DataError(f"{k} classes; at most {MAX_CLASSES}")
    if k < MIN_CLASSES:
        raise DataError(f"{k} class{'es' if k != 1 else ''} ({', '.join(map(repr, classes))}); "
                        f"at least {MIN_CLASSES} needed")
    for i, c in enumerate(classes):
        if not isinstance(c, str) or not c.strip() or len(c) > 100:
            raise DataError(f"class {i}: name {str(c)[:50]!r} must be a non-empty string of at "
                            "most 100 characters")
    if len(set(classes)) != k:
        dup = next(c for i, c in enumerate(classes) if c in classes[:i])
        raise DataError(f"class name {dup!r} appears twice")
    return k


def _check_split(split: str, x, y, k: int, shape: tuple | None, vocab: int = 0) -> tuple:
    what = f"{split} split"
    if not isinstance(x, np.ndarray) or not isinstance(y, np.ndarray):
        raise DataError(f"{what}: images and labels must be numpy arrays")
    if x.dtype == np.uint8:
        if x.ndim != 4 or x.shape[1] not in (1, 3) or min(x.shape[2:]) < 1:
            raise DataError(f"{what}: images of shape {list(x.shape)}; expected [N, C, H, W] "
                            "with C 1 or 3")
    elif x.dtype in (np.int32, np.uint16):
        tokens.check_ids(what, x, vocab)
    elif x.dtype == np.float32:
        if x.ndim != 2 or x.shape[1] < 1:
            raise DataError(f"{what}: table of shape {list(x.shape)}; expected [N, F]")
        bad = np.argwhere(~np.isfinite(x))
        if bad.size:
            r, c = (int(v) for v in bad[0])
            raise DataError(f"{what}: feature {c} of row {r} is {x[r, c]} (not finite)")
    else:
        raise DataError(f"{what}: dtype {x.dtype}; expected uint8 images [N, C, H, W] or "
                        "float32 tables [N, F]")
    if max(x.shape[1:]) > MAX_SAMPLE_DIM:  # else written, then refused by check_manifest
        raise DataError(f"{what}: samples of shape {list(x.shape[1:])}; at most "
                        f"{MAX_SAMPLE_DIM:,} per dimension")
    if shape is not None and (x.dtype, x.shape[1:]) != shape:
        raise DataError(f"{what}: samples {x.dtype} {list(x.shape[1:])}, the train split's "
                        f"are {shape[0]} {list(shape[1])}")
    if y.ndim != 1 or len(y) != len(x):
        raise DataError(f"{what}: {len(x):,} samples but labels of shape {list(y.shape)}")
    if not len(x):
        raise DataError(f"{what} holds no samples")
    if y.dtype.kind not in "iu":
        raise DataError(f"{what}: labels of dtype {y.dtype}; expected integers")
    bad = np.flatnonzero((y < 0) | (y >= k))
    if bad.size:
        i = int(bad[0])
        raise DataError(f"{what}: label {int(y[i])} at index {i} is outside 0..{k - 1} "
                        f"({k} classes)" + (f"; {bad.size:,} such labels" if bad.size > 1 else ""))
    return x.dtype, x.shape[1:]


def check_arrays(arrays: Arrays, all_classes: bool = True) -> None:
    """DataError naming the first problem of ``arrays`` (see the module docstring);
    ``all_classes=False`` lets classes go without training samples (the old own-digits
    folders, whose classes are always 0..9)."""
    k = _check_classes(arrays.classes)
    for i, name in enumerate(arrays.classes):
        hidden = hidden_character(name)
        if hidden:  # the page and the summaries would show another name (a CSV's labels too)
            raise DataError(f"class {i} {name!r}: the name has {hidden}; rename it")
    vocab = arrays.vocab_size
    shape = _check_split("train", arrays.train_x, arrays.train_y, k, None, vocab)
    _check_split("test", arrays.test_x, arrays.test_y, k, shape, vocab)
    counts = np.bincount(arrays.train_y.astype(np.int64), minlength=k)
    missing = np.flatnonzero(counts == 0)
    if missing.size and all_classes:
        names = ", ".join(repr(arrays.classes[i]) for i in missing[:5])
        raise DataError(f"{missing.size} of {k} classes have no training samples: {names}"
                        + (" ..." if missing.size > 5 else ""))


def channel_stats(x: np.ndarray) -> tuple[list[float], list[float]]:
    """Per-channel mean and (population) std of ``x/255`` for uint8 ``[N, C, H, W]``, rounded
    to 4 decimals; from exact integer sums of the values and their squares (255**2 fits
    uint16), in chunks of about ``_CHUNK`` values (bounded memory)."""
    means, stds = [], []
    step = max(1, _CHUNK // max(1, x.shape[2] * x.shape[3]))
    for c in range(x.shape[1]):
        n = s1 = s2 = 0
        for i in range(0, len(x), step):
            v = x[i:i + step, c].astype(np.uint16)
            n += v.size
            s1 += int(v.sum(dtype=np.uint64))
            v *= v
            s2 += int(v.sum(dtype=np.uint64))
        mean = s1 / n / 255
        var = (s2 * n - s1 * s1) / (n * n) / (255 * 255)  # exact numerator: no cancellation
        means.append(round(mean, 4))
        stds.append(round(var ** 0.5, 4))
    return means, stds


# ---------------------------------------------------------------- writing

def _shards(folder: Path, arrays: Arrays, log: Log) -> dict:
    splits = {}
    ext = tokens.EXT.get(arrays.train_x.dtype.name, "u8")
    for split in SPLITS:
        x, y = arrays.split(split)
        n = len(y)
        entry: dict = {"count": n}
        for part, arr, dtype, suffix in (("images", x, arrays.train_x.dtype, ext),
                                         ("labels", y, np.uint8, "u8")):
            data = np.ascontiguousarray(arr, np.dtype(dtype).newbyteorder("<")).tobytes()
            sha = hashlib.sha256(data).hexdigest()
            name = f"{split}-{part}-{sha[:12]}.{suffix}"
            write_file(folder / name, data)
            log(f"wrote {name} ({len(data):,} bytes)")
            entry[part] = {"file": name, "shape": list(arr.shape), "dtype": np.dtype(dtype).name,
                           "bytes": len(data), "sha256": sha}
            if (split, part) in arrays.idx_md5:
                entry[part]["idx_md5"] = arrays.idx_md5[(split, part)]
        splits[split] = entry
    return splits


def write_folder(dest: Path, name: str, arrays: Arrays, log: Log = _log, *,
                 dataset: str | None = None, gzip: bool = False, all_classes: bool = True) -> dict:
    """``write_dataset`` into the folder ``dest`` (any name; the manifest says ``name``).

    dataset: the manifest's ``"dataset"`` (default ``arrays.title``). gzip: also write the
    ``.gz`` copies the server sends to browsers (else it makes them on first request).
    all_classes: as ``check_arrays``.
    Refuses to replace a folder that holds files but no manifest.json. Returns the manifest."""
    check_arrays(arrays, all_classes)
    dest = Path(dest)
    if dest.is_symlink():
        raise DataError(f"{dest} is a symbolic link: not replacing it")
    if dest.exists() and not (dest / "manifest.json").is_file() and (
            not dest.is_dir() or any(dest.iterdir())):
        raise DataError(f"{dest} exists and is not a dataset folder (no manifest.json): not "
                        "replacing it")
    notes = list(arrays.notes)
    if arrays.kind == "image":
        mean, std = channel_stats(arrays.train_x)
        for c in [c for c, v in enumerate(std) if v == 0]:  # as a table's constant column
            std[c] = 1.0
            notes.append(f"channel {c} is constant in the training images (std 0): divided "
                         "by 1")
    else:
        mean, std = [], []
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic.building(dest.parent, dest.name) as (tmp, unlock):
        splits = _shards(tmp, arrays, log)
        manifest = {"format": FORMAT, "name": name, "title": arrays.title,
                    "dataset": dataset or arrays.title, "kind": arrays.kind,
                    "sample_shape": list(arrays.train_x.shape[1:]),
                    "classes": list(arrays.classes), "mean": mean, "std": std,
                    "source": arrays.source, "notes": notes, "splits": splits,
                    **tokens.manifest_fields(arrays)}
        write_file(tmp / "manifest.json", (json.dumps(manifest, indent=1) + "\n").encode())
        if gzip:
            from .. import shard_gzip
            for entry in splits.values():
                for part in ("images", "labels"):
                    shard_gzip.write_copy(tmp / entry[part]["file"])
        unlock()
        fsync_dir(tmp)
        atomic.replace_dir(tmp, dest)
    log(f"{name}: {manifest['title']} ready in {dest} ({splits['train']['count']:,} train, "
        f"{splits['test']['count']:,} test, {len(arrays.classes)} classes)")
    return manifest


def write_dataset(root: Path, name: str, arrays: Arrays, log: Log = _log, **kw) -> dict:
    """Check ``arrays`` and write them as dataset ``name`` into ``<root>/<name>`` atomically
    (see the module docstring; keywords as ``write_folder``). Returns the manifest; raises
    DataError naming the problem, with nothing under ``root`` changed (but what killed
    prepares left there: ``atomic.clean_stale``)."""
    dest = Path(root) / check_name(name)
    atomic.clean_stale(root, log)
    return write_folder(dest, name, arrays, log, **kw)


# ---------------------------------------------------------------- reading

def _legacy(m: dict) -> dict:
    """An old ``webgpu-trainer/mnist@1`` manifest as a ``dataset@1`` one (28x28 digits)."""
    own = m.get("dataset", "MNIST") == "own"
    return {**m, "format": FORMAT, "name": "own" if own else "mnist",
            "title": "Your digits" if own else "MNIST", "dataset": "own" if own else "MNIST",
            "kind": "image", "sample_shape": [1, 28, 28],
            "classes": [str(d) for d in range(10)], "mean": MNIST_MEAN, "std": MNIST_STD,
            "notes": m.get("notes", [])}


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise DataError(f"{where}: {what}")


def _check_entry(where: str, ent, count: int, sample: list, dtype: str) -> None:
    _need(isinstance(ent, dict), where, "not an object")
    name = ent.get("file")
    _need(isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", name)
          is not None, where, f"file {str(name)[:50]!r} is not a shard name")
    _need(ent.get("dtype") == dtype, where, f"dtype {str(ent.get('dtype'))[:20]!r}, expected "
          f"{dtype!r}")
    shape = ent.get("shape")
    ok = [count, *sample] if len(shape or []) == 1 + len(sample) else [count, *sample[1:]]
    _need(shape == ok, where, f"shape {str(shape)[:60]}, expected {ok}")
    size = count * math.prod(sample) * np.dtype(dtype).itemsize
    _need(ent.get("bytes") == size, where, f"bytes {str(ent.get('bytes'))[:20]}, expected {size}")
    sha = ent.get("sha256")
    _need(isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha) is not None, where,
          "sha256 is not 64 hex digits")


def check_manifest(m: dict, where: str = "manifest.json") -> dict:
    """``m`` (a parsed manifest) as a ``dataset@1`` manifest, the old MNIST format converted;
    DataError naming ``where`` and the field for anything malformed."""
    _need(isinstance(m, dict), where, "not a JSON object")
    if m.get("format") == LEGACY_FORMAT:
        m = _legacy(m)
    _need(m.get("format") == FORMAT, where, f"format {str(m.get('format'))[:60]!r}, expected "
          f"{FORMAT!r}")
    _need(isinstance(m.get("name"), str) and NAME.fullmatch(m["name"]) is not None, where,
          f"name {str(m.get('name'))[:50]!r} is not a dataset name")
    kind, sample = m.get("kind"), m.get("sample_shape")
    _need(kind in ("image", "table", "tokens"), where,
          f"kind {str(kind)[:20]!r}, expected image, table or tokens")
    dims = 3 if kind == "image" else 1
    _need(isinstance(sample, list) and len(sample) == dims and all(
        isinstance(d, int) and 0 < d <= MAX_SAMPLE_DIM for d in sample), where,
        f"sample_shape {str(sample)[:60]} is not {dims} positive integers")
    _need(kind != "image" or sample[0] in (1, 3), where, f"{sample[0]} channels, expected 1 or 3")
    try:
        _check_classes(m.get("classes"))
    except DataError as exc:
        raise DataError(f"{where}: classes: {exc}") from None
    channels = sample[0] if kind == "image" else 0
    for key in ("mean", "std"):
        v = m.get(key)
        _need(isinstance(v, list) and len(v) == channels and all(
            isinstance(a, (int, float)) and 0 <= a <= 1 for a in v), where,
            f"{key} {str(v)[:60]}: expected {channels} numbers in 0..1")
    _need(kind != "image" or min(m["std"]) > 0, where, "a std of 0 (constant images)")
    splits = m.get("splits")
    _need(isinstance(splits, dict), where, "splits missing")
    for split in SPLITS:
        ent = splits.get(split)
        _need(isinstance(ent, dict) and isinstance(ent.get("count"), int) and ent["count"] > 0,
              where, f"split {split!r} missing or empty")
        _check_entry(f"{where}: {split} images", ent.get("images"), ent["count"], sample,
                     tokens.shard_dtype(m, where) if kind == "tokens" else
                     "uint8" if kind == "image" else "float32")
        _check_entry(f"{where}: {split} labels", ent.get("labels"), ent["count"], [], "uint8")
    return m


def read_manifest(folder: Path, *, check_files: bool = True) -> dict:
    """The manifest of the dataset folder ``folder``, checked (``check_manifest``) and, with
    ``check_files``, every shard present with its size (sha256: the server checks it when it
    serves a shard). Raises DataError naming the folder and the problem."""
    return load_manifest(folder, check_files=check_files)[0]


def load_manifest(folder: Path, *, check_files: bool = True) -> tuple[dict, str]:
    """``(read_manifest(folder), the sha256 of its manifest.json's bytes)`` from one read
    (a run's config.json records the sha256; ``--resume`` compares it)."""
    path = Path(folder) / "manifest.json"
    if not path.is_file():
        raise DataError(f"{folder}: no manifest.json (not a prepared dataset)")
    try:
        raw = path.read_bytes()
        m = json.loads(raw)
    except (ValueError, OSError, RecursionError) as exc:  # RecursionError: nested too deep
        raise DataError(f"{path}: manifest unreadable ({exc})") from None
    m = check_manifest(m, str(path))
    if check_files:
        for split in SPLITS:
            for part in ("images", "labels"):
                ent = m["splits"][split][part]
                shard = Path(folder) / ent["file"]
                size = shard.stat().st_size if shard.is_file() else None
                _need(size == ent["bytes"], str(folder), f"shard {ent['file']} "
                      + ("is missing" if size is None else
                         f"has {size:,} bytes, the manifest says {ent['bytes']:,} "
                            "(partial write?)"))
    return m, hashlib.sha256(raw).hexdigest()


def summary(m: dict) -> dict:
    """The short form of a manifest that ``GET /api/datasets`` lists."""
    s = m["splits"]
    return {"name": m["name"], "title": m["title"], "kind": m["kind"],
            "sample_shape": m["sample_shape"], "classes": m["classes"],
            "train": s["train"]["count"], "test": s["test"]["count"],
            "bytes": sum(s[k][p]["bytes"] for k in SPLITS for p in ("images", "labels"))}


def scan_root(root: Path | None = None, *,
              clean: bool = True) -> tuple[list[dict], list[tuple[str, str]]]:
    """``(summaries, invalid)`` of the folders ``<root>/<name>/`` (sorted by name): the
    ``summary`` of each valid dataset, and ``(name, reason)`` for each folder with a dataset
    name that fails its checks (no manifest.json, a bad manifest, a missing shard). With
    ``clean``, removes what killed prepares left first (``atomic.clean_stale``)."""
    root = Path(root) if root else default_root()
    if clean:
        atomic.clean_stale(root)
    valid, invalid = [], []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if not folder.is_dir() or not NAME.fullmatch(folder.name):
            continue
        try:
            valid.append({**summary(read_manifest(folder)), "name": folder.name})
        except DataError as exc:
            invalid.append((folder.name, str(exc)))
    return valid, invalid


def list_datasets(root: Path | None = None, log: Log | None = None) -> list[dict]:
    """``summary`` of every valid dataset ``<root>/<name>/`` (``scan_root``); folders that
    fail their checks are skipped (said through ``log`` when given)."""
    valid, invalid = scan_root(root)
    for name, why in invalid if log else ():
        log(f"skipped {name}: {why}")
    return valid

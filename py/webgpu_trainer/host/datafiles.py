"""A user's digit files in the MNIST formats, read and checked (CPython only; numpy).

Formats: IDX (``idx3`` images ``[N, 28, 28]`` uint8 with magic 0x00000803, ``idx1`` labels
``[N]`` uint8 with magic 0x00000801; raw or gzip) and CSV (an optional header line, then one row
per image: the label and 784 pixel values 0..255; raw or gzip). Labels are digits 0..9.
Every problem is a ``DataError`` naming the file and, where it has one, the line (CSV, 1-based,
the header counts) and field (1 = the label), or the index (IDX, 0-based) and the value.

``read_folder(folder)`` finds a dataset in a folder by file names (case-insensitive): four IDX
files (a name with ``idx`` or ``ubyte``; ``image`` / ``label``; ``train`` / ``test`` or
``t10k``), or two CSV files (``.csv`` or ``.csv.gz``; ``train`` / ``test`` or ``t10k``). The
dataset *claims to be MNIST* when its files carry the standard MNIST names
(``train-images-idx3-ubyte`` ..., also ``train-images.idx3-ubyte``, or ``mnist_train.csv`` /
``mnist_test.csv``) and sizes (60,000 + 10,000 images); only then must it match the MNIST
checksums (``data.prepare``).
"""

from __future__ import annotations

import gzip
import re
import warnings
import zlib
from pathlib import Path

import numpy as np

ROWS = COLS = 28
PIXELS = ROWS * COLS
CLASSES = 10
MNIST_COUNTS = {"train": 60000, "test": 10000}
MNIST_IDX = {
    ("train", "images"): "train-images-idx3-ubyte",
    ("train", "labels"): "train-labels-idx1-ubyte",
    ("test", "images"): "t10k-images-idx3-ubyte",
    ("test", "labels"): "t10k-labels-idx1-ubyte",
}
MNIST_CSV = {"train": "mnist_train.csv", "test": "mnist_test.csv"}
_INT = re.compile(rb"\s*[-+]?\d+\s*")


class DataError(RuntimeError):
    """A source could not be read, or its content failed verification."""


def _gunzip(raw: bytes, name: str) -> bytes:
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{name}: not a valid gzip file ({exc})") from None


def check_labels(labels: np.ndarray, name: str, where=lambda i: f"at index {i}") -> None:
    """DataError naming the first label outside 0..9 (``where(i)`` says where row i is)."""
    bad = np.flatnonzero(np.asarray(labels) >= CLASSES)
    if bad.size:
        i = int(bad[0])
        raise DataError(f"{name}: label {int(labels[i])} {where(i)} is outside 0..9"
                        + (f" ({bad.size} such labels)" if bad.size > 1 else ""))


def parse_idx(raw: bytes, kind: str, name: str = "IDX") -> np.ndarray:
    """Decode an IDX file (raw or gzip bytes) of ``kind`` "images" or "labels".

    Returns uint8 [N, 784] or [N]. Raises DataError naming ``name`` for bad gzip data, a short
    header, a wrong magic number, images that are not 28x28, a payload shorter (truncated) or
    longer than the header says, or a label outside 0..9 (with its index)."""
    raw = _gunzip(raw, name)
    want_dims = 3 if kind == "images" else 1
    head = 4 + 4 * want_dims
    if len(raw) < head:
        raise DataError(f"{name}: {len(raw)} bytes, too short for an IDX {kind} header "
                        f"({head} bytes)")
    magic = int.from_bytes(raw[:4], "big")
    want = 0x800 + want_dims
    if magic != want:
        raise DataError(f"{name}: bad IDX magic 0x{magic:08x}, expected 0x{want:08x} (IDX "
                        f"{kind}: unsigned bytes, {want_dims} dimension"
                        f"{'s' if want_dims > 1 else ''})")
    dims = np.frombuffer(raw, ">u4", count=want_dims, offset=4).tolist()
    if kind == "images" and dims[1:] != [ROWS, COLS]:
        raise DataError(f"{name}: images are {dims[1]}x{dims[2]}, expected 28x28")
    n = dims[0]
    per = PIXELS if kind == "images" else 1
    body = raw[head:]
    if len(body) < n * per:
        raise DataError(f"{name}: truncated: the header says {n:,} {kind} ({n * per:,} bytes "
                        f"after the header) but the file holds {len(body):,}")
    if len(body) > n * per:
        raise DataError(f"{name}: {len(body) - n * per:,} bytes more than the {n:,} {kind} "
                        "the header says")
    arr = np.frombuffer(body, np.uint8)
    if kind == "labels":
        check_labels(arr, name)
        return arr.copy()
    return arr.reshape(n, PIXELS).copy()


def _csv_problem(lines: list[bytes], first: int, name: str) -> str:
    """The first malformed row of a CSV body: its line, field and value."""
    for i, line in enumerate(lines):
        ln = first + i
        fields = line.split(b",")
        if not line.strip():
            return f"{name} line {ln}: empty line"
        if len(fields) != PIXELS + 1:
            return (f"{name} line {ln}: {len(fields)} fields, expected {PIXELS + 1} (a label "
                    "and 784 pixels)")
        for k, f in enumerate(fields):
            if not _INT.fullmatch(f):
                text = f.strip().decode("utf-8", "replace")
                return f"{name} line {ln}, field {k + 1}: {text!r} is not an integer"
    return f"{name}: cannot be parsed as rows of integers"


def parse_csv(raw: bytes, name: str = "CSV") -> tuple[np.ndarray, np.ndarray]:
    """Decode MNIST CSV bytes (raw or gzip; optional header; rows ``label,p0..p783``).

    Returns (images uint8 [N, 784], labels uint8 [N]); ~2 s for 60,000 rows. Raises DataError
    naming ``name`` and the line (1-based, the header included) of the first problem: a row
    with another number of fields, a field that is not an integer (with the field and value),
    a pixel outside 0..255 or a label outside 0..9 (with the value)."""
    raw = _gunzip(raw, name).replace(b"\r", b"")
    first = 1
    if raw[:1] and not raw[:1].isdigit():  # header line
        nl = raw.find(b"\n")
        raw = raw[nl + 1:] if nl >= 0 else b""
        first = 2
    raw = raw.rstrip(b"\n")
    if not raw:
        raise DataError(f"{name}: no rows")
    rows = raw.count(b"\n") + 1
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # numpy warns when it stops at unparsable text
            vals = np.fromstring(raw.replace(b"\n", b","), dtype=np.int64, sep=",")
    except (ValueError, DeprecationWarning):
        vals = None
    if vals is None or vals.size != rows * (PIXELS + 1) or raw.endswith(b","):
        raise DataError(_csv_problem(raw.split(b"\n"), first, name))
    table = vals.reshape(rows, PIXELS + 1)
    pixels = table[:, 1:]
    bad = np.argwhere((pixels < 0) | (pixels > 255))
    if bad.size:
        r, c = (int(v) for v in bad[0])
        raise DataError(f"{name} line {first + r}, field {c + 2}: pixel value "
                        f"{int(pixels[r, c])} is outside 0..255")
    labels = table[:, 0]
    bad = np.flatnonzero((labels < 0) | (labels >= CLASSES))
    if bad.size:
        r = int(bad[0])
        raise DataError(f"{name} line {first + r}: label {int(labels[r])} is outside 0..9")
    table = table.astype(np.uint8)
    return np.ascontiguousarray(table[:, 1:]), table[:, 0].copy()


# ---------------------------------------------------------------- a folder of files

def _split_of(name: str) -> str | None:
    return "train" if "train" in name else "test" if "test" in name or "t10k" in name else None


def _pick(cands: list[Path], what: str, folder: Path) -> Path:
    """One file for one role: a raw file wins over its own .gz; else DataError if several."""
    if len(cands) == 2:
        a, b = sorted(cands, key=lambda p: len(p.name))
        if b.name.lower() == a.name.lower() + ".gz":
            return a
    if len(cands) > 1:
        raise DataError(f"{folder}: {len(cands)} files could be the {what} "
                        f"({', '.join(sorted(p.name for p in cands))}); keep one")
    return cands[0]


def find_files(folder: Path) -> tuple[str, dict]:
    """("idx", {(split, kind): path}) or ("csv", {split: path}) for the dataset in ``folder``.
    Raises DataError saying what is missing or ambiguous."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"source folder {folder} does not exist")
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    idx: dict = {}
    csv: dict = {}
    for p in files:
        low = p.name.lower()
        stem = low[:-3] if low.endswith(".gz") else low
        split = _split_of(stem)
        if split is None:
            continue
        if stem.endswith(".csv"):
            csv.setdefault(split, []).append(p)
        elif "idx" in stem or "ubyte" in stem:
            kind = "images" if "image" in stem else "labels" if "label" in stem else None
            if kind:
                idx.setdefault((split, kind), []).append(p)
    if len(idx) == 4:
        return "idx", {key: _pick(c, f"{key[0]} {key[1]}", folder) for key, c in idx.items()}
    if len(csv) == 2:
        return "csv", {s: _pick(c, f"{s} CSV", folder) for s, c in csv.items()}
    missing = [f"{s} {k}" for s in ("train", "test") for k in ("images", "labels")
               if (s, k) not in idx]
    raise DataError(
        f"{folder}: no dataset found: give four IDX files (raw or .gz; names with train or "
        "test/t10k, images or labels, and idx or ubyte, e.g. train-images-idx3-ubyte.gz) or "
        "two CSV files (names with train and test, e.g. mnist_train.csv); "
        + (f"IDX files missing: {', '.join(missing)}" if idx else "no IDX or CSV files")
        + (f"; CSV found only for {', '.join(csv)}" if csv else ""))


def read_folder(folder: Path, log=print) -> tuple[dict, str, bool]:
    """Read the dataset of ``folder`` (see the module docstring).

    Returns ``(arrays, source, claims_mnist)``: arrays ``{"train": (images uint8 [N, 784],
    labels uint8 [N]), "test": ...}``, a description of the source, and whether the files claim
    to be the standard MNIST (names and sizes). Raises DataError."""
    folder = Path(folder)
    form, found = find_files(folder)
    out = {}
    if form == "idx":
        for split in ("train", "test"):
            parts = []
            for kind in ("images", "labels"):
                path = found[(split, kind)]
                log(f"reading {path}")
                parts.append(parse_idx(path.read_bytes(), kind, str(path)))
            if len(parts[0]) != len(parts[1]):
                raise DataError(f"{found[(split, 'images')]}: {len(parts[0]):,} images but "
                                f"{found[(split, 'labels')]} holds {len(parts[1]):,} labels")
            out[split] = tuple(parts)
        names = {key: p.name.lower().removesuffix(".gz") for key, p in found.items()}
        standard = all(n in (MNIST_IDX[k], MNIST_IDX[k].replace("-idx", ".idx"))
                       for k, n in names.items())
    else:
        for split in ("train", "test"):
            path = found[split]
            log(f"parsing {path}")
            out[split] = parse_csv(path.read_bytes(), str(path))
        standard = all(found[s].name.lower().removesuffix(".gz") == MNIST_CSV[s]
                       for s in found)
    claims = standard and all(len(out[s][1]) == n for s, n in MNIST_COUNTS.items())
    return out, f"{form.upper()} folder {folder}", claims

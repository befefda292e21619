"""Gzip copies of the MNIST shards, served with ``Content-Encoding: gzip`` to clients that
accept it (the training images: 47,040,000 bytes raw, about a fifth gzipped; a class of 30
students fetches them 30 times over one Wi-Fi).

The copy lives next to its shard (``<shard>.gz``), written atomically by ``webgpu-trainer
data``, at the classroom server's start, or in the background after the first request that
wanted it (which gets the raw shard meanwhile). It is used only when it decompresses to the
bytes the manifest names (sha256 of the raw shard, checked once per file version in this
process), so the page's data stay the raw bytes whatever the transfer encoding.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import threading
import zlib
from pathlib import Path

LEVEL = 6  # zlib's default: within ~2% of level 9 on MNIST, several times faster
CHUNK = 1 << 22

_lock = threading.Lock()
_locks: dict = {}     # shard path -> lock (one builder per shard; others wait for it)
_checked: dict = {}   # gzip path -> (size, mtime_ns) of the copy whose content was checked
_building: set = set()  # shards whose copy a background thread is checking or making


def accepts_gzip(header: str) -> bool:
    """Whether an ``Accept-Encoding`` value allows gzip: ``gzip`` (or ``x-gzip``, or ``*``
    when gzip is not named) with a q-value above 0.

    >>> [accepts_gzip(h) for h in ("gzip, br", "br", "gzip;q=0", "*", "*, gzip;q=0", "")]
    [True, False, False, True, False, False]
    """
    weights = {}
    for part in header.split(","):
        token, *params = [p.strip() for p in part.split(";")]
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if token:
            weights[token.lower()] = q
    for name in ("gzip", "x-gzip", "*"):
        if name in weights:
            return weights[name] > 0
    return False


def _gunzip_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with gzip.open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def write_copy(raw: Path) -> Path:
    """Write ``<raw>.gz`` (level ``LEVEL``, no name or time in the header: the same bytes
    every time) via a temp file, fsync and rename; returns its path."""
    raw = Path(raw)
    gz = raw.with_name(raw.name + ".gz")
    tmp = gz.with_name(f".{gz.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(raw, "rb") as src, open(tmp, "wb") as out:
            z = zlib.compressobj(LEVEL, zlib.DEFLATED, 31)  # 31: the gzip container
            while chunk := src.read(CHUNK):
                out.write(z.compress(chunk))
            out.write(z.flush())
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, gz)
    finally:
        tmp.unlink(missing_ok=True)
    return gz


def _known(raw: Path, gz: Path):
    """The checked copy (or None when it is not smaller than the shard) if this process
    checked the copy now on disk and it is newer than the shard, else ``...`` (unknown)."""
    try:
        st, rs = gz.stat(), raw.stat()
    except OSError:
        return ...
    if st.st_mtime_ns >= rs.st_mtime_ns and _checked.get(gz) == (st.st_size, st.st_mtime_ns):
        return gz if st.st_size < rs.st_size else None
    return ...


def _make(raw: Path, gz: Path, sha256: str) -> Path | None:
    with _lock:
        lock = _locks.setdefault(raw, threading.Lock())
    with lock:
        known = _known(raw, gz)
        if known is not ...:
            return known
        try:
            fresh = gz.is_file() and gz.stat().st_mtime_ns >= raw.stat().st_mtime_ns
            if not (fresh and _gunzip_sha256(gz) == sha256):
                write_copy(raw)
                if _gunzip_sha256(gz) != sha256:  # the shard changed under us
                    gz.unlink(missing_ok=True)
                    return None
            st = gz.stat()
        except (OSError, EOFError, zlib.error):
            return None
        _checked[gz] = (st.st_size, st.st_mtime_ns)
    known = _known(raw, gz)
    return None if known is ... else known


def _make_in_background(raw: Path, gz: Path, sha256: str) -> None:
    try:
        _make(raw, gz, sha256)
    finally:
        with _lock:
            _building.discard(raw)


def gzip_copy(raw: Path, sha256: str, wait: bool = True) -> Path | None:
    """The gzip copy of shard ``raw`` whose content is ``sha256``: the existing one when it is
    newer than the shard and decompresses to those bytes, else a new one. None when no copy
    can be written (a read-only cache folder) or it is not smaller than the shard. With
    ``wait=False`` (a request) a copy not yet checked by this process is checked or made in a
    background thread and None returned meanwhile: nobody waits for the compression."""
    raw = Path(raw)
    gz = raw.with_name(raw.name + ".gz")
    known = _known(raw, gz)
    if known is not ...:
        return known
    if wait:
        return _make(raw, gz, sha256)
    with _lock:
        if raw in _building:
            return None
        _building.add(raw)
    threading.Thread(target=_make_in_background, args=(raw, gz, sha256), daemon=True,
                     name=f"gzip {raw.name}").start()
    return None


def prepare_copies(data_dir: Path) -> int:
    """Check or make the gzip copy of every shard of ``data_dir``'s manifest (at the start of
    a server, so the first students get them); returns the bytes of the copies (0 without a
    readable manifest)."""
    try:
        manifest = json.loads((Path(data_dir) / "manifest.json").read_text())
        entries = [e for s in manifest["splits"].values() for e in s.values()
                   if isinstance(e, dict) and "file" in e]
    except (OSError, ValueError, KeyError, AttributeError):
        return 0
    total = 0
    for e in entries:
        gz = gzip_copy(Path(data_dir) / e["file"], str(e.get("sha256")))
        total += gz.stat().st_size if gz else 0
    return total

"""Checkpoints of a native run (``checkpoints/epoch-NNN.ckpt`` of ``webgpu-trainer train``): the
file format (``write_checkpoint`` / ``read_checkpoint``, written atomically), the latest one of a
run. Its "weights" and "optimizer" sections and the header fields that place the run come from
``engine/train/checkpoint.py`` (one implementation, shared with the browser's checkpoints; its
functions stay importable from here)."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

# re-exported
from ..engine.train.checkpoint import (load_optimizer_state, optimizer_state,  # noqa: F401
                                       read_weights, write_weights)
from ..host.data import atomic_write

CKPT_MAGIC = b"WGTCKPT1"
CKPT_FORMAT = "webgpu-trainer/checkpoint@1"


def write_checkpoint(path: Path, header: dict, sections: dict[str, bytes]) -> None:
    """File layout: ``WGTCKPT1``, u32 little-endian header length, header JSON (utf-8), then the
    binary sections back to back. The header lists each section as ``{name: {offset, nbytes,
    sha256}}`` (offset from the start of the binary part)."""
    header = dict(header, format=CKPT_FORMAT, sections={})
    offset = 0
    for name, blob in sections.items():
        header["sections"][name] = {"offset": offset, "nbytes": len(blob),
                                    "sha256": hashlib.sha256(blob).hexdigest()}
        offset += len(blob)
    head = json.dumps(header, sort_keys=True).encode()
    atomic_write(path, CKPT_MAGIC + struct.pack("<I", len(head)) + head
                 + b"".join(sections.values()))


def _fail(path, msg: str) -> ValueError:
    return ValueError(f"checkpoint {path}: {msg}; it cannot be resumed from")


def read_checkpoint(path: Path) -> tuple[dict, dict[str, bytes]]:
    """``(header, {section: bytes})``. Raises ValueError naming the file, what is wrong and
    where (byte offsets): a file too short for its magic and header length, another magic, a
    header cut off or not JSON, a header without ``sections`` or with a bad entry, a section
    past the end of the file (truncated) or whose sha256 differs (corrupt)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise _fail(path, f"cannot be read ({exc.strerror or exc})") from None
    if len(raw) < 12:
        raise _fail(path, f"truncated: {len(raw)} bytes, shorter than the 12 bytes of its "
                          "magic and header length (bytes 0..11)")
    if raw[:8] != CKPT_MAGIC:
        raise _fail(path, f"not a webgpu-trainer checkpoint (bytes 0..7 are {raw[:8]!r}, "
                          f"expected {CKPT_MAGIC!r})")
    (n,) = struct.unpack("<I", raw[8:12])
    if 12 + n > len(raw):
        raise _fail(path, f"truncated inside its header: the header takes bytes 12..{11 + n:,} "
                          f"but the file ends at byte offset {len(raw):,}")
    try:
        header = json.loads(raw[12:12 + n])
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        at = 12 + getattr(exc, "pos", getattr(exc, "start", 0))
        raise _fail(path, f"its header (bytes 12..{11 + n:,}) is not valid JSON: "
                          f"{getattr(exc, 'msg', exc)} at byte offset {at:,}") from None
    table = header.get("sections") if isinstance(header, dict) else None
    if not isinstance(table, dict) or not table:
        raise _fail(path, "its header (bytes 12.."
                          f"{11 + n:,}) lists no sections (no 'sections' object)")
    body, sections = 12 + n, {}
    for name, s in table.items():
        ok = isinstance(s, dict) and all(isinstance(s.get(k), int) and s[k] >= 0
                                         for k in ("offset", "nbytes"))
        if not ok or not isinstance(s.get("sha256"), str):
            raise _fail(path, f"section {name!r} has no valid offset, nbytes and sha256 in "
                              "the header")
        start, end = body + s["offset"], body + s["offset"] + s["nbytes"]
        if end > len(raw):
            raise _fail(path, f"truncated: section {name!r} takes bytes {start:,}..{end - 1:,} "
                              f"but the file ends at byte offset {len(raw):,}")
        blob = raw[start:end]
        if hashlib.sha256(blob).hexdigest() != s["sha256"]:
            raise _fail(path, f"section {name!r} (bytes {start:,}..{end - 1:,}) does not match "
                              "its sha256 (corrupt)")
        sections[name] = blob
    return header, sections


def last_checkpoint(run_dir: Path) -> Path | None:
    """The latest ``checkpoints/epoch-*.ckpt`` of a run folder (by name), or None."""
    ckpts = sorted((Path(run_dir) / "checkpoints").glob("epoch-*.ckpt"))
    return ckpts[-1] if ckpts else None


def read_last(run_dir: Path) -> tuple[Path | None, dict | None, dict | None]:
    """``(path, header, sections)`` of the run's latest checkpoint (Nones without one).
    Raises ValueError naming the file and the problem (``read_checkpoint``, or a header
    without the fields that place the run), and the earlier checkpoint a resume could use."""
    path = last_checkpoint(run_dir)
    if path is None:
        return None, None, None
    try:
        header, sections = read_checkpoint(path)
        need = {"epoch": int, "step": int, "model_sha256": str}
        bad = [k for k, t in need.items() if not isinstance(header.get(k), t)]
        bad += [f"section {k!r}" for k in ("weights", "optimizer") if k not in sections]
        if bad:
            raise _fail(path, f"its header lacks {', '.join(bad)}")
    except ValueError as exc:
        older = sorted((Path(run_dir) / "checkpoints").glob("epoch-*.ckpt"))[:-1]
        hint = (f" (the earlier checkpoint {older[-1].name} is left: move {path.name} out of "
                f"{path.parent} to resume from it)" if older else "")
        raise ValueError(f"{exc}{hint}") from None
    return path, header, sections


def fixed_on_resume(header: dict, cfg, config_path: Path, ckpt_path: Path) -> None:
    """ValueError when the run's config (config.json, ``cfg``) differs from the one the
    checkpoint was trained with in a field that may not change on resume (optimizer,
    batch_size, seed, train_images, val_images: the run would not continue exactly), naming
    each field and both values. A checkpoint without its config (earlier versions) passes."""
    from ..engine.config import BY_NAME
    trained = header.get("config")
    if not isinstance(trained, dict):
        return
    diff = [f"{k} is {cfg[k]!r} there but the checkpoint was trained with {trained[k]!r}"
            for k, f in BY_NAME.items() if not f.resume and k in trained and k in cfg
            and trained[k] != cfg[k]]
    if diff:
        raise ValueError(f"{config_path} does not match the checkpoint {ckpt_path.name}: "
                         + "; ".join(diff) + " (these may not change on --resume: the run "
                         "would not continue exactly; put the checkpoint's values back)")


def undo_for(out: Path):
    """Note what the run folder ``out`` holds now; returns ``undo()``, which puts it back as it
    was: config.json's earlier bytes (or none), and the folder, ``checkpoints/`` and
    ``metrics.jsonl`` removed when they did not exist and hold nothing else. For a run that
    fails before its first step (nothing of an existing run is touched)."""
    out = Path(out)
    config = out / "config.json"
    old = config.read_bytes() if config.is_file() else None
    missing = [p for p in (out / "metrics.jsonl", out / "checkpoints", out) if not p.exists()]

    def undo() -> None:
        if old is not None:
            if not config.is_file() or config.read_bytes() != old:
                atomic_write(config, old)
        else:
            config.unlink(missing_ok=True)
        for p in missing:
            if p.is_file():
                p.unlink()
            elif p.is_dir() and not any(p.iterdir()):
                p.rmdir()
    return undo

"""Checkpoints of a native run (``checkpoints/epoch-NNN.ckpt`` of ``webgpu-trainer train``): the
file format (``write_checkpoint`` / ``read_checkpoint``, written atomically), the latest one of a
run. Its "weights" and "optimizer" sections and the header fields that place the run come from
``engine/checkpoint.py`` (one implementation, shared with the browser's checkpoints; its
functions stay importable from here)."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

from ..engine.checkpoint import (load_optimizer_state, optimizer_state,  # noqa: F401 (re-exported)
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


def read_checkpoint(path: Path) -> tuple[dict, dict[str, bytes]]:
    """``(header, {section: bytes})``; raises ValueError on a bad or corrupt file."""
    raw = Path(path).read_bytes()
    if raw[:8] != CKPT_MAGIC:
        raise ValueError(f"{path}: not a webgpu-trainer checkpoint")
    (n,) = struct.unpack("<I", raw[8:12])
    header = json.loads(raw[12:12 + n])
    body = raw[12 + n:]
    sections = {}
    for name, s in header["sections"].items():
        blob = body[s["offset"]:s["offset"] + s["nbytes"]]
        if len(blob) != s["nbytes"] or hashlib.sha256(blob).hexdigest() != s["sha256"]:
            raise ValueError(f"{path}: section {name} is truncated or corrupt")
        sections[name] = blob
    return header, sections


def last_checkpoint(run_dir: Path) -> Path | None:
    ckpts = sorted((Path(run_dir) / "checkpoints").glob("epoch-*.ckpt"))
    return ckpts[-1] if ckpts else None

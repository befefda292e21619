"""Checkpoints of a native run (``checkpoints/epoch-NNN.ckpt`` of ``webgpu-trainer train``): the
file format (``write_checkpoint`` / ``read_checkpoint``, written atomically), the latest one of a
run, and its "weights" (the plan-layout weight buffer) and "optimizer"
(``optim.Optimizer.state_bytes``) sections, read from and written to the trainer's engine (GPU
or numpy alike: a checkpoint of one continues on the other)."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

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


async def optimizer_state(dev, opt) -> bytes:
    """The optimizer state section (``optim.Optimizer.state_bytes``; the numpy optimizers of
    ``cpu.optim`` write the same format, ``dev`` unused)."""
    return bytes(await opt.state_bytes(dev))


def load_optimizer_state(dev, opt, data: bytes) -> None:
    opt.load_state_bytes(dev, data)


async def read_weights(trainer) -> bytes:
    """The checkpoint's "weights" section: the whole flat weight buffer of the trainer's engine
    (the GPU plan's layout on both engines)."""
    return await trainer.engine.read_weights()


def write_weights(trainer, blob: bytes, where="checkpoint") -> None:
    """Restore a "weights" section (written by either engine) into the trainer's engine."""
    try:
        trainer.engine.write_weights(blob)
    except ValueError:
        raise ValueError(f"{where}: weights do not fit this model's layout") from None

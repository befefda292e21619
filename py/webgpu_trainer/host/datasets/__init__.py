"""Datasets: sources read into ``Arrays``, checked and written by ``store`` (CPython: numpy).

``SOURCES`` lists the source kinds ``webgpu-trainer data --source PATH`` tries, in order: each
is ``(detect, read)`` where ``detect(path) -> bool`` looks only at names (cheap, no parsing) and
``read(path, log) -> Arrays`` reads and checks everything, raising ``DataError`` naming the
file, the record or line, and the value. Another source kind plugs in by adding its pair.
"""

from __future__ import annotations

from pathlib import Path

from ..datafiles import DataError
from .arrays import Arrays

SOURCES: list = []


def read_source(path: Path, log=print) -> Arrays:
    """The first source kind in ``SOURCES`` that detects ``path``, read; DataError when none
    does (naming what was looked for)."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"source {path} does not exist")
    for detect, read in SOURCES:
        if detect(path):
            return read(path, log)
    raise DataError(f"{path}: no dataset found: expected a folder or .tar.gz of IDX files "
                    "(train/t10k images and labels), CIFAR-10/100 (binary or python version), "
                    "or another kind listed by `webgpu-trainer data --help`")


__all__ = ["Arrays", "DataError", "SOURCES", "read_source"]

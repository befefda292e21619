"""Token datasets (manifest kind "tokens"): int32 or uint16 ``[N, T]`` token ids below the
manifest's ``vocab_size`` (shards ``.i32`` / ``.u16``), labels as for every dataset. The
checks ``store`` runs on them, their manifest fields, and ``markers``: a small synthetic
dataset whose label is learnable (which of K marker tokens appears most in a row).
"""

from __future__ import annotations

import numpy as np

from ...engine.train.data_tokens import MAX_VOCAB
from ..datafiles import DataError
from .arrays import Arrays

EXT = {"float32": "f32", "int32": "i32", "uint16": "u16"}  # shard suffix by dtype (else u8)


def check_ids(what: str, x: np.ndarray, vocab: int) -> None:
    """DataError naming the split, row, position and value of the first id outside
    0..vocab-1, or a shape that is not [N, T], or a vocab_size out of 2..2**24."""
    if not isinstance(vocab, int) or not 2 <= vocab <= MAX_VOCAB:
        raise DataError(f"{what}: vocab_size {vocab!r} must be 2..{MAX_VOCAB} for token ids")
    if x.ndim != 2 or x.shape[1] < 1:
        raise DataError(f"{what}: token ids of shape {list(x.shape)}; expected [N, T]")
    bad = np.argwhere((x < 0) | (x >= vocab))
    if bad.size:
        r, c = (int(v) for v in bad[0])
        raise DataError(f"{what}: token {c} of row {r} is {int(x[r, c])}, outside "
                        f"0..{vocab - 1} (vocab_size {vocab})")


def manifest_fields(arrays: Arrays) -> dict:
    """The extra manifest fields of a tokens dataset (``vocab_size``); {} for others."""
    return {"vocab_size": int(arrays.vocab_size)} if arrays.kind == "tokens" else {}


def shard_dtype(m: dict, where: str) -> str:
    """The token shards' dtype a tokens manifest declares (int32 or uint16), its vocab_size
    checked; DataError naming ``where`` otherwise."""
    vocab = m.get("vocab_size")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or not 2 <= vocab <= MAX_VOCAB:
        raise DataError(f"{where}: vocab_size {str(vocab)[:20]} is not an integer "
                        f"2..{MAX_VOCAB}")
    try:
        dtype = m["splits"]["train"]["images"]["dtype"]
    except (KeyError, TypeError):
        dtype = None
    if dtype not in ("int32", "uint16"):
        raise DataError(f"{where}: token shards of dtype {str(dtype)[:20]!r}, expected "
                        "'int32' or 'uint16'")
    return dtype


def markers(train: int = 2000, test: int = 500, length: int = 16, vocab: int = 32,
            classes: int = 4, seed: int = 0) -> Arrays:
    """A synthetic tokens dataset: rows of ``length`` ids; tokens 1..``classes`` are markers,
    the others (``classes``+1..vocab-1) filler; each row holds 1..length/2 of one marker (the
    label) and fewer of each other, so the label is which marker appears most. uint16 ids."""
    if not 2 <= classes < vocab - 1 or length < 4:
        raise DataError(f"markers: need 2 <= classes < vocab - 1 and length >= 4, got "
                        f"classes {classes}, vocab {vocab}, length {length}")
    rng = np.random.default_rng(seed)

    def split(n):
        x = rng.integers(classes + 1, vocab, (n, length))
        y = rng.integers(0, classes, n)
        for r in range(n):
            most = int(rng.integers(2, length // 2 + 1))
            counts = [int(rng.integers(0, most)) for _ in range(classes)]
            counts[y[r]] = most
            order = [y[r]] + [k for k in range(classes) if k != y[r]]  # the label's first
            ids = [k + 1 for k in order for _ in range(counts[k])][:length]
            x[r, rng.permutation(length)[:len(ids)]] = ids
        return x.astype(np.uint16), y.astype(np.uint8)

    tx, ty = split(train)
    vx, vy = split(test)
    names = [f"marker {k + 1}" for k in range(classes)]
    return Arrays(tx, ty, vx, vy, names, "Marker tokens (synthetic)",
                  f"markers(train={train}, test={test}, length={length}, vocab={vocab}, "
                  f"classes={classes}, seed={seed})", vocab_size=vocab, name="markers")

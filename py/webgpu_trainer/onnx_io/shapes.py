"""Element counts, constants as integer lists, and ONNX Reshape's output dims."""
from __future__ import annotations

import math

import numpy as np


def _numel(dims) -> int:
    """The element count of a shape whose dims may be numpy integers."""
    return math.prod(int(d) for d in dims)


def _int_list(arr) -> list[int]:
    return [int(v) for v in np.asarray(arr).reshape(-1)]


def _reshape_dims(dims: list, shape, allowzero: int) -> list | None:
    """ONNX Reshape's output dims for input ``dims`` and target ``shape``; None if invalid."""
    out = []
    for i, v in enumerate(int(s) for s in shape):
        if v == 0 and not allowzero:
            if i >= len(dims):
                return None
            v = dims[i]
        out.append(v)
    if out.count(-1) > 1:
        return None
    if -1 in out:
        rest = _numel(d for d in out if d != -1)
        if rest == 0 or _numel(dims) % rest:
            return None
        out[out.index(-1)] = _numel(dims) // rest
    return out if _numel(out) == _numel(dims) else None

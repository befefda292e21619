"""A restricted unpickler for CIFAR's python version (never ``pickle.load`` on a user's file).

A pickle can call any importable function (``os.system`` included) through its ``GLOBAL`` /
``STACK_GLOBAL`` opcodes; ``load_plain`` resolves none but these four, so a file can build only
plain data (dict, list, tuple, str, bytes, int, float, bool, None) and numpy arrays of numbers:

- ``numpy.core.multiarray._reconstruct`` (``numpy._core`` in numpy 2), only as
  ``_reconstruct(numpy.ndarray, shape, dtype-code)``: the empty array that the pickle then fills
  with ``ndarray.__setstate__`` (shape, dtype, raw bytes);
- ``numpy.ndarray``, the class passed to it (not callable from the pickle: REDUCE on it is
  refused);
- ``numpy.dtype``, only for a numeric code (``u1``, ``i8``, ``f4`` ...): object, void and
  structured dtypes are refused, so no array can hold Python objects;
- ``_codecs.encode``, only as ``encode(text, "latin1")``: how Python 3 writes ``bytes`` into a
  protocol-2 pickle (the official files, written by Python 2, need none of these but the numpy
  names).

Any other global is refused with a DataError naming it, before anything is called.
"""

from __future__ import annotations

import io
import pickle

import numpy as np

from ..datafiles import DataError

_RECONSTRUCT = {("numpy.core.multiarray", "_reconstruct"),
                ("numpy._core.multiarray", "_reconstruct")}


def _reconstruct(cls, shape, code):
    if cls is not np.ndarray or not isinstance(code, (bytes, str)) or len(code) > 2:
        raise pickle.UnpicklingError("_reconstruct with other arguments than (ndarray, ...)")
    return np.ndarray.__new__(np.ndarray, (0,), np.uint8)


def _dtype(code, align=False, copy=False):
    if not isinstance(code, (bytes, str)) or len(code) > 4:
        raise pickle.UnpicklingError(f"dtype {str(code)[:20]!r} refused")
    dt = np.dtype(code.decode("ascii", "replace") if isinstance(code, bytes) else code)
    if dt.kind not in "biuf" or dt.fields is not None:
        raise pickle.UnpicklingError(f"dtype {dt} refused (numbers only)")
    return dt


def _latin1(text, encoding):
    if not isinstance(text, str) or encoding != "latin1":
        raise pickle.UnpicklingError("_codecs.encode with other arguments than (str, 'latin1')")
    return text.encode("latin1")


class _Plain(pickle.Unpickler):
    """``pickle.Unpickler`` whose ``find_class`` knows only the names above."""

    def find_class(self, module: str, name: str):
        if (module, name) in _RECONSTRUCT:
            return _reconstruct
        if (module, name) == ("numpy", "ndarray"):
            return np.ndarray
        if (module, name) == ("numpy", "dtype"):
            return _dtype
        if (module, name) == ("_codecs", "encode"):
            return _latin1
        raise pickle.UnpicklingError(f"global {module[:60]}.{name[:60]} refused")


def _check_arrays(obj, depth: int = 0) -> None:
    """Every ndarray inside ``obj`` holds numbers (``__setstate__`` could set another dtype)."""
    if depth > 20:
        return
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biuf":
            raise pickle.UnpicklingError(f"an array of dtype {obj.dtype} refused")
    elif isinstance(obj, dict):
        for v in obj.values():
            _check_arrays(v, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj[:8]:  # CIFAR's lists hold ints and names; arrays sit in the dict
            _check_arrays(v, depth + 1)


def load_plain(raw: bytes, name: str):
    """The object pickled in ``raw`` (python 2 strings as bytes), built from plain data and
    numeric numpy arrays only; DataError naming ``name`` for anything else or a broken pickle.
    """
    try:
        obj = _Plain(io.BytesIO(raw), encoding="bytes").load()
        _check_arrays(obj)
    except pickle.UnpicklingError as exc:
        raise DataError(f"{name}: not a CIFAR python batch: {exc} (only plain data and numpy "
                        "arrays of numbers are read from a pickle)") from None
    except (EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            MemoryError, RecursionError, UnicodeError) as exc:
        raise DataError(f"{name}: not a readable pickle ({type(exc).__name__}: "
                        f"{str(exc)[:200]})") from None
    return obj

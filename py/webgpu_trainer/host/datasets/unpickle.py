"""A restricted unpickler for CIFAR's python version (never ``pickle.load`` on a user's file).

A pickle can call any importable function (``os.system`` included) through its ``GLOBAL`` /
``STACK_GLOBAL`` opcodes and ``REDUCE``, and run ``__setstate__`` of what it built through
``BUILD``. ``load_plain`` runs Python's own pure-Python unpickler (``pickle._Unpickler``, whose
opcode table can be changed) with:

- ``find_class`` resolving only four names, each to a guarded stand-in:
  ``numpy.core.multiarray._reconstruct`` (``numpy._core`` in numpy 2), only as
  ``_reconstruct(numpy.ndarray, shape, code)`` -> an empty uint8 array; ``numpy.ndarray``, a
  marker that only ``_reconstruct`` accepts (calling it is refused); ``numpy.dtype``, only for a
  numeric code (``u1``, ``i8``, ``f4`` ...); ``_codecs.encode``, only as ``encode(text,
  "latin1")`` (how Python 3 writes ``bytes`` into a protocol-2 pickle);
- ``BUILD`` only on an array (its state: shape, a numeric dtype, raw bytes) or a dtype (its
  byte order; nothing else of numpy's dtype state is applied).

So a file builds only plain data (dict, list, tuple, str, bytes, int, float, bool, None) and
numpy arrays of numbers; any other global or ``BUILD`` is a DataError, before anything runs.
"""

from __future__ import annotations

import io
import pickle

import numpy as np

from ..datafiles import DataError

_RECONSTRUCT = {("numpy.core.multiarray", "_reconstruct"),
                ("numpy._core.multiarray", "_reconstruct")}
_NDARRAY = type("ndarray-marker", (), {})()  # what numpy.ndarray resolves to: not callable


def _numeric(dt) -> bool:
    return isinstance(dt, np.dtype) and dt.kind in "biuf" and dt.fields is None \
        and not dt.hasobject and dt.subdtype is None


def _reconstruct(cls, shape, code):
    if cls is not _NDARRAY or not isinstance(code, (bytes, str)) or len(code) > 2:
        raise pickle.UnpicklingError("_reconstruct with other arguments than (ndarray, ...)")
    return np.ndarray.__new__(np.ndarray, (0,), np.uint8)


def _dtype(code, align=False, copy=False):
    if not isinstance(code, (bytes, str)) or len(code) > 4:
        raise pickle.UnpicklingError(f"dtype {str(code)[:20]!r} refused")
    try:
        dt = np.dtype(code.decode("ascii") if isinstance(code, bytes) else code)
    except (TypeError, ValueError, UnicodeError):
        raise pickle.UnpicklingError(f"dtype {str(code)[:20]!r} refused") from None
    if not _numeric(dt):
        raise pickle.UnpicklingError(f"dtype {dt} refused (numbers only)")
    return dt


def _latin1(text, encoding):
    if not isinstance(text, str) or encoding != "latin1":
        raise pickle.UnpicklingError("_codecs.encode with other arguments than (str, 'latin1')")
    return text.encode("latin1")


class _Plain(pickle._Unpickler):
    """The pure-Python unpickler with ``find_class`` and ``BUILD`` restricted (see above)."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def find_class(self, module: str, name: str):
        if (module, name) in _RECONSTRUCT:
            return _reconstruct
        known = {("numpy", "ndarray"): _NDARRAY, ("numpy", "dtype"): _dtype,
                 ("_codecs", "encode"): _latin1}
        if (module, name) in known:
            return known[(module, name)]
        raise pickle.UnpicklingError(f"global {module[:60]}.{name[:60]} refused")

    def load_build(self):
        state = self.stack.pop()
        inst = self.stack[-1]
        if type(inst) is np.ndarray:
            if not (isinstance(state, tuple) and len(state) == 5 and _numeric(state[2])
                    and isinstance(state[4], bytes)):
                raise pickle.UnpicklingError("an array state other than (shape, numeric "
                                             "dtype, bytes)")
            inst.__setstate__(state)
        elif isinstance(inst, np.dtype) and isinstance(state, tuple) and len(state) > 1:
            if state[1] in ("<", ">", b"<", b">"):
                order = state[1].decode() if isinstance(state[1], bytes) else state[1]
                self.stack[-1] = inst.newbyteorder(order)
        else:
            raise pickle.UnpicklingError(f"BUILD on a {type(inst).__name__} refused")

    dispatch[pickle.BUILD[0]] = load_build


def load_plain(raw: bytes, name: str):
    """The object pickled in ``raw`` (python 2 strings as bytes), built from plain data and
    numeric numpy arrays only; DataError naming ``name`` for anything else or a broken pickle.
    """
    try:
        return _Plain(io.BytesIO(raw), encoding="bytes").load()
    except pickle.UnpicklingError as exc:
        raise DataError(f"{name}: not a CIFAR python batch: {exc} (only plain data and numpy "
                        "arrays of numbers are read from a pickle)") from None
    except (EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            MemoryError, RecursionError, UnicodeError, OverflowError) as exc:
        raise DataError(f"{name}: not a readable pickle ({type(exc).__name__}: "
                        f"{str(exc)[:200]})") from None

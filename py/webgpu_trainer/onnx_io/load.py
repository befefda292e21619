"""The import as stages over one state: :func:`load_bundle` runs :data:`STAGES` in order on an
``ImportState`` (``state.py``), each stage a function of it that reads what the earlier ones
wrote and adds its part (and its problems); the one error at the end lists them all."""
from __future__ import annotations

import os

from .attrs import attributes
from .batch import batch_shapes
from .bundle import bundle, weights
from .checks import check_graph, check_ops
from .errors import OnnxImportError, _error
from .fold import fold
from .masked_fill import masked_fill
from .read import read_stage
from .state import ImportState
from .token_masks import token_masks

STAGES = (read_stage, token_masks, masked_fill, check_graph, fold, batch_shapes, check_ops, weights,
          attributes, bundle)
"""read the file -> mask chains of the token ids as lookups -> masked_fill by constant masks
as x * keep + fill -> check the graph -> fold
constants -> shapes for any batch -> check the ops -> the weights (tensors, blob) -> the
nodes' attributes -> the bundle."""


def _run(path: str, check_trainable: bool) -> tuple[dict, bytes]:
    s = ImportState(path, check_trainable)
    for stage in STAGES:
        stage(s)
    if s.problems:
        raise _error(path, s.problems, s.hints)
    return s.graph, s.blob


def load_bundle(path: str | os.PathLike, *, check_trainable: bool = True) -> tuple[dict, bytes]:
    """Read an ``.onnx`` file into the engine's model description (the one import entry point).

    Returns ``(graph, weights)``: ``graph`` is a JSON-serialisable dict (format
    ``webgpu-trainer/graph@1``: name, opset, producer, doc, inputs, outputs, tensors, constants,
    nodes, notes, alignment, weights_nbytes; see the module docstring for the folding and
    normalisation rules); ``weights`` is ``bytes`` holding every tensor as little-endian
    float32 at ``tensor["offset"]`` (a multiple of 256), of length ``graph["weights_nbytes"]``.

    ``check_trainable``: also refuse ops the engine cannot train yet (``graph.supported()``);
    False imports anything the importer maps (tests, export).

    Raises ``OnnxImportError`` (a ValueError) naming the file and listing EVERY problem
    (``e.problems``): a missing, truncated or non-ONNX file; unsupported or untrainable ops
    with node name and opset; unknown op domains; an input that is not one float [N, ...];
    tensor data that does not match the declared size; missing external data; int8/uint8/float8
    initializers used as data. Never anything else: an unexpected failure is reported as an
    OnnxImportError too.
    """
    path = os.fspath(path)
    try:
        return _run(path, check_trainable)
    except OnnxImportError:
        raise
    except (Exception, RecursionError, MemoryError) as e:  # noqa: BLE001 - never a crash
        raise _error(path, [f"the import failed unexpectedly ({type(e).__name__}: {e})"]) \
            from e

"""The import: :func:`load_bundle` runs one ``_Importer`` (checks, folding, the bundle; its steps
live in ``checks.py``, ``fold.py``, ``batch.py``, ``attrs.py`` and ``bundle.py``)."""
from __future__ import annotations

import os

import numpy as np
import onnx

from .attrs import _Attrs
from .batch import _BatchShapes
from .bundle import _Bundler
from .checks import _Checks
from .errors import OnnxImportError, _error
from .fold import _Folder
from .initializers import _dequantize_weights, _Initializers
from .protos import _node_names, _opset
from .read import _read_model


class _Importer(_Checks, _Folder, _BatchShapes, _Attrs, _Bundler, _Initializers):
    """One import: the model, the problems found so far and the pieces of the bundle."""

    def __init__(self, path: str, check_trainable: bool):
        self.path = path
        self.check_trainable = check_trainable
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.hints: list[str] = []  # shown after the problems, not counted

    def run(self) -> tuple[dict, bytes]:
        path = self.path
        self.model = model = _read_model(path)
        self.base = os.path.dirname(os.path.abspath(path))
        self.file_size = os.path.getsize(path)
        tensors_ok = self._check_tensor_data()
        if tensors_ok:
            self._load_external()
        if model.functions:
            try:
                self.model = model = onnx.inliner.inline_local_functions(model)
            except Exception as e:  # noqa: BLE001
                self.problems.append(f"local functions could not be inlined: {e}")
        done, found = _dequantize_weights(model) if tensors_ok else ([], [])
        self.problems += found
        self._note_dequantized(done)
        self.g = g = model.graph
        self.opset = _opset(model)
        self.opsets = {o.domain or "ai.onnx": int(o.version) for o in model.opset_import}
        self._check_opset()
        self.names = _node_names(g)
        self.init = {t.name: t for t in g.initializer}
        structure_ok = self._check_structure()
        self.scalar_reason, self.scalar_params = {}, []
        if tensors_ok:
            self._classify_scalars()
        self.input = self._check_inputs()
        self.constants: dict[str, np.ndarray] = {}  # value name -> folded / constant value
        self.const_overrides: dict[tuple, str] = {}  # (node name, input index) -> new name
        self.attr_overrides: dict[str, dict] = {}
        self.folded: set[str] = set()  # node names removed by folding
        self.fold_failures: dict[str, str] = {}
        self.reported: set[str] = set()  # nodes with a problem already
        self.shapes: dict[str, list | None] = {}
        if tensors_ok and structure_ok and not self.problems:
            self._check_onnx()
        self.dead = self._dead_nodes()
        self.fold_ran = tensors_ok and structure_ok and self.input is not None
        if self.fold_ran:
            self._fold()
        self.folded |= self.dead
        self._check_ops()
        graph, blob = self._build(tensors_ok)
        if self.problems:
            raise _error(path, self.problems, self.hints)
        return graph, blob


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
    with node name and opset; unknown op domains; inputs that are not MNIST-shaped; tensor data
    that does not match the declared size; missing external data; int8/uint8/float8
    initializers used as data. Never anything else: an unexpected failure is reported as an
    OnnxImportError too.
    """
    path = os.fspath(path)
    try:
        return _Importer(path, check_trainable).run()
    except OnnxImportError:
        raise
    except (Exception, RecursionError, MemoryError) as e:  # noqa: BLE001 - never a crash
        raise _error(path, [f"the import failed unexpectedly ({type(e).__name__}: {e})"]) \
            from e

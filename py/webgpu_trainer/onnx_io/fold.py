"""The import's third stage, constant folding (:func:`fold`, see the package docstring): ONNX
shape inference alternated with evaluating every node whose inputs are known, at two batch
sizes; values equal at both are constants, the others follow the batch (the next stage,
``batch.py``)."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .batch import static_batch
from .constants import _BATCHES, _CONST_SLOTS, _DEFAULT_DOMAINS, _FLOAT_TYPES, _NEVER_FOLD
from .errors import _NotFoldable
from .eval_op import _eval_op
from .protos import _attr, _constant_value, _dims
from .shapes import _numel
from .state import ImportState


def _infer(s: ImportState, batch: int, known: dict | None = None) -> dict:
    """Shapes (and ``"__types__"``: elem types) of every value for ``batch``: ONNX shape
    inference on a light copy, with the values in ``known`` (folded constants) given as
    initializers so that ops whose output shape depends on them (Reshape, ReduceMean
    with computed axes, ...) are inferred too."""
    g = s.g
    known = known or {}
    m = onnx.ModelProto()
    m.ir_version = max(s.model.ir_version, 4)
    m.opset_import.extend(s.model.opset_import)
    gg = m.graph
    gg.name = g.name
    for n in g.node:
        if not all(o in known for o in n.output if o) or not any(n.output):
            gg.node.append(n)
    for name, v in known.items():
        gg.initializer.append(numpy_helper.from_array(np.asarray(v), name))
    names = set()
    for i in g.input:
        if i.name == s.input["name"]:
            gg.input.append(helper.make_tensor_value_info(
                i.name, i.type.tensor_type.elem_type, [batch] + s.input["dims"]))
        elif i.name not in s.init:
            gg.input.append(i)
        names.add(i.name)
    for t in g.initializer:
        if t.data_type not in _FLOAT_TYPES or _numel(t.dims) <= 4096:
            gg.initializer.append(t)
        else:
            gg.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    for o in g.output:
        gg.output.append(helper.make_tensor_value_info(o.name, o.type.tensor_type.elem_type,
                                                       None))
    shapes: dict[str, Any] = {}
    types: dict[str, int] = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(m, check_type=False, strict_mode=False,
                                                     data_prop=True)
    except Exception as e:  # noqa: BLE001
        s.problems.append(f"ONNX shape inference failed: {e}")
        inferred = m
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output) + \
            list(inferred.graph.input):
        d = _dims(vi)
        shapes[vi.name] = None if d is None else [x if isinstance(x, int) else None
                                                  for x in d]
        if vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    for t in g.initializer:
        shapes[t.name] = list(t.dims)
        types[t.name] = t.data_type
    shapes["__types__"] = types
    return shapes


def _const_sources(s: ImportState) -> dict[str, np.ndarray]:
    """Values known without running the model: Constant nodes and the initializers that
    are not data (non-float ones, one-value floats that stay constants: ``constant_reason``,
    see initializers.py; float ones read only in setting slots, e.g. Resize's scales)."""
    vals = {}
    settings, data = set(), set()
    for n in s.g.node:
        for k, x in enumerate(n.input):
            (settings if k in _CONST_SLOTS.get(n.op_type, ()) else data).add(x)
    for t in s.g.initializer:
        if t.data_type not in _FLOAT_TYPES or t.name in s.constant_reason \
                or (t.name in settings and t.name not in data):
            try:
                vals[t.name] = numpy_helper.to_array(t)
            except Exception:  # noqa: BLE001 - exotic dtypes: judged by role later
                pass
    for n, name in zip(s.g.node, s.names):
        if n.op_type == "Constant" and n.domain in _DEFAULT_DOMAINS:
            try:
                vals[n.output[0]] = _constant_value(n)
            except Exception as e:  # noqa: BLE001
                s.problems.append(f"node {name} (Constant): {e}")
    return vals


def _evaluate(s: ImportState, base: dict, shapes: dict) -> tuple[dict, dict]:
    """Fold every node whose inputs are known: (values, {node name: why not folded})."""
    vals = dict(base)
    types = shapes.get("__types__", {})
    why: dict[str, str] = {}
    makers = {o: name for n, name in zip(s.g.node, s.names) for o in n.output if o}
    for n, name in zip(s.g.node, s.names):
        if n.op_type == "Constant" or n.domain not in _DEFAULT_DOMAINS:
            continue
        if n.op_type in _NEVER_FOLD or not n.input:
            continue
        try:
            if n.op_type in ("Shape", "Size"):
                dims = shapes.get(n.input[0])
                if (dims is None or None in dims) and n.input[0] in vals:
                    dims = list(vals[n.input[0]].shape)  # a folded value (a shape vector)
                if dims is None or any(d is None for d in dims):
                    raise _NotFoldable(f"the shape of {n.input[0]!r} is not known "
                                       f"({dims})")
                if n.op_type == "Size":
                    outs = [np.array(_numel(dims), np.int64)]
                else:
                    r = len(dims)
                    start = int(_attr(n, "start", 0))
                    end = _attr(n, "end", None)
                    start = min(max(start + r if start < 0 else start, 0), r)
                    end = r if end is None else int(end)
                    end = min(max(end + r if end < 0 else end, 0), r)
                    outs = [np.array(dims[start:end], np.int64)]
            elif n.op_type == "CastLike" and n.input[0] in vals:
                to = types.get(n.input[1]) if len(n.input) > 1 else None
                if to is None:
                    raise _NotFoldable(f"the dtype of {n.input[1]!r} is not known")
                outs = [vals[n.input[0]].astype(helper.tensor_dtype_to_np_dtype(to))]
            else:
                missing = [x for x in n.input if x and x not in vals]
                if missing:
                    reason = _unknown_input(s, missing[0], why, makers)
                    if reason:
                        why[name] = reason
                    continue
                ins = [vals[x] if x else None for x in n.input]
                outs = _eval_op(n, ins, s.opset)
        except _NotFoldable as e:
            why[name] = str(e)
            continue
        except Exception as e:  # noqa: BLE001 - a bad constant subgraph
            why[name] = f"{type(e).__name__}: {e}"
            continue
        for o, v in zip(n.output, outs):
            if o:
                vals[o] = np.asarray(v)
    return vals, why


def _unknown_input(s: ImportState, x: str, why: dict, makers: dict) -> str | None:
    """Why input ``x`` of a node is not a constant where a trained initializer is the cause
    (``x`` itself, or what a node that could not be folded for that reason read), else
    None (an activation)."""
    root = x if x in s.init else None
    if root is None and why.get(makers.get(x), "").startswith(_TRAINED):
        return why[makers[x]]
    return None if root is None else f"{_TRAINED} {root!r} (a parameter), not a constant"


_TRAINED = "it depends on the trained initializer"


def _shapes_and_values(s: ImportState, batch: int, base: dict) -> tuple[dict, dict, dict]:
    """Shape inference and folding for ``batch``, alternated until nothing new folds."""
    known: dict = {}
    for _ in range(6):
        shapes = _infer(s, batch, known)
        vals, why = _evaluate(s, base, shapes)
        new = {k: v for k, v in vals.items() if k not in base and v.size <= 4096}
        if set(new) == set(known):
            break
        known = new
    return shapes, vals, why


def fold(s: ImportState) -> None:
    """Stage 3 (when ``s.fold_ran``): constant subgraphs folded (see the module docstring). A
    static export's batch is generalised first (``batch.static_batch``); then the graph is
    evaluated at the two batch sizes of ``_BATCHES`` (``s.runs``): values equal at both are
    ``s.constants``, the others ``s.batchdep`` (for the batch-shapes stage); nodes whose
    outputs are all known join ``s.folded``, as do the dead nodes (folding or not)."""
    if s.fold_ran:
        _fold(s)
    s.folded |= s.dead


def _fold(s: ImportState) -> None:
    base = _const_sources(s)
    b0 = s.input["batch"]
    if isinstance(b0, int):
        shapes, vals, _ = _shapes_and_values(s, b0, base)
        static_batch(s, b0, base, shapes, vals)
    runs = []
    for b in _BATCHES:
        shapes, vals, why = _shapes_and_values(s, b, base)
        runs.append((b, shapes, vals, why))
    (_, s1, v1, why1), (_, _, v2, _) = s.runs = runs
    s.shapes = s1
    for name, a in v1.items():
        b = v2.get(name)
        if b is None:
            continue
        if a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b):
            s.constants[name] = a
        else:
            s.batchdep[name] = (a, b)
    known = set(s.constants) | set(s.batchdep)
    for n, name in zip(s.g.node, s.names):
        outs = [o for o in n.output if o]
        if outs and all(o in known for o in outs):
            s.folded.add(name)
        elif name in why1:
            s.fold_failures[name] = why1[name]

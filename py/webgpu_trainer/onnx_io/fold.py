"""Constant folding (see the package docstring): ONNX shape inference alternated with evaluating
every node whose inputs are known, at two batch sizes; values equal at both are constants, the
others follow the batch (``batch.py``). A part of ``load._Importer``."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .constants import _BATCHES, _DEFAULT_DOMAINS, _FLOAT_TYPES, _NEVER_FOLD
from .errors import _NotFoldable
from .eval_op import _eval_op
from .protos import _attr, _constant_value, _dims
from .shapes import _numel


class _Folder:
    """Shape inference and constant folding of ``_Importer``."""

    def _infer(self, batch: int, known: dict | None = None) -> dict:
        """Shapes (and ``"__types__"``: elem types) of every value for ``batch``: ONNX shape
        inference on a light copy, with the values in ``known`` (folded constants) given as
        initializers so that ops whose output shape depends on them (Reshape, ReduceMean
        with computed axes, ...) are inferred too."""
        g = self.g
        known = known or {}
        m = onnx.ModelProto()
        m.ir_version = max(self.model.ir_version, 4)
        m.opset_import.extend(self.model.opset_import)
        gg = m.graph
        gg.name = g.name
        for n in g.node:
            if not all(o in known for o in n.output if o) or not any(n.output):
                gg.node.append(n)
        for name, v in known.items():
            gg.initializer.append(numpy_helper.from_array(np.asarray(v), name))
        names = set()
        for i in g.input:
            if i.name == self.input["name"]:
                gg.input.append(helper.make_tensor_value_info(
                    i.name, i.type.tensor_type.elem_type, [batch] + self.input["dims"]))
            elif i.name not in self.init:
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
            self.problems.append(f"ONNX shape inference failed: {e}")
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

    def _const_sources(self) -> dict[str, np.ndarray]:
        """Values known without running the model: Constant nodes and the initializers that
        are not data (non-float ones, one-value floats that stay constants: ``scalar_reason``,
        see initializers.py)."""
        vals = {}
        for t in self.g.initializer:
            if t.data_type not in _FLOAT_TYPES or t.name in self.scalar_reason:
                try:
                    vals[t.name] = numpy_helper.to_array(t)
                except Exception:  # noqa: BLE001 - exotic dtypes: judged by role later
                    pass
        for n, name in zip(self.g.node, self.names):
            if n.op_type == "Constant" and n.domain in _DEFAULT_DOMAINS:
                try:
                    vals[n.output[0]] = _constant_value(n)
                except Exception as e:  # noqa: BLE001
                    self.problems.append(f"node {name} (Constant): {e}")
        return vals

    def _evaluate(self, base: dict, shapes: dict) -> tuple[dict, dict]:
        """Fold every node whose inputs are known: (values, {node name: why not folded})."""
        vals = dict(base)
        types = shapes.get("__types__", {})
        why: dict[str, str] = {}
        for n, name in zip(self.g.node, self.names):
            if n.op_type == "Constant" or n.domain not in _DEFAULT_DOMAINS:
                continue
            if n.op_type in _NEVER_FOLD or not n.input:
                continue
            try:
                if n.op_type in ("Shape", "Size"):
                    dims = shapes.get(n.input[0])
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
                    if any(x and x not in vals for x in n.input):
                        continue
                    ins = [vals[x] if x else None for x in n.input]
                    outs = _eval_op(n, ins, self.opset)
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

    def _shapes_and_values(self, batch: int, base: dict) -> tuple[dict, dict, dict]:
        """Shape inference and folding for ``batch``, alternated until nothing new folds."""
        known: dict = {}
        for _ in range(6):
            shapes = self._infer(batch, known)
            vals, why = self._evaluate(base, shapes)
            new = {k: v for k, v in vals.items() if k not in base and v.size <= 4096}
            if set(new) == set(known):
                break
            known = new
        return shapes, vals, why

    def _fold(self) -> None:
        """Fold constant subgraphs (see the module docstring)."""
        base = self._const_sources()
        b0 = self.input["batch"]
        if isinstance(b0, int):
            self._generalise_batch(b0, base)
        runs = []
        for b in _BATCHES:
            shapes, vals, why = self._shapes_and_values(b, base)
            runs.append((b, shapes, vals, why))
        (b1, s1, v1, why1), (b2, s2, v2, _) = runs
        self.shapes = s1
        batchdep: dict[str, tuple] = {}
        for name, a in v1.items():
            b = v2.get(name)
            if b is None:
                continue
            if a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b):
                self.constants[name] = a
            else:
                batchdep[name] = (a, b)
        known = set(self.constants) | set(batchdep)
        for n, name in zip(self.g.node, self.names):
            outs = [o for o in n.output if o]
            if outs and all(o in known for o in outs):
                self.folded.add(name)
            elif name in why1:
                self.fold_failures[name] = why1[name]
        # Inputs of the remaining nodes that depend on the batch size.
        for n, name in zip(self.g.node, self.names):
            if name in self.folded or name in self.dead:
                continue
            for k, x in enumerate(n.input):
                if x not in batchdep:
                    continue
                if n.op_type == "Reshape" and k == 1:
                    self._resolve_reshape(n, name, x, batchdep[x], runs)
                else:
                    self.reported.add(name)
                    self.problems.append(
                        f"node {name} ({n.op_type}) input {k} {x!r} depends on the batch size "
                        f"(it is {batchdep[x][0].tolist()} for a batch of {b1}): only Reshape "
                        "shapes may follow the batch")
        # The output must be per-sample class scores.
        out = self.g.output[0].name if self.g.output else None
        d1, d2 = s1.get(out), s2.get(out)
        if out is not None and (d1 is None or None in d1):
            static = getattr(self, "static_out", None)
            if static and None not in static:
                self.problems.append(
                    f"output {out!r} has shape {static} for the exported batch size "
                    f"{self.input['batch']} but does not follow the batch size (unknown for a "
                    f"batch of {b1}): a batch size is fixed inside the graph; re-export with a "
                    "dynamic batch axis (dynamic_axes={'input': {0: 'N'}, 'output': {0: 'N'}})")
            elif not self.problems:
                self.problems.append(f"the shape of output {out!r} cannot be inferred for a "
                                     f"batch of {b1}")
        elif d1 is not None:
            if len(d1) != 2 or d1[1] < 10:
                self.problems.append(f"output {out!r} has shape {['N'] + list(d1[1:])}: "
                                     "training on MNIST needs [N, C] class scores, C >= 10")
            elif d1[0] != b1 or (d2 and d2[0] != b2):
                self.problems.append(
                    f"output {out!r} does not follow the batch size (shape {d1} for a batch of "
                    f"{b1}): a batch size is fixed inside the graph; re-export with a dynamic "
                    "batch axis (dynamic_axes={'input': {0: 'N'}, 'output': {0: 'N'}})")

"""Shapes that hold for any batch size: a batch baked into a static export's Reshape shapes
becomes -1 (or 0 = copy), and a Reshape shape that follows the batch becomes one constant.
A part of ``load._Importer``."""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from .protos import _attr
from .shapes import _int_list, _reshape_dims


class _BatchShapes:
    """The batch-size generalisation of ``_Importer``'s folder."""

    def _depends_on_input(self) -> set:
        dep = {self.input["name"]}
        for n in self.g.node:
            if n.op_type not in ("Shape", "Size") and any(x in dep for x in n.input):
                dep.update(o for o in n.output if o)
        return dep

    def _add_const_init(self, base_name: str, arr: np.ndarray, base: dict) -> str:
        """A new int64 initializer in the working model (and in ``base``); its name."""
        taken = set(self.init) | {o for n in self.g.node for o in n.output}
        name, k = f"{base_name}:any_batch", 1
        while name in taken:
            k += 1
            name = f"{base_name}:any_batch{k}"
        t = numpy_helper.from_array(np.asarray(arr, np.int64), name)
        self.g.initializer.append(t)
        self.init[name] = t
        base[name] = np.asarray(arr, np.int64)
        return name

    def _generalise_batch(self, b0: int, base: dict) -> None:
        """A static export bakes its batch size into Reshape shapes ([4, -1]): make them hold
        for any batch (the batch position becomes -1, or 0 = copy when -1 is taken)."""
        shapes, vals, _ = self._shapes_and_values(b0, base)
        out = self.g.output[0].name if self.g.output else None
        self.static_out = shapes.get(out)
        dep = self._depends_on_input()
        changed = []
        for n, name in zip(self.g.node, self.names):
            if n.op_type != "Reshape" or len(n.input) < 2 or n.input[0] not in dep:
                continue
            shp, dims = vals.get(n.input[1]), shapes.get(n.input[0])
            if shp is None or shp.ndim != 1 or not len(shp) or not dims or dims[0] != b0:
                continue
            if int(shp[0]) != b0:
                continue
            out = shapes.get(n.output[0])
            if out and None not in out and out[0] == b0 and len(out) == len(shp):
                new = np.array([-1] + list(out[1:]), np.int64)  # the other dims as inferred
            elif -1 not in _int_list(shp):
                new = shp.astype(np.int64).copy()
                new[0] = -1
            elif int(_attr(n, "allowzero", 0)):
                continue
            else:
                new = shp.astype(np.int64).copy()
                new[0] = 0  # copy the batch dim (allowzero is 0)
            n.input[1] = self._add_const_init(n.input[1], new, base)
            changed.append(name)
        self.notes.append(f"the model was exported with a fixed batch size of {b0}; the "
                          "trainer uses it with any batch size" +
                          (f" (Reshape nodes {changed} keep the batch dimension)"
                           if changed else ""))

    def _resolve_reshape(self, n, name, x, pair, runs) -> None:
        (b1, s1, _, _), (b2, s2, _, _) = runs
        a, b = (np.asarray(v).astype(np.int64) for v in pair)
        d1, d2 = s1.get(n.input[0]), s2.get(n.input[0])
        allowzero = int(self.attr_overrides.get(name, {}).get(
            "allowzero", _attr(n, "allowzero", 0)))
        fail = (f"node {name} (Reshape): its shape {a.tolist()} (batch {b1}) / {b.tolist()} "
                f"(batch {b2}) follows the batch in a way that cannot be written as a constant")
        if a.ndim != 1 or a.shape != b.shape or not d1 or not d2 or None in d1 or None in d2:
            self.problems.append(fail)
            self.reported.add(name)
            return
        new = a.copy()
        fixed = [int(v) for v, w in zip(a, b) if v == w]
        use_zero = False
        for i in range(len(a)):
            if a[i] == b[i]:
                continue
            if (i < len(d1) and d1[i] == b1 and d2[i] == b2 and a[i] == b1 and b[i] == b2
                    and not (allowzero and 0 in fixed)):
                new[i], use_zero = 0, True
            elif -1 not in fixed and -1 not in _int_list(new):
                new[i] = -1
            else:
                self.problems.append(fail)
                self.reported.add(name)
                return
        az = 0 if use_zero else allowzero
        if (_reshape_dims(d1, new, az) != _reshape_dims(d1, a, allowzero)
                or _reshape_dims(d2, new, az) != _reshape_dims(d2, b, allowzero)
                or _reshape_dims(d1, new, az) is None):
            self.problems.append(fail)
            self.reported.add(name)
            return
        if use_zero and allowzero:
            self.attr_overrides.setdefault(name, {})["allowzero"] = 0
        cname = x if x not in self.constants else f"{x}@{name}"
        prev = self.constants.get(cname)
        if prev is not None and not np.array_equal(prev, new):
            cname = f"{x}@{name}"
        self.constants[cname] = new
        self.const_overrides[(name, 1)] = cname

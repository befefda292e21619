"""The bundle: the remaining nodes, the constants inlined as JSON, the float initializers as
tensors (params and BatchNormalization buffers, Identity copies and running-statistic copies
split off) packed into the aligned little-endian float32 weight blob. A part of
``load._Importer``."""
from __future__ import annotations

import os

import numpy as np
from onnx import TensorProto, numpy_helper

from .constants import (_CONST_SLOTS, _DEFAULT_DOMAINS, _FLOAT_TYPES, ALIGN, FORMAT,
                        MAX_INLINE_ELEMENTS)
from .protos import _type_name, _value_info


def _small(arr: np.ndarray) -> dict:
    """A constant of the bundle: {"dtype", "shape", "values"}."""
    arr = np.asarray(arr)
    if arr.dtype.kind == "f" and arr.dtype != np.float32:
        arr = arr.astype(np.float32)
    return {"dtype": arr.dtype.name, "shape": list(arr.shape), "values": arr.reshape(-1).tolist()}



class _Bundler:
    """The graph dict and the weight blob of ``_Importer``."""

    def _inputs_of(self, n, name) -> list[str]:
        return [self.const_overrides.get((name, k), x) for k, x in enumerate(n.input)]

    def _check_data_dtypes(self) -> None:
        """Every initializer a node uses as data (not a shape / axes / index slot) whose dtype
        the trainer cannot use, as a problem (``_check_dtype``), for an import that stops
        before the bundle (an input that is not MNIST-shaped): every problem at once."""
        uses: dict[str, list] = {}
        for n, name in zip(self.g.node, self.names):
            for k, x in enumerate(n.input):
                if x in self.init and k not in _CONST_SLOTS.get(n.op_type, ()):
                    uses.setdefault(x, []).append((n, name, k))
        for x, u in uses.items():
            t = self.init[x]
            if t.data_type not in _FLOAT_TYPES and (len(t.dims) > 0
                                                   or "FLOAT" in _type_name(t.data_type)):
                self._check_dtype(t, x, u)

    def _build(self, tensors_ok: bool) -> tuple[dict, bytes]:
        g = self.g
        nodes = []
        if self.input is None:  # no bundle; still report the initializers' dtypes
            self._check_data_dtypes()
            return {}, b""
        graph_outputs = {o.name for o in g.output}
        # Remaining nodes, with their (possibly re-pointed) inputs.
        remaining = [(n, name) for n, name in zip(g.node, self.names)
                     if name not in self.folded and not (n.op_type == "Constant"
                                                         and n.domain in _DEFAULT_DOMAINS)]
        # Identity of a float initializer: a tensor of its own (exporters deduplicate equal
        # initializers into Identity nodes; each was a separate parameter in the model).
        derived: dict[str, dict] = {}  # new tensor name -> source
        keep = []
        for n, name in remaining:
            ins = self._inputs_of(n, name)
            src = ins[0] if ins else ""
            if (n.op_type == "Identity" and (src in self.init or src in derived)
                    and (src in derived or self.init[src].data_type in _FLOAT_TYPES)
                    and src not in self.constants and n.output[0] not in graph_outputs):
                derived[n.output[0]] = {"identity_of": src}
                continue
            keep.append((n, name, ins))
        # Uses of every value by the remaining nodes.
        uses: dict[str, list] = {}
        for n, name, ins in keep:
            for k, x in enumerate(ins):
                if x:
                    uses.setdefault(x, []).append((n, name, k))
        # Constants used by the remaining nodes.
        constants: dict[str, dict] = {}
        for x in uses:
            if x in self.constants:
                arr = self.constants[x]
                if arr.size > MAX_INLINE_ELEMENTS:
                    self.problems.append(
                        f"constant {x!r} has {arr.size:,} values, too many to inline into the "
                        "model description: store it as an initializer")
                    continue
                constants[x] = _small(arr)
        # Tensors: float initializers (and Identity copies) used as data.
        order: list[tuple[str, str]] = []  # (tensor name, initializer holding the values)
        for t in g.initializer:
            if t.name in uses and t.name not in constants:
                order.append((t.name, t.name))
            for new, src in derived.items():
                root = src["identity_of"]
                while root in derived:
                    root = derived[root]["identity_of"]
                if root == t.name and new in uses:
                    order.append((new, t.name))
        roles: dict[str, str] = {}
        extra: dict[str, dict] = {}  # tensor name -> "source" of the bundle
        final_order: list[tuple[str, str]] = []
        rewire: dict[tuple, str] = {}
        taken = set(self.init) | {o for n in g.node for o in n.output}
        for tname, src in order:
            u = uses[tname]
            stat = [(n, name, k) for n, name, k in u
                    if n.op_type == "BatchNormalization" and k in (3, 4)]
            other = [(n, name, k) for n, name, k in u if (n, name, k) not in stat]
            if tname in derived:
                extra[tname] = derived[tname]
            if other or not stat:
                roles[tname] = "param"
                final_order.append((tname, src))
                copies = stat
            else:
                roles[tname] = "buffer"
                final_order.append((tname, src))
                copies = stat[1:]
            for n, name, k in copies:  # a running statistic must be a tensor of its own
                stat = "running_mean" if k == 3 else "running_var"
                scale = n.input[1] if len(n.input) > 1 else ""
                base = (f"{scale[:-len('.weight')]}.{stat}" if scale.endswith(".weight")
                        else f"{name}.{stat}")  # torch's name when the scale has one
                new, i = base, 1
                while new in taken:
                    i += 1
                    new = f"{base}{i}"
                taken.add(new)
                roles[new] = "buffer"
                extra[new] = {"copy_of": tname, "node": name, "input": k}
                rewire[(name, k)] = new
                final_order.append((new, src))
                self.notes.append(f"initializer {tname!r} is shared by {len(u)} inputs; node "
                                  f"{name} input {k} (a running statistic) gets its own copy "
                                  f"{new!r}")
            params = [x for x in other if roles[tname] == "param"]
            if len(params) > 1:
                self.notes.append(f"initializer {tname!r} is used by {len(params)} nodes: "
                                  "trained as one shared (tied) parameter")
        if derived:
            self.notes.append("the exporter deduplicated equal initializers into Identity "
                              f"nodes; they are separate tensors again: {sorted(derived)}")
        # dtype checks and the weight blob.
        tensors, chunks, offset = [], [], 0
        converted = []
        for tname, src in final_order:
            t = self.init[src]
            if not self._check_dtype(t, tname, uses.get(tname, [])):
                continue
            if not tensors_ok:
                continue
            arr = numpy_helper.to_array(t)
            if t.data_type != TensorProto.FLOAT:
                converted.append(f"{tname!r} ({_type_name(t.data_type)}"
                                 + (f", a copy of {src!r})" if tname != src else ")"))
            data = np.ascontiguousarray(arr, dtype="<f4").tobytes()
            pad = (-offset) % ALIGN
            if pad:
                chunks.append(b"\0" * pad)
                offset += pad
            spec = {"name": tname, "shape": list(arr.shape), "dtype": "float32",
                    "offset": offset, "nbytes": len(data), "role": roles[tname]}
            if tname in extra:
                spec["source"] = extra[tname]
            tensors.append(spec)
            chunks.append(data)
            offset += len(data)
        if converted:
            self.notes.append("initializers converted to float32: " + ", ".join(converted))
        tensor_names = {t for t, _ in final_order}
        # Non-float initializers used as data (int8 weights, float8, int tables).
        for x, u in uses.items():
            t = self.init.get(x)
            if t is None or t.data_type in _FLOAT_TYPES or x in tensor_names:
                continue
            data_uses = [(n, nm, k) for n, nm, k in u if k not in _CONST_SLOTS.get(n.op_type, ())]
            if data_uses and (len(t.dims) > 0 or "FLOAT" in _type_name(t.data_type)
                              or t.data_type in (TensorProto.INT8, TensorProto.UINT8)):
                self._check_dtype(t, x, data_uses)
                constants.pop(x, None)
        # BatchNormalization statistics and affine parameters are tensors of the weight blob.
        for n, name, ins in keep:
            if n.op_type == "BatchNormalization":
                for k in (1, 2, 3, 4):
                    if len(ins) > k and ins[k] and ins[k] not in tensor_names \
                            and ins[k] not in derived:
                        self.problems.append(
                            f"node {name} (BatchNormalization) input {k} {ins[k]!r} must be a "
                            "float initializer (it is a constant or computed)")
        # Nodes.
        for n, name, ins in keep:
            ins = [rewire.get((name, k), x) for k, x in enumerate(ins)]
            nd = self._node(n, name, ins, constants, tensor_names)
            if nd is not None:
                nodes.append(nd)
        inp = self.input
        outputs = []
        for o in g.output:
            vi = _value_info(o)
            d = self.shapes.get(o.name)
            if d and all(isinstance(v, int) for v in d[1:]):
                vi["shape"] = [inp["symbol"]] + list(d[1:])
            elif vi["shape"]:
                vi["shape"] = [inp["symbol"]] + list(vi["shape"][1:])
            outputs.append(vi)
        if len(outputs) > 1:
            self.notes.append(f"the model has {len(outputs)} outputs; the trainer uses the "
                              f"first, {outputs[0]['name']!r}")
        graph = {
            "format": FORMAT,
            "name": os.path.splitext(os.path.basename(self.path))[0],
            "opset": self.opset,
            "producer": f"{self.model.producer_name} {self.model.producer_version}".strip(),
            "doc": self.model.doc_string,
            "inputs": [{"name": inp["name"], "shape": [inp["symbol"]] + inp["dims"],
                        "dtype": "float32"}],
            "outputs": outputs,
            "tensors": tensors,
            "constants": constants,
            "nodes": nodes,
            "notes": self.notes,
            "frozen": self._frozen_list(tensor_names | {src for _, src in final_order},
                                        constants),
            "alignment": ALIGN,
            "weights_nbytes": offset,
        }
        return graph, b"".join(chunks)

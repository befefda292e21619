"""The import's seventh stage, attributes (:func:`attributes`): each bundle node with ONNX's
attribute defaults filled by opset, constant inputs mirrored into the attributes older opsets
had, ``auto_pad`` made explicit, the input / output count checked against the op's schema."""
from __future__ import annotations

import onnx

from .constants import _MIRROR, _MUST_BE_CONST, _REDUCE
from .protos import _json_attr
from .state import ImportState


def attributes(s: ImportState) -> None:
    """Stage 7: ``s.nodes``, one bundle node per node the weights stage kept (``s.keep``),
    its inputs re-pointed at running-statistic copies (``s.rewire``); a node that does not
    fit its op's schema is a problem and left out."""
    view = _Attrs(s)
    for n, name, ins in s.keep:
        ins = [s.rewire.get((name, k), x) for k, x in enumerate(ins)]
        nd = view._node(n, name, ins, s.bundle_constants, s.tensor_names)
        if nd is not None:
            s.nodes.append(nd)


class _Attrs:
    """The attribute stage's view of one import's state: ``self.X`` is the state's ``X``
    (``_node`` and ``_fill_defaults`` read ``self.opset``, ``self.problems``, ...)."""

    def __init__(self, s: ImportState):
        self.s = s

    def __getattr__(self, name: str):
        return getattr(self.s, name)

    def _node(self, n, name, ins, constants, tensor_names) -> dict | None:
        """One bundle node: attributes with defaults, constant inputs mirrored to attrs;
        None (and a problem) when its inputs / outputs do not fit the op's schema."""
        try:
            schema = onnx.defs.get_schema(n.op_type, self.opset, "")
        except Exception:  # noqa: BLE001 - unknown ops are reported by _check_ops
            schema = None
        if schema is not None and not (schema.min_input <= len(ins) <= schema.max_input
                                       and schema.min_output <= len(n.output)
                                       <= schema.max_output):
            self.problems.append(f"node {name} ({n.op_type}) has {len(ins)} inputs and "
                                 f"{len(n.output)} outputs, which does not fit the "
                                 f"{n.op_type}-{schema.since_version} schema")
            return None
        attrs = {a.name: _json_attr(a) for a in n.attribute}
        attrs.update(self.attr_overrides.get(name, {}))
        op = n.op_type
        if op == "Cast":
            op, attrs = "Identity", {}
            self.notes.append(f"node {name} (Cast to a float type) runs as Identity in float32")
        for k in _MUST_BE_CONST.get(op, ()):
            if len(ins) > k and ins[k] and ins[k] not in constants \
                    and name not in self.reported and self.fold_ran:
                self.problems.append(f"node {name} ({op}) input {k} {ins[k]!r} must be a "
                                     "constant but is computed at run time")
        for k, key in _MIRROR.get(op, {}).items():
            if len(ins) > k and ins[k] in constants:
                vals = constants[ins[k]]["values"]
                if key in ("min", "max", "ratio", "value"):
                    if vals:
                        attrs[key] = float(vals[0])
                elif key == "training_mode":
                    if vals:
                        attrs[key] = int(bool(vals[0]))
                else:
                    attrs[key] = [int(v) for v in vals]
        self._fill_defaults(op, attrs, n, name, ins)
        return {"name": name, "op_type": op, "inputs": ins, "outputs": list(n.output),
                "attrs": attrs}

    def _shape(self, x) -> list | None:
        return self.shapes.get(x)

    def _fill_defaults(self, op: str, attrs: dict, n, name: str, ins: list) -> None:
        """ONNX defaults for the op's attributes (by the model's opset), in place."""
        opset = self.opset
        if op in ("Conv", "MaxPool", "AveragePool"):
            if "kernel_shape" not in attrs and op == "Conv" and len(ins) > 1:
                w = self._shape(ins[1]) or (list(self.init[ins[1]].dims)
                                           if ins[1] in self.init else None)
                if w:
                    attrs["kernel_shape"] = list(w[2:])
            k = len(attrs.get("kernel_shape", [0, 0]))
            attrs.setdefault("pads", [0] * (2 * k))
            attrs.setdefault("strides", [1] * k)
            if op != "AveragePool" or opset >= 19:
                attrs.setdefault("dilations", [1] * k)
            auto = attrs.get("auto_pad", "NOTSET")
            if auto in ("SAME_UPPER", "SAME_LOWER", "VALID"):
                x = self._shape(ins[0])
                if auto == "VALID":
                    attrs["pads"] = [0] * (2 * k)
                elif x and len(x) == k + 2 and all(isinstance(d, int) for d in x[2:]):
                    lo, hi = [], []
                    for i in range(k):
                        s, d = attrs["strides"][i], attrs.get("dilations", [1] * k)[i]
                        size = x[2 + i]
                        total = max((-(-size // s) - 1) * s + (attrs["kernel_shape"][i] - 1)
                                    * d + 1 - size, 0)
                        small, big = total // 2, total - total // 2
                        lo.append(small if auto == "SAME_UPPER" else big)
                        hi.append(big if auto == "SAME_UPPER" else small)
                    attrs["pads"] = lo + hi
                else:
                    self.problems.append(f"node {name} ({op}): auto_pad {auto} needs the "
                                         "input's spatial size, which is unknown")
            attrs["auto_pad"] = "NOTSET"
            if op == "Conv":
                attrs.setdefault("group", 1)
            else:
                attrs.setdefault("ceil_mode", 0)
                if op == "MaxPool":
                    attrs.setdefault("storage_order", 0)
                else:
                    attrs.setdefault("count_include_pad", 0)
        elif op == "Gemm":
            for key, val in (("alpha", 1.0), ("beta", 1.0), ("transA", 0), ("transB", 0)):
                attrs.setdefault(key, val)
        elif op == "BatchNormalization":
            attrs.setdefault("epsilon", 1e-5)
            attrs.setdefault("momentum", 0.9)
            attrs.pop("spatial", None)
            attrs.pop("is_test", None)
            if opset < 14:
                outs = [o for o in n.output[1:] if o]
                attrs["training_mode"] = int(bool(outs))
            attrs.setdefault("training_mode", 0)
        elif op == "Flatten":
            attrs.setdefault("axis", 1)
        elif op in ("LogSoftmax", "Softmax"):
            if opset < 13:
                x = self._shape(ins[0])
                if x is not None and len(x) > 2 and attrs.get("axis", 1) % len(x) != len(x) - 1:
                    self.problems.append(f"node {name} ({op}): opset {opset} {op} flattens "
                                         f"its {len(x)}-D input; re-export with opset >= 13")
                attrs.setdefault("axis", 1)
            attrs.setdefault("axis", -1)
        elif op == "Dropout":
            attrs.setdefault("ratio", 0.5)
            attrs.setdefault("training_mode", 0)
        elif op == "Reshape":
            if opset >= 14:
                attrs.setdefault("allowzero", 0)
        elif op == "LeakyRelu":
            attrs.setdefault("alpha", 0.01)
        elif op in ("Elu", "Celu"):
            attrs.setdefault("alpha", 1.0)
        elif op == "Selu":
            attrs.setdefault("alpha", 1.67326319217681884765625)
            attrs.setdefault("gamma", 1.05070102214813232421875)
        elif op == "HardSigmoid":
            attrs.setdefault("alpha", 0.2)
            attrs.setdefault("beta", 0.5)
        elif op == "Gelu":
            attrs.setdefault("approximate", "none")
        elif op in _REDUCE:
            attrs.setdefault("keepdims", 1)
            attrs.setdefault("noop_with_empty_axes", 0)
        elif op == "LayerNormalization":
            attrs.setdefault("axis", -1)
            attrs.setdefault("epsilon", 1e-5)
            attrs.setdefault("stash_type", 1)
        elif op == "Transpose":
            x = self._shape(ins[0])
            if "perm" not in attrs and x is not None:
                attrs["perm"] = list(range(len(x)))[::-1]
        elif op == "Split":
            attrs.setdefault("axis", 0)
            x = self._shape(ins[0])
            if "split" not in attrs and x is not None:
                ax = attrs["axis"] % len(x)
                parts = int(attrs.get("num_outputs", len(n.output)))
                if isinstance(x[ax], int) and parts:
                    size = -(-x[ax] // parts)
                    attrs["split"] = [min(size, x[ax] - i * size) for i in range(parts)]
        elif op == "Pad":
            attrs.setdefault("mode", "constant")
            attrs.setdefault("value", 0.0)
        elif op == "Concat" and "axis" not in attrs:
            self.problems.append(f"node {name} (Concat) has no axis attribute")

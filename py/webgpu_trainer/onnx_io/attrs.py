"""The import's seventh stage, attributes (:func:`attributes`): each bundle node with ONNX's
attribute defaults filled by opset, constant inputs mirrored into the attributes older opsets
had, ``auto_pad`` made explicit, the input / output count checked against the op's schema."""
from __future__ import annotations

import onnx

from ..engine.ops import fill_defaults
from .constants import _MIRROR, _MUST_BE_CONST
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
                    and name not in self.reported and self.fold_ran \
                    and not _token_indices(self.s, op, k, ins[k]):
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
        """ONNX defaults for the op's attributes (by the model's opset), in place: the op's
        card (``engine/ops``: ATTRS, then ``normalize``); its problems are reported."""
        node = {"name": name, "op_type": op, "inputs": ins, "outputs": list(n.output),
                "attrs": attrs}
        self.problems += fill_defaults(node, self.opset, self._input_shape)

    def _input_shape(self, x) -> list | None:
        """An input's shape: inferred, else an initializer's dims (a Conv weight), else None."""
        return self._shape(x) or (list(self.init[x].dims) if x in self.init else None)


def _token_indices(s: ImportState, op: str, k: int, name: str) -> bool:
    """Whether input ``k`` of an ``op`` node is the model's integer input read as the indices
    of an embedding lookup (Gather(table, token ids)), which may be computed at run time."""
    return op == "Gather" and k == 1 and s.input is not None \
        and s.input.get("dtype") == "int64" and name == s.input["name"]

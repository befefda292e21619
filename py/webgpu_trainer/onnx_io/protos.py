"""Reading protobuf fields: ONNX dtypes by name, ValueInfo dims, attributes (as JSON values or
raw), the default-domain opset, unique node names, Constant node values."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .constants import _DEFAULT_DOMAINS


def _dtype_name(elem_type: int) -> str:
    """ONNX elem_type -> numpy dtype name ("float32", "int64", "bool", ...)."""
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:  # noqa: BLE001 - unknown / exotic types
        try:
            return TensorProto.DataType.Name(elem_type).lower()
        except ValueError:
            return f"type{elem_type}"


def _type_name(elem_type: int) -> str:
    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"unknown type {elem_type}"


def _dims(vi: onnx.ValueInfoProto) -> list | None:
    """Declared dims of a ValueInfo: ints, dim_param strings or None; None when no shape."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    out: list[Any] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            out.append(d.dim_param)
        else:
            out.append(None)
    return out


def _value_info(vi: onnx.ValueInfoProto) -> dict:
    """ValueInfo -> {"name", "shape" (ints, dim_param strings, or None), "dtype"}."""
    return {"name": vi.name, "shape": _dims(vi),
            "dtype": _dtype_name(vi.type.tensor_type.elem_type)}


def _json_attr(a: onnx.AttributeProto) -> Any:
    """AttributeProto -> JSON-serialisable value (bytes decoded, tensors as lists)."""
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, TensorProto):
        return numpy_helper.to_array(v).tolist()
    if isinstance(v, list):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    if isinstance(v, (onnx.GraphProto, onnx.SparseTensorProto, onnx.TypeProto)):
        return str(type(v).__name__)
    return v


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _opset(model: onnx.ModelProto) -> int:
    """Opset version of the default ONNX domain (0 when absent)."""
    for o in model.opset_import:
        if o.domain in _DEFAULT_DOMAINS:
            return int(o.version)
    return 0


def _node_names(g: onnx.GraphProto) -> list[str]:
    """A unique name per node (the node's own, else ``<op>_<index>``; ``#k`` on repeats)."""
    seen: dict[str, int] = {}
    out = []
    for i, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{i}"
        if name in seen:
            seen[name] += 1
            name = f"{name}#{seen[name]}"
        else:
            seen[name] = 0
        out.append(name)
    return out


def _constant_value(node: onnx.NodeProto) -> np.ndarray:
    """Value of a Constant node; ValueError naming the unsupported form."""
    for a in node.attribute:
        if a.name == "value":
            return numpy_helper.to_array(a.t)
        if a.name == "value_float":
            return np.array(a.f, dtype=np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), dtype=np.float32)
        if a.name == "value_int":
            return np.array(a.i, dtype=np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), dtype=np.int64)
        if a.name in ("sparse_value", "value_string", "value_strings"):
            raise ValueError(f"a {a.name} (not supported)")
    raise ValueError("no value")

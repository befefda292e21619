"""ONNX <-> the engine's model description ("bundle"), and export of trained weights.

CPython only (server / CLI): needs numpy and onnx; the browser engine never imports this.
Contracts: docs/ARCHITECTURE.md, "Model description (bundle)" and "Trained weights -> .onnx".

- :func:`load_bundle` turns an ``.onnx`` file into ``(graph, weights)``: a JSON-serialisable
  graph dict and a little-endian float32 blob holding every float initializer, each at an
  offset that is a multiple of :data:`ALIGN` (256) bytes.
- :func:`export_onnx` writes a blob of that layout back into the original model, converted to
  an inference graph (BatchNormalization ``training_mode=0`` with one output, no Dropout).
- :func:`model_summary` counts parameters for the model list.
"""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["ALIGN", "FORMAT", "SUPPORTED_OPS", "OnnxImportError", "load_bundle",
           "export_onnx", "model_summary"]

FORMAT = "webgpu-trainer/graph@1"
ALIGN = 256  # byte alignment of every tensor in the weight blob (GPU-friendly offsets)
SUPPORTED_OPS = frozenset({
    "Conv", "Relu", "BatchNormalization", "Flatten", "Gemm", "Dropout", "LogSoftmax",
    "Softmax", "Identity", "Reshape", "MaxPool", "Add", "Constant",
})
_FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
_DEFAULT_DOMAINS = ("", "ai.onnx")


class OnnxImportError(ValueError):
    """An ONNX file that cannot become a bundle; the message names the file and the problem."""


# ----------------------------------------------------------------------------- helpers


def _dtype_name(elem_type: int) -> str:
    """ONNX elem_type -> numpy dtype name ("float32", "int64", "bool", ...)."""
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:  # noqa: BLE001 - unknown / exotic types
        return TensorProto.DataType.Name(elem_type).lower()


def _value_info(vi: onnx.ValueInfoProto) -> dict:
    """ValueInfo -> {"name", "shape" (ints, dim_param strings, or None), "dtype"}."""
    tt = vi.type.tensor_type
    shape: list[Any] | None = None
    if tt.HasField("shape"):
        shape = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                shape.append(int(d.dim_value))
            elif d.HasField("dim_param"):
                shape.append(d.dim_param)
            else:
                shape.append(None)
    return {"name": vi.name, "shape": shape, "dtype": _dtype_name(tt.elem_type)}


def _json_attr(a: onnx.AttributeProto) -> Any:
    """AttributeProto -> JSON-serialisable value (bytes decoded, tensors as lists)."""
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, TensorProto):
        return numpy_helper.to_array(v).tolist()
    if isinstance(v, list):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    return v


def _opset(model: onnx.ModelProto) -> int:
    """Opset version of the default ONNX domain (0 when absent)."""
    for o in model.opset_import:
        if o.domain in _DEFAULT_DOMAINS:
            return int(o.version)
    return 0


def _fill_defaults(op: str, attrs: dict, opset: int, node: onnx.NodeProto,
                   shapes: dict[str, list[int]]) -> None:
    """Fill ONNX default attribute values in place for the ops the engine supports."""
    if op in ("Conv", "MaxPool"):
        if "kernel_shape" not in attrs and len(node.input) > 1 and node.input[1] in shapes:
            attrs["kernel_shape"] = list(shapes[node.input[1]][2:])
        k = len(attrs.get("kernel_shape", [0, 0]))
        attrs.setdefault("auto_pad", "NOTSET")
        attrs.setdefault("pads", [0] * (2 * k))
        attrs.setdefault("strides", [1] * k)
        attrs.setdefault("dilations", [1] * k)
        if op == "Conv":
            attrs.setdefault("group", 1)
        else:
            attrs.setdefault("ceil_mode", 0)
            attrs.setdefault("storage_order", 0)
    elif op == "Gemm":
        for key, val in (("alpha", 1.0), ("beta", 1.0), ("transA", 0), ("transB", 0)):
            attrs.setdefault(key, val)
    elif op == "BatchNormalization":
        attrs.setdefault("epsilon", 1e-5)
        attrs.setdefault("momentum", 0.9)
        attrs.pop("spatial", None)
        attrs.setdefault("training_mode", int(opset < 14 and len(node.output) > 1))
    elif op == "Flatten":
        attrs.setdefault("axis", 1)
    elif op in ("LogSoftmax", "Softmax"):
        attrs.setdefault("axis", -1 if opset >= 13 else 1)
    elif op == "Dropout" and opset < 12:
        attrs.setdefault("ratio", 0.5)
    elif op == "Reshape" and opset >= 14:
        attrs.setdefault("allowzero", 0)


def _constant_value(node: onnx.NodeProto, where: str) -> np.ndarray:
    """Value of a Constant node as a numpy array; OnnxImportError for unsupported forms."""
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
    raise OnnxImportError(f"{where}: Constant node {node.name!r} has an unsupported value form")


def _load_model(path: str) -> onnx.ModelProto:
    """onnx.load with every failure mode turned into OnnxImportError (incl. external data)."""
    if not os.path.isfile(path):
        raise OnnxImportError(f"{path}: no such file")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:  # noqa: BLE001 - DecodeError and friends
        raise OnnxImportError(f"{path}: not a valid ONNX file (truncated or not ONNX): {e}")
    if model.ir_version <= 0 or not model.HasField("graph") or not model.opset_import:
        raise OnnxImportError(f"{path}: not a valid ONNX file (no ir_version, graph or opset)")
    base = os.path.dirname(os.path.abspath(path))
    missing = []
    for t in model.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            loc = {e.key: e.value for e in t.external_data}.get("location", "")
            if not loc or not os.path.isfile(os.path.join(base, loc)):
                missing.append(f"{t.name} -> {loc or '(no location)'}")
    if missing:
        raise OnnxImportError(f"{path}: external data missing for: {', '.join(missing)}")
    if any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer):
        try:
            onnx.external_data_helper.load_external_data_for_model(model, base)
        except Exception as e:  # noqa: BLE001
            raise OnnxImportError(f"{path}: external data could not be read: {e}")
    return model


def _check_ops(model: onnx.ModelProto, path: str) -> None:
    """Raise OnnxImportError listing every node whose op the engine does not support."""
    opsets = {o.domain: o.version for o in model.opset_import}
    bad = []
    for i, n in enumerate(model.graph.node):
        if n.domain not in _DEFAULT_DOMAINS or n.op_type not in SUPPORTED_OPS:
            dom, ver = n.domain or "ai.onnx", opsets.get(n.domain, "?")
            bad.append(f"{n.name or f'#{i}'} ({n.op_type}, {dom} opset {ver})")
    if bad:
        raise OnnxImportError(
            f"{path}: unsupported op(s): {'; '.join(bad)}; supported: "
            f"{', '.join(sorted(SUPPORTED_OPS - {'Constant'}))}")


# ----------------------------------------------------------------------------- load


def load_bundle(path: str | os.PathLike) -> tuple[dict, bytes]:
    """Read an ``.onnx`` file into the engine's model description.

    Returns ``(graph, weights)``: ``graph`` is a JSON-serialisable dict (format
    ``webgpu-trainer/graph@1``: name, opset, producer, inputs, outputs, tensors, constants,
    nodes, notes, alignment, weights_nbytes); ``weights`` is ``bytes`` holding every float
    initializer as little-endian float32 at ``tensor["offset"]`` (a multiple of 256), of
    length ``graph["weights_nbytes"]`` (end of the last tensor). float16/float64/bfloat16
    initializers are converted to float32 with a note in ``graph["notes"]``.

    Raises ``OnnxImportError`` (a ValueError) naming the file for: a missing, truncated or
    non-ONNX file; unsupported ops (every offending node listed with op_type and opset);
    missing external data; a Constant with an unsupported value form.
    """
    path = os.fspath(path)
    model = _load_model(path)
    _check_ops(model, path)
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # noqa: BLE001
        raise OnnxImportError(f"{path}: ONNX checker rejected the model: {e}")
    g = model.graph
    opset = _opset(model)
    notes: list[str] = []

    # Initializers: float -> tensors (blob), others -> constants.
    init_names = {t.name for t in g.initializer}
    buffers = {n.input[i] for n in g.node if n.op_type == "BatchNormalization"
               for i in (3, 4) if len(n.input) > i}
    tensors: list[dict] = []
    constants: dict[str, dict] = {}
    chunks: list[bytes] = []
    shapes: dict[str, list[int]] = {}
    offset = 0
    for t in g.initializer:
        arr = numpy_helper.to_array(t)
        shapes[t.name] = list(arr.shape)
        if t.data_type not in _FLOAT_TYPES:
            if arr.dtype.kind == "f":
                raise OnnxImportError(
                    f"{path}: initializer {t.name!r} has unsupported float type "
                    f"{TensorProto.DataType.Name(t.data_type)}")
            constants[t.name] = {"dtype": arr.dtype.name, "shape": list(arr.shape),
                                 "values": arr.reshape(-1).tolist()}
            continue
        if t.data_type != TensorProto.FLOAT:
            notes.append(f"initializer {t.name!r} converted from "
                         f"{TensorProto.DataType.Name(t.data_type)} to float32")
        data = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        pad = (-offset) % ALIGN
        if pad:
            chunks.append(b"\0" * pad)
            offset += pad
        tensors.append({"name": t.name, "shape": list(arr.shape), "dtype": "float32",
                        "offset": offset, "nbytes": len(data),
                        "role": "buffer" if t.name in buffers else "param"})
        chunks.append(data)
        offset += len(data)

    # Nodes: fold Constant, alias Identity-of-initializer, fill attribute defaults.
    graph_outputs = {o.name for o in g.output}
    alias: dict[str, str] = {}
    nodes: list[dict] = []
    for i, n in enumerate(g.node):
        ins = [alias.get(x, x) for x in n.input]
        if n.op_type == "Constant":
            arr = _constant_value(n, path)
            constants[n.output[0]] = {"dtype": arr.dtype.name, "shape": list(arr.shape),
                                      "values": arr.reshape(-1).tolist()}
            continue
        if (n.op_type == "Identity" and ins and (ins[0] in init_names or ins[0] in constants)
                and n.output[0] not in graph_outputs):
            alias[n.output[0]] = ins[0]
            continue
        attrs = {a.name: _json_attr(a) for a in n.attribute}
        _fill_defaults(n.op_type, attrs, opset, n, shapes)
        nodes.append({"name": n.name or f"{n.op_type}_{i}", "op_type": n.op_type,
                      "inputs": ins, "outputs": list(n.output), "attrs": attrs})
    if alias:
        shared = [t["name"] for t in tensors if t["role"] == "buffer" and any(
            nd["op_type"] != "BatchNormalization" and t["name"] in nd["inputs"]
            for nd in nodes)]
        if shared:
            notes.append(f"tensors used both as BN running stats and elsewhere: {shared}")

    graph = {
        "format": FORMAT,
        "name": os.path.splitext(os.path.basename(path))[0],
        "opset": opset,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "doc": model.doc_string,
        "inputs": [_value_info(v) for v in g.input if v.name not in init_names],
        "outputs": [_value_info(v) for v in g.output],
        "tensors": tensors,
        "constants": constants,
        "nodes": nodes,
        "notes": notes,
        "alignment": ALIGN,
        "weights_nbytes": offset,
    }
    return graph, b"".join(chunks)


# ----------------------------------------------------------------------------- export


def _to_inference(g: onnx.GraphProto) -> None:
    """In place: BN -> training_mode=0 with one output; Dropout removed (consumers rewired)."""
    used = {x for n in g.node for x in n.input} | {o.name for o in g.output}
    rename: dict[str, str] = {}
    keep = []
    for n in g.node:
        n.input[:] = [rename.get(x, x) for x in n.input]
        if n.op_type == "BatchNormalization" and len(n.output) > 1:
            extra = [o for o in n.output[1:] if o and o in used]
            if extra:
                raise ValueError(f"BatchNormalization {n.name!r}: running-stat outputs {extra} "
                                 "are consumed; cannot convert to inference")
            del n.output[1:]
        if n.op_type == "BatchNormalization":
            for a in list(n.attribute):
                if a.name == "training_mode":
                    n.attribute.remove(a)
            n.attribute.append(helper.make_attribute("training_mode", 0))
        if n.op_type == "Dropout":
            if len(n.output) > 1 and n.output[1] and n.output[1] in used:
                raise ValueError(f"Dropout {n.name!r}: mask output is consumed")
            if n.output[0] in {o.name for o in g.output}:
                keep.append(helper.make_node("Identity", [n.input[0]], [n.output[0]],
                                             name=n.name))
            else:
                rename[n.output[0]] = n.input[0]
            continue
        keep.append(n)
    del g.node[:]
    g.node.extend(keep)
    # Drop Constant nodes / initializers nobody uses any more (Dropout's ratio, training_mode).
    while True:
        used = {x for n in g.node for x in n.input} | {o.name for o in g.output}
        dead = [n for n in g.node if n.op_type == "Constant" and n.output[0] not in used]
        if not dead:
            break
        for n in dead:
            g.node.remove(n)
    for t in [t for t in g.initializer if t.name not in used]:
        g.initializer.remove(t)
    names = {o for n in g.node for o in n.output}
    for vi in [v for v in g.value_info if v.name not in names]:
        g.value_info.remove(vi)


def export_onnx(src_path: str | os.PathLike, weights: bytes, provenance: dict) -> bytes:
    """Write trained ``weights`` into the model at ``src_path``; return inference ``.onnx`` bytes.

    ``weights``: bytes-like in the bundle layout of ``load_bundle(src_path)`` (same offsets,
    little-endian float32, exactly ``graph["weights_nbytes"]`` bytes). Initializers keep their
    original dtype. The graph becomes an inference graph: BatchNormalization
    ``training_mode=0`` with only its first output, Dropout nodes removed (consumers rewired
    to their input). ``provenance`` (str keys; non-str values JSON-encoded) goes into
    ``metadata_props`` plus ``trained_with="webgpu-trainer"``. The result passes
    ``onnx.checker.check_model(full_check=True)``.

    Raises ``ValueError`` if the blob size is wrong (expected vs got bytes) or the graph
    cannot be converted; ``OnnxImportError`` for an unreadable source model.
    """
    src_path = os.fspath(src_path)
    graph, blob = load_bundle(src_path)
    weights = bytes(weights)
    if len(weights) != len(blob):
        raise ValueError(f"{src_path}: weight blob has the wrong size: expected {len(blob)} "
                         f"bytes, got {len(weights)}")
    model = _load_model(src_path)
    by_name = {t.name: t for t in model.graph.initializer}
    for spec in graph["tensors"]:
        old = by_name[spec["name"]]
        count = spec["nbytes"] // 4
        arr = np.frombuffer(weights, dtype="<f4", count=count, offset=spec["offset"])
        arr = arr.reshape(spec["shape"])
        if old.data_type == TensorProto.BFLOAT16:
            new = helper.make_tensor(old.name, TensorProto.BFLOAT16, arr.shape,
                                     arr.astype(np.float32).reshape(-1).tolist())
        else:
            np_dtype = helper.tensor_dtype_to_np_dtype(old.data_type)
            new = numpy_helper.from_array(arr.astype(np_dtype), old.name)
        old.CopyFrom(new)
    _to_inference(model.graph)

    props = {"trained_with": "webgpu-trainer"}
    for k, v in (provenance or {}).items():
        props[str(k)] = v if isinstance(v, str) else json.dumps(v)
    old_props = {p.key: p.value for p in model.metadata_props}
    helper.set_model_props(model, {**old_props, **props})
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString()


# ----------------------------------------------------------------------------- summary


def model_summary(graph: dict) -> dict:
    """Counts for the model list from a bundle graph (element counts, ints).

    Returns ``{"params", "trainable", "buffers", "total", "tensors", "nodes",
    "weights_nbytes"}``: ``params`` = elements of role "param" (what torch's
    ``sum(p.numel() for p in model.parameters())`` gives), ``trainable`` = the same (the engine
    trains every param), ``buffers`` = role "buffer" (BN running stats), ``total`` = both.
    """
    def numel(t: dict) -> int:
        n = 1
        for d in t["shape"]:
            n *= int(d)
        return n

    params = sum(numel(t) for t in graph["tensors"] if t["role"] == "param")
    buffers = sum(numel(t) for t in graph["tensors"] if t["role"] == "buffer")
    end = max((t["offset"] + t["nbytes"] for t in graph["tensors"]), default=0)
    return {"params": params, "trainable": params, "buffers": buffers,
            "total": params + buffers, "tensors": len(graph["tensors"]),
            "nodes": len(graph["nodes"]), "weights_nbytes": graph.get("weights_nbytes", end)}

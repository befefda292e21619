"""The import's first stage, reading (:func:`read_stage`): the protobuf parse, every stored
tensor's declared size checked against its data (inline fields, raw data, external data files)
before anything is decoded, external data loaded, local functions inlined, quantized weights
dequantized, the opset and a unique name per node."""
from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper

from .constants import _INT_FIELD_TYPES, MAX_FILE_BYTES
from .errors import _error
from .initializers import _dequantize_weights, note_dequantized
from .protos import _node_names, _opset
from .shapes import _numel
from .state import ImportState


def read_stage(s: ImportState) -> None:
    """Stage 1: ``s.model`` and what is read off it (``s.g``, ``s.opset``, ``s.names``,
    ``s.init``, ``s.tensors_ok``); an unreadable file raises OnnxImportError at once."""
    s.model = model = _read_model(s.path)
    s.base = os.path.dirname(os.path.abspath(s.path))
    s.file_size = os.path.getsize(s.path)
    s.tensors_ok = _check_tensor_data(s)
    if s.tensors_ok:
        _load_external(s)
    if model.functions:
        try:
            s.model = model = onnx.inliner.inline_local_functions(model)
        except Exception as e:  # noqa: BLE001
            s.problems.append(f"local functions could not be inlined: {e}")
    done, found = _dequantize_weights(model) if s.tensors_ok else ([], [])
    s.problems += found
    note_dequantized(s, done)
    s.g = model.graph
    s.opset = _opset(model)
    s.opsets = {o.domain or "ai.onnx": int(o.version) for o in model.opset_import}
    s.names = _node_names(s.g)
    s.init = {t.name: t for t in s.g.initializer}


def _check_tensor_data(s: ImportState) -> bool:
    """Every stored tensor (initializers, tensor attributes) against its declared size; the
    tensors of each missing external data file as one problem (``_missing_files``)."""
    found, missing = [], {}
    g = s.model.graph
    stored = [(t, f"initializer {t.name!r}") for t in g.initializer]
    stored += [(a.t, f"node {n.name or n.op_type} attribute {a.name!r}") for n in g.node
               for a in n.attribute if a.type == onnx.AttributeProto.TENSOR]
    for t, what in stored:
        loc = _missing_file(t, s.base)
        if loc:
            missing.setdefault(loc, []).append(what)
        else:
            found += _tensor_problems(t, what, s.base, s.file_size)
    found[:0] = _missing_files(missing)
    if g.sparse_initializer:
        found.append(f"sparse initializers are not supported: "
                     f"{[x.values.name for x in g.sparse_initializer]}")
    s.problems += found
    return not found


def _external_path(loc: str, base: str) -> str:
    """The path of external data file ``loc`` in the model's folder ``base``, or "" when
    ``loc`` is empty, absolute or leads outside ``base``."""
    full = os.path.normpath(os.path.join(base, loc))
    if not loc or os.path.isabs(loc) or not full.startswith(os.path.join(base, "")):
        return ""
    return full


def _missing_file(t: TensorProto, base: str) -> str:
    """The external data file ``t`` names when it lies inside ``base`` but is not there,
    else ""."""
    if t.data_location != TensorProto.EXTERNAL:
        return ""
    loc = {e.key: e.value for e in t.external_data}.get("location", "")
    full = _external_path(loc, base)
    return loc if full and not os.path.isfile(full) else ""


def _missing_files(missing: dict) -> list[str]:
    """One problem per missing external data file: the tensors stored in it (the first
    three named) and how to make the model one file. torch.onnx.export's dynamo exporter
    writes its weights beside the model as ``NAME.onnx.data`` by default, and a page
    upload carries one file only."""
    out = []
    for loc, whats in missing.items():
        some = ", ".join(whats[:3]) + (f" and {len(whats) - 3:,} more" if len(whats) > 3 else "")
        out.append(f"external data file {loc!r} is missing: the weights of {len(whats):,} "
                   f"tensor(s) ({some}) are stored in it, not in the .onnx file. Keep it next "
                   "to the .onnx file, or make the model one file (what an upload needs): "
                   "torch.onnx.export(..., external_data=False), or onnx.save(onnx.load(PATH), "
                   "NEW_PATH, save_as_external_data=False)")
    return out


def _load_external(s: ImportState) -> None:
    if not any(t.data_location == TensorProto.EXTERNAL for t in s.model.graph.initializer):
        return
    try:
        onnx.external_data_helper.load_external_data_for_model(s.model, s.base)
    except Exception as e:  # noqa: BLE001
        s.problems.append(f"external data could not be read: {e}")


def _read_model(path: str) -> onnx.ModelProto:
    """Parse the file; OnnxImportError (one problem) when it is not a readable ONNX model."""
    if not os.path.isfile(path):
        raise _error(path, ["no such file"])
    size = os.path.getsize(path)
    if size > MAX_FILE_BYTES:
        raise _error(path, [f"the file is {size:,} bytes; ONNX files over 2 GiB cannot be "
                            "parsed: save the weights as external data"])
    with open(path, "rb") as f:
        data = f.read()
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:  # noqa: BLE001 - DecodeError and friends
        raise _error(path, [f"not a valid ONNX file (truncated or not ONNX): the protobuf "
                            f"decoder failed after reading {size:,} bytes: {e}"]) from e
    missing = [what for what, ok in (("ir_version", model.ir_version > 0),
                                     ("graph", model.HasField("graph")),
                                     ("opset_import", bool(model.opset_import))) if not ok]
    if missing:
        raise _error(path, [f"not a valid ONNX file (truncated or not ONNX): {size:,} bytes "
                            f"parse but {', '.join(missing)} missing"])
    return model


def _tensor_problems(t: TensorProto, what: str, base: str, file_size: int) -> list[str]:
    """Problems with the declared size vs the stored data of one tensor (before any decode)."""
    dims = list(t.dims)
    if any(d < 0 for d in dims):
        return [f"{what} has negative dims {dims}"]
    numel = _numel(dims)
    try:
        itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    except Exception:  # noqa: BLE001 - string / 4-bit / unknown: checked by role later
        return []
    if t.data_type == TensorProto.STRING:
        return []
    need = numel * itemsize
    if t.data_location == TensorProto.EXTERNAL:
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        if not loc:
            return [f"{what} is stored as external data but names no file"]
        full = _external_path(loc, base)
        if not full:
            return [f"{what}: external data file {loc!r} is outside the model's folder"]
        try:
            offset = int(info.get("offset", 0) or 0)
            length = int(info["length"]) if info.get("length") else None
        except ValueError:
            return [f"{what}: external data offset/length are not integers"]
        have = os.path.getsize(full)
        if length is not None and length != need:
            return [f"{what} declares shape {dims} ({need:,} bytes) but its external data "
                    f"length is {length:,} bytes"]
        if offset < 0 or offset + need > have:
            return [f"{what} declares shape {dims} ({need:,} bytes at offset {offset:,} of "
                    f"{loc!r}) but that file holds only {have:,} bytes"]
        return []
    if t.HasField("raw_data"):
        got = len(t.raw_data)
        if got != need:
            extra = f" (the file holds {file_size:,} bytes)" if need > file_size else ""
            return [f"{what} declares shape {dims} ({need:,} bytes){extra} but holds "
                    f"{got:,} bytes of data"]
        return []
    fields = {TensorProto.FLOAT: t.float_data, TensorProto.DOUBLE: t.double_data,
              TensorProto.INT64: t.int64_data, TensorProto.UINT32: t.uint64_data,
              TensorProto.UINT64: t.uint64_data}
    if t.data_type in fields:
        got = len(fields[t.data_type])
    elif t.data_type in _INT_FIELD_TYPES:
        got = len(t.int32_data)
    elif t.data_type in (TensorProto.COMPLEX64,):
        got, numel = len(t.float_data), 2 * numel
    elif t.data_type in (TensorProto.COMPLEX128,):
        got, numel = len(t.double_data), 2 * numel
    else:
        got = len(t.int32_data)  # float8 / 4-bit types packed in int32_data
    if got != numel:
        extra = f" ({need:,} bytes; the file holds {file_size:,})" if need > file_size else ""
        return [f"{what} declares shape {dims} ({numel:,} values){extra} but holds {got:,}"]
    return []

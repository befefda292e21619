"""ONNX <-> the engine's model description ("bundle"), and export of trained weights.

CPython only (server / CLI): needs numpy and onnx; the browser engine never imports this.
Contracts: docs/ARCHITECTURE.md, "Model description (bundle)" and "Trained weights -> .onnx".

- :func:`load_bundle` (the single entry point of the server and the CLI) turns an ``.onnx`` file
  into ``(graph, weights)``: a JSON-serialisable graph dict and a little-endian float32 blob
  holding every trainable tensor, each at an offset that is a multiple of :data:`ALIGN` (256)
  bytes. It accepts what ``torch.onnx.export`` writes with the TorchScript exporter
  (``dynamo=False``, opsets 13-17) and the dynamo exporter (``dynamo=True``, opset 18), static or
  dynamic batch, training- or inference-mode graphs:

  * constant subgraphs are folded before training (Constant, Identity, Shape, Size, Gather,
    Unsqueeze, Squeeze, Concat, Cast, CastLike, ConstantOfShape, Range, Reshape/Slice/
    arithmetic of constants; other standard ops through ``onnx.reference`` on small inputs),
    alternating with ONNX shape inference until nothing new folds. The batch dimension is
    symbolic: the graph is evaluated for two batch sizes and a shape that follows the batch
    (``x.view(x.size(0), -1)``) becomes a Reshape constant with ``0`` (ONNX: copy the input's
    dim; ``allowzero`` set to 0) or ``-1`` in that place, so it holds for any batch; any other
    batch-dependent value is a problem. A batch size baked into a static export (a Reshape to
    ``[4, -1]``) becomes ``[-1, <inferred dims>]``, with a note; the input and output shapes get
    the batch symbol (``"N"`` unless the file names it). Nodes no output depends on are dropped;
  * attribute defaults are filled; constant inputs that older opsets had as attributes are kept
    as inputs AND mirrored into ``attrs`` under the attribute name (Squeeze/Unsqueeze/Reduce*
    ``axes``, Split ``split``, Clip ``min``/``max``, Dropout ``ratio``/``training_mode``, Pad
    ``pads``/``value``/``axes``, Slice ``starts``/``ends``/``axes``/``steps``);
    BatchNormalization always has ``training_mode`` (opset < 14: 1 when exported with the
    running-statistic outputs); ``auto_pad`` SAME_*/VALID becomes explicit ``pads``; a Cast
    of an activation to a float type becomes Identity (the engine computes in float32);
  * initializers: float ones are ``tensors`` with role ``"param"`` (trainable) or ``"buffer"``
    (BatchNormalization running mean / var); scalars and shape-like ones are ``constants``.
    float16 / float64 / bfloat16 are converted to float32 (a line in ``graph["notes"]``).
    Exporters deduplicate equal initializers: ``Identity(w)`` outputs become tensors of their
    own (``source: {"identity_of": w}``), a running statistic shared with a parameter or
    another BatchNormalization gets its own copy (``source: {"copy_of": w, "node", "input"}``).

- :func:`export_onnx` writes a blob of that layout back into the original model, converted to
  an inference graph (BatchNormalization ``training_mode=0`` with one output, no Dropout).
- :func:`model_summary` counts parameters for the model list.

Every problem is reported before any work by ONE :class:`OnnxImportError` whose message (and
``problems`` list) names every problem at once: unreadable / truncated / non-ONNX bytes, ops the
importer does not map or the engine cannot train yet (``graph.supported()``), unknown op
domains, inputs that do not fit MNIST ([N, 1, 28, 28] or [N, 784]), tensor data that does not
match its declared size, missing external data files, unsupported initializer dtypes.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["ALIGN", "FORMAT", "IMPORT_OPS", "SUPPORTED_OPS", "OnnxImportError", "load_bundle",
           "export_onnx", "model_summary"]

FORMAT = "webgpu-trainer/graph@1"
ALIGN = 256  # byte alignment of every tensor in the weight blob (GPU-friendly offsets)
TESTED_OPSETS = (13, 18)  # opsets the fixtures cover; older ones down to MIN_OPSET get a note
MIN_OPSET = 7
MAX_FILE_BYTES = (1 << 31) - 1  # protobuf cannot parse more; weights beyond go to external data
MAX_FOLD_ELEMENTS = 1 << 22  # largest constant the folder will materialise
MAX_INLINE_ELEMENTS = 1 << 16  # largest constant written inline (JSON) into the bundle
MAX_REFERENCE_ELEMENTS = 1 << 16  # largest inputs folded by onnx.reference (other ops)
MNIST_DIMS = ([1, 28, 28], [784])  # per-sample input shapes the trainer feeds
_BATCHES = (3, 5)  # the two batch sizes the folder evaluates the graph at
_DEFAULT_DOMAINS = ("", "ai.onnx")

_UNARY = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "Gelu", "Erf", "Exp", "Log", "Sqrt", "Neg",
          "Abs", "Reciprocal", "Softplus", "Softsign", "Elu", "Selu", "Celu", "HardSigmoid",
          "HardSwish", "Mish", "Clip")
_REDUCE = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
           "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp")
IMPORT_OPS = frozenset(_UNARY + _REDUCE + (
    "Conv", "Gemm", "MatMul", "BatchNormalization", "LayerNormalization",
    "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
    "PRelu", "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean",
    "Softmax", "LogSoftmax", "Transpose", "Concat", "Slice", "Pad", "Expand", "Split",
    "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Dropout",
))
"""ONNX op_types the importer maps onto the bundle (defaults filled, forms normalised). Which of
them the engine can TRAIN is ``webgpu_trainer.graph.supported()``."""
SUPPORTED_OPS = IMPORT_OPS  # the historical name

# Inputs that carry attribute-like constants: (op, input index) -> the attribute name they are
# mirrored to (the name older opsets used).
_MIRROR: dict[str, dict[int, str]] = {
    "Squeeze": {1: "axes"}, "Unsqueeze": {1: "axes"}, "Split": {1: "split"},
    "Clip": {1: "min", 2: "max"}, "Dropout": {1: "ratio", 2: "training_mode"},
    "Pad": {1: "pads", 2: "value", 3: "axes"},
    "Slice": {1: "starts", 2: "ends", 3: "axes", 4: "steps"},
    **{op: {1: "axes"} for op in _REDUCE},
}
# Inputs that must be constants of the model description for the engine to plan the node.
_MUST_BE_CONST: dict[str, tuple] = {
    "Reshape": (1,), "Expand": (1,), "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,),
    "Slice": (1, 2, 3, 4), "Pad": (1, 3), "Dropout": (1, 2),
    **{op: (1,) for op in _REDUCE},
}
# Inputs that hold shapes / indices / scalars rather than data: initializers used only there
# are constants, never trainable tensors.
_CONST_SLOTS: dict[str, tuple] = {**_MUST_BE_CONST, "Clip": (1, 2), "Pad": (1, 2, 3),
                                  "Tile": (1,), "Resize": (1, 2, 3), "Upsample": (1,),
                                  "ConstantOfShape": (0,), "Range": (0, 1, 2), "TopK": (1,),
                                  "OneHot": (1, 2), "CumSum": (1,), "Gather": (1,)}
_NEVER_FOLD = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                         "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout", "If",
                         "Loop", "Scan", "SequenceConstruct", "Optional",
                         "BatchNormalization"})
_FOLD_ONLY = frozenset({"Shape", "Size", "Constant", "ConstantOfShape", "Range", "Gather",
                        "Cast", "CastLike", "Equal", "Where", "Less", "Greater", "Not"})
_FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
_INT_FIELD_TYPES = {TensorProto.INT32, TensorProto.INT16, TensorProto.INT8, TensorProto.UINT16,
                    TensorProto.UINT8, TensorProto.BOOL, TensorProto.FLOAT16,
                    TensorProto.BFLOAT16}


class OnnxImportError(ValueError):
    """An ONNX file that cannot become a bundle. ``str(e)`` names the file and lists every
    problem, one per line after the first; ``e.problems`` is that list (strings)."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = list(problems) if problems else [message]


class _NotFoldable(Exception):
    """The folder leaves this node in the graph (a reason, not an error)."""


def _error(path: str, problems: list[str]) -> OnnxImportError:
    problems = list(dict.fromkeys(problems))  # each once, in order
    if len(problems) == 1:
        return OnnxImportError(f"{path}: {problems[0]}", problems)
    lines = "\n".join(f"- {p}" for p in problems)
    return OnnxImportError(f"{path}: cannot be imported ({len(problems)} problems):\n{lines}",
                           problems)


# ----------------------------------------------------------------------------- helpers


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
    return {"name": vi.name, "shape": _dims(vi), "dtype": _dtype_name(vi.type.tensor_type.elem_type)}


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


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def _small(arr: np.ndarray) -> dict:
    """A constant of the bundle: {"dtype", "shape", "values"}."""
    arr = np.asarray(arr)
    if arr.dtype.kind == "f" and arr.dtype != np.float32:
        arr = arr.astype(np.float32)
    return {"dtype": arr.dtype.name, "shape": list(arr.shape), "values": arr.reshape(-1).tolist()}


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


def _reshape_dims(dims: list, shape, allowzero: int) -> list | None:
    """ONNX Reshape's output dims for input ``dims`` and target ``shape``; None if invalid."""
    out = []
    for i, v in enumerate(int(s) for s in shape):
        if v == 0 and not allowzero:
            if i >= len(dims):
                return None
            v = dims[i]
        out.append(v)
    if out.count(-1) > 1:
        return None
    if -1 in out:
        rest = _numel(d for d in out if d != -1)
        if rest == 0 or _numel(dims) % rest:
            return None
        out[out.index(-1)] = _numel(dims) // rest
    return out if _numel(out) == _numel(dims) else None


# ----------------------------------------------------------------------------- reading


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
                            f"decoder failed after reading {size:,} bytes: {e}"])
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
        full = os.path.normpath(os.path.join(base, loc))
        if os.path.isabs(loc) or not full.startswith(os.path.join(base, "")):
            return [f"{what}: external data file {loc!r} is outside the model's folder"]
        if not os.path.isfile(full):
            return [f"{what}: external data file {loc!r} is missing (looked for {full}); "
                    "keep it next to the .onnx file"]
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


# ----------------------------------------------------------------------------- folding


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _guard(numel: int, node: onnx.NodeProto) -> None:
    if numel > MAX_FOLD_ELEMENTS:
        raise _NotFoldable(f"would materialise {numel:,} values")


def _int_list(arr) -> list[int]:
    return [int(v) for v in np.asarray(arr).reshape(-1)]


def _eval_op(node: onnx.NodeProto, ins: list, opset: int) -> list:
    """Evaluate one node on numpy constants (ONNX semantics); _NotFoldable to leave it."""
    op = node.op_type
    x = ins[0] if ins else None

    def axes_of(k):
        if len(ins) > k and ins[k] is not None:
            return _int_list(ins[k])
        v = _attr(node, "axes")
        return None if v is None else [int(a) for a in v]

    if op == "Identity":
        return [x]
    if op == "Cast":
        to = int(_attr(node, "to"))
        try:
            dt = helper.tensor_dtype_to_np_dtype(to)
        except Exception:  # noqa: BLE001
            raise _NotFoldable(f"cast to {_type_name(to)}")
        if np.dtype(dt).kind not in "biuf":
            raise _NotFoldable(f"cast to {_type_name(to)}")
        return [np.asarray(x).astype(dt)]
    if op == "CastLike":
        return [np.asarray(x).astype(ins[1].dtype)]
    if op == "Gather":
        axis = int(_attr(node, "axis", 0))
        return [np.take(x, np.asarray(ins[1], np.int64), axis=axis)]
    if op == "Unsqueeze":
        axes = axes_of(1) or []
        rank = x.ndim + len(axes)
        y = x
        for a in sorted(a % rank for a in axes):
            y = np.expand_dims(y, a)
        return [y]
    if op == "Squeeze":
        axes = axes_of(1)
        if axes is None:
            return [np.squeeze(x)]
        return [np.squeeze(x, axis=tuple(a % max(x.ndim, 1) for a in axes))]
    if op == "Concat":
        axis = int(_attr(node, "axis", 0))
        return [np.concatenate([np.asarray(v) for v in ins if v is not None], axis=axis)]
    if op == "ConstantOfShape":
        shape = _int_list(x)
        _guard(_numel(shape), node)
        val = _attr(node, "value")
        v = numpy_helper.to_array(val).reshape(-1) if val is not None else np.zeros(1, np.float32)
        return [np.full(shape, v[0], dtype=v.dtype)]
    if op == "Range":
        start, limit, delta = (np.asarray(v).reshape(()) for v in ins[:3])
        if delta == 0:
            raise _NotFoldable("delta 0")
        count = max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0)
        _guard(count, node)
        return [(start + np.arange(count) * delta).astype(start.dtype)]
    if op == "Reshape":
        out = _reshape_dims(list(x.shape), _int_list(ins[1]), int(_attr(node, "allowzero", 0)))
        if out is None:
            raise _NotFoldable(f"cannot reshape {list(x.shape)} to {_int_list(ins[1])}")
        return [x.reshape(out)]
    if op == "Slice":
        if len(ins) > 1:
            starts, ends = _int_list(ins[1]), _int_list(ins[2])
            axes = _int_list(ins[3]) if len(ins) > 3 and ins[3] is not None else None
            steps = _int_list(ins[4]) if len(ins) > 4 and ins[4] is not None else None
        else:
            starts, ends = list(_attr(node, "starts")), list(_attr(node, "ends"))
            axes, steps = _attr(node, "axes"), None
        axes = list(range(len(starts))) if axes is None else list(axes)
        steps = [1] * len(starts) if steps is None else steps
        idx = [slice(None)] * x.ndim
        for a, s, e, st in zip(axes, starts, ends, steps):
            idx[a % x.ndim] = slice(s, e, st)
        return [x[tuple(idx)]]
    if op == "Transpose":
        perm = _attr(node, "perm")
        return [np.transpose(x, None if perm is None else list(perm))]
    if op == "Expand":
        shape = np.broadcast_shapes(x.shape, tuple(_int_list(ins[1])))
        _guard(_numel(shape), node)
        return [np.broadcast_to(x, shape).copy()]
    if op == "Tile":
        reps = _int_list(ins[1])
        _guard(x.size * _numel(reps), node)
        return [np.tile(x, reps)]
    binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Equal": np.equal,
              "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal,
              "GreaterOrEqual": np.greater_equal, "And": np.logical_and,
              "Or": np.logical_or, "Max": np.maximum, "Min": np.minimum}
    if op in binary and len(ins) == 2:
        a, b = np.asarray(ins[0]), np.asarray(ins[1])
        _guard(_numel(np.broadcast_shapes(a.shape, b.shape)), node)
        out = binary[op](a, b)
        return [out.astype(a.dtype) if op in ("Add", "Sub", "Mul", "Max", "Min") else out]
    if op == "Div":
        a, b = np.asarray(ins[0]), np.asarray(ins[1])
        if a.dtype.kind in "iu":
            if np.any(b == 0):
                raise _NotFoldable("integer division by zero")
            q = np.abs(a) // np.abs(b) * np.sign(a) * np.sign(b)  # ONNX truncates toward zero
            return [q.astype(a.dtype)]
        return [(a / b).astype(a.dtype)]
    unary = {"Neg": np.negative, "Abs": np.abs, "Sqrt": np.sqrt, "Floor": np.floor,
             "Ceil": np.ceil, "Not": np.logical_not, "Sign": np.sign, "Exp": np.exp,
             "Log": np.log, "Reciprocal": np.reciprocal}
    if op in unary:
        return [unary[op](np.asarray(x)).astype(np.asarray(x).dtype)]
    if op == "Where":
        return [np.where(ins[0], ins[1], ins[2])]
    if op in ("ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin") and x is not None:
        axes = axes_of(1)
        keep = bool(_attr(node, "keepdims", 1))
        if not axes and _attr(node, "noop_with_empty_axes", 0):
            return [x]
        fn = {"ReduceProd": np.prod, "ReduceSum": np.sum, "ReduceMax": np.max,
              "ReduceMin": np.min}[op]
        ax = None if not axes else tuple(a % x.ndim for a in axes)
        return [np.asarray(fn(x, axis=ax, keepdims=keep)).astype(x.dtype)]
    # Anything else: the ONNX reference implementation, on small inputs only.
    if sum(np.asarray(v).size for v in ins if v is not None) > MAX_REFERENCE_ELEMENTS:
        raise _NotFoldable("inputs too large to fold")
    try:
        from onnx.reference import ReferenceEvaluator
        ev = ReferenceEvaluator(node, opsets={"": opset})
        names = [n for n in node.input]
        feeds = {n: v for n, v in zip(names, ins) if n}
        outs = ev.run(None, feeds)
    except Exception as e:  # noqa: BLE001
        raise _NotFoldable(f"not evaluable ({type(e).__name__}: {e})")
    for o in outs:
        _guard(np.asarray(o).size, node)
    return [np.asarray(o) for o in outs]


# ----------------------------------------------------------------------------- import


class _Importer:
    """One import: the model, the problems found so far and the pieces of the bundle."""

    def __init__(self, path: str, check_trainable: bool):
        self.path = path
        self.check_trainable = check_trainable
        self.problems: list[str] = []
        self.notes: list[str] = []

    # -- driver --------------------------------------------------------------------------
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
        self.g = g = model.graph
        self.opset = _opset(model)
        self.opsets = {o.domain or "ai.onnx": int(o.version) for o in model.opset_import}
        self._check_opset()
        self.names = _node_names(g)
        self.init = {t.name: t for t in g.initializer}
        structure_ok = self._check_structure()
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
            raise _error(path, self.problems)
        return graph, blob

    # -- file-level checks -----------------------------------------------------------------
    def _check_tensor_data(self) -> bool:
        found = []
        g = self.model.graph
        for t in g.initializer:
            found += _tensor_problems(t, f"initializer {t.name!r}", self.base, self.file_size)
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    found += _tensor_problems(a.t, f"node {n.name or n.op_type} attribute "
                                              f"{a.name!r}", self.base, self.file_size)
        if g.sparse_initializer:
            found.append(f"sparse initializers are not supported: "
                         f"{[s.values.name for s in g.sparse_initializer]}")
        self.problems += found
        return not found

    def _load_external(self) -> None:
        if not any(t.data_location == TensorProto.EXTERNAL for t in self.model.graph.initializer):
            return
        try:
            onnx.external_data_helper.load_external_data_for_model(self.model, self.base)
        except Exception as e:  # noqa: BLE001
            self.problems.append(f"external data could not be read: {e}")

    def _check_opset(self) -> None:
        if self.opset == 0:
            self.problems.append("the model imports no opset of the default ONNX domain")
        elif self.opset < MIN_OPSET:
            self.problems.append(f"opset {self.opset} is too old: re-export with "
                                 f"opset_version between {TESTED_OPSETS[0]} and "
                                 f"{TESTED_OPSETS[1]}")
        elif not TESTED_OPSETS[0] <= self.opset <= TESTED_OPSETS[1]:
            self.notes.append(f"opset {self.opset} is outside the tested range "
                              f"{TESTED_OPSETS[0]}-{TESTED_OPSETS[1]}")

    def _check_structure(self) -> bool:
        """Every node input is defined before use (a truncated or shuffled graph is not)."""
        g = self.g
        known = {i.name for i in g.input} | set(self.init) | {""}
        bad = []
        for n, name in zip(g.node, self.names):
            for x in n.input:
                if x not in known:
                    bad.append(f"node {name} ({n.op_type}) uses {x!r}, which no graph input, "
                               "initializer or earlier node defines (truncated or unsorted "
                               "graph?)")
            known.update(n.output)
        for o in g.output:
            if o.name not in known:
                bad.append(f"graph output {o.name!r} is not produced by any node")
        if not g.node:
            bad.append("the graph has no nodes")
        self.problems += bad[:20] + ([f"... and {len(bad) - 20} more undefined tensors"]
                                     if len(bad) > 20 else [])
        return not bad

    def _check_onnx(self) -> None:
        """onnx.checker: structural errors and type errors (strict shape inference) are
        problems; other shape-inference complaints only a note (the folder infers again)."""
        def first_line(e):
            text = str(e).strip()
            return text.splitlines()[0] if text else type(e).__name__
        try:
            onnx.checker.check_model(self.model)
        except Exception as e:  # noqa: BLE001 - ValidationError and friends
            self.problems.append(f"the ONNX checker rejects the model: {first_line(e)}")
            return
        try:
            onnx.checker.check_model(self.model, full_check=True)
        except Exception as e:  # noqa: BLE001 - InferenceError
            if "type" in str(e).lower():
                self.problems.append(f"the ONNX checker rejects the model: {first_line(e)}")
            else:
                self.notes.append(f"ONNX shape inference reports: {first_line(e)}")

    def _dead_nodes(self) -> set:
        """Names of the nodes no graph output depends on (exporters leave some behind)."""
        need = {o.name for o in self.g.output}
        dead = set()
        for n, name in reversed(list(zip(self.g.node, self.names))):
            if any(o and o in need for o in n.output):
                need.update(x for x in n.input if x)
            else:
                dead.add(name)
        return dead

    def _check_inputs(self) -> dict | None:
        """The one data input, bound to MNIST dims: {"name", "batch", "dims", "dtype"}."""
        real = [i for i in self.g.input if i.name not in self.init]
        if not real:
            self.problems.append("the model has no input (it needs one image input "
                                 "[N, 1, 28, 28] or [N, 784])")
            return None
        if len(real) > 1:
            self.problems.append(f"the model has {len(real)} inputs "
                                 f"{[i.name for i in real]}; the trainer feeds exactly one "
                                 "image input [N, 1, 28, 28] or [N, 784]")
        vi = real[0]
        ok = True
        elem = vi.type.tensor_type.elem_type
        if not vi.type.HasField("tensor_type"):
            self.problems.append(f"input {vi.name!r} is not a tensor")
            return None
        if elem not in _FLOAT_TYPES:
            self.problems.append(f"input {vi.name!r} has dtype {_dtype_name(elem)}; the trainer "
                                 "feeds normalised float32 images")
            ok = False
        elif elem != TensorProto.FLOAT:
            self.notes.append(f"input {vi.name!r} is {_dtype_name(elem)}; the engine feeds and "
                              "computes float32")
        dims = _dims(vi)
        if dims is None:
            self.problems.append(f"input {vi.name!r} declares no shape; the trainer needs "
                                 "[N, 1, 28, 28] or [N, 784]")
            return None
        per = dims[1:]
        bound = None
        for want in MNIST_DIMS:
            if len(per) == len(want) and all(not isinstance(d, int) or d == w
                                             for d, w in zip(per, want)):
                bound = want
                break
        if not dims or bound is None:
            sample = "x".join(str(d) for d in per) if per else "a scalar"
            self.problems.append(
                f"input {vi.name!r} has shape {dims} ({sample} per sample, rank {len(dims)}) "
                "but MNIST images are 1x28x28: the model must take [N, 1, 28, 28] or [N, 784]")
            return None
        if any(not isinstance(d, int) for d in per):
            self.notes.append(f"input {vi.name!r} dims {dims} bound to {['N'] + bound}")
        batch = dims[0]
        if isinstance(batch, int) and batch <= 0:
            batch = None
        return {"name": vi.name, "batch": batch, "dims": list(bound), "ok": ok,
                "symbol": batch if isinstance(batch, str) else "N"}

    # -- shapes and folding ----------------------------------------------------------------
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
        are not data (non-float ones, float scalars)."""
        vals = {}
        for t in self.g.initializer:
            if t.data_type not in _FLOAT_TYPES or len(t.dims) == 0:
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

    # -- ops -------------------------------------------------------------------------------
    def _check_ops(self) -> None:
        from .graph import supported
        trainable = set(supported())
        unsupported, untrainable, domains = [], [], []
        for n, name in zip(self.g.node, self.names):
            if name in self.folded or n.op_type == "Constant" and n.domain in _DEFAULT_DOMAINS:
                continue
            dom = n.domain or "ai.onnx"
            where = f"node {name} ({n.op_type}, {dom} opset {self.opsets.get(dom, '?')})"
            if n.domain not in _DEFAULT_DOMAINS:
                domains.append(f"unknown op domain {n.domain!r}: {where}")
            elif n.op_type in _FOLD_ONLY and n.op_type != "Cast":
                if not self.fold_ran:
                    continue  # the problems that stopped folding are reported already
                why = self.fold_failures.get(name, "its inputs are computed from activations")
                unsupported.append(f"unsupported op: {where} could not be folded to a "
                                   f"constant: {why}")
            elif n.op_type == "Cast" and self._cast_is_float(n):
                continue
            elif n.op_type not in IMPORT_OPS:
                unsupported.append(f"unsupported op: {where}")
            elif self.check_trainable and n.op_type not in trainable:
                untrainable.append(f"cannot train yet: {where}: the engine has no kernel for "
                                   f"{n.op_type}")
        self.problems += domains + unsupported + untrainable
        if unsupported:
            self.problems.append("ops the importer maps: " + ", ".join(sorted(IMPORT_OPS)))
        if untrainable:
            self.problems.append("ops the engine trains: " + ", ".join(sorted(trainable)))

    def _cast_is_float(self, n) -> bool:
        to = _attr(n, "to")
        return to in _FLOAT_TYPES

    # -- the bundle ------------------------------------------------------------------------
    def _inputs_of(self, n, name) -> list[str]:
        return [self.const_overrides.get((name, k), x) for k, x in enumerate(n.input)]

    def _build(self, tensors_ok: bool) -> tuple[dict, bytes]:
        g = self.g
        nodes = []
        if self.input is None:
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
            "alignment": ALIGN,
            "weights_nbytes": offset,
        }
        return graph, b"".join(chunks)

    def _check_dtype(self, t: TensorProto, name: str, uses: list) -> bool:
        """False (and a problem) for an initializer the trainer cannot use as data."""
        if t.data_type in _FLOAT_TYPES:
            return True
        users = ", ".join(f"{nm} ({n.op_type})" for n, nm, _ in uses[:3])
        tn = _type_name(t.data_type)
        if "FLOAT" in tn:
            self.problems.append(f"initializer {name!r} has dtype {tn}, which the trainer "
                                 f"cannot convert (used by {users}): re-export in float32")
        elif t.data_type in (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT4,
                             TensorProto.UINT4):
            self.problems.append(f"initializer {name!r} is {tn} {list(t.dims)} used as data by "
                                 f"{users}: quantized (int8/uint8) weights are not supported; "
                                 "export the float32 model")
        else:
            self.problems.append(f"initializer {name!r} is {tn} {list(t.dims)} used as data by "
                                 f"{users}: only float tensors can be data")
        return False

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


# ----------------------------------------------------------------------------- export


def _to_inference(g: onnx.GraphProto, opset: int) -> None:
    """In place: BN -> inference with one output; Dropout removed (consumers rewired)."""
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
            if opset >= 14:
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
    for o in g.output:  # a graph output produced by a removed Dropout
        if o.name in rename:
            raise ValueError(f"graph output {o.name!r} comes from a Dropout")
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


def _as_initializer(arr: np.ndarray, like: TensorProto, name: str) -> TensorProto:
    """``arr`` (float32) as an initializer named ``name`` of ``like``'s dtype."""
    if like.data_type == TensorProto.BFLOAT16:
        return helper.make_tensor(name, TensorProto.BFLOAT16, arr.shape,
                                  arr.astype(np.float32).reshape(-1).tolist())
    np_dtype = helper.tensor_dtype_to_np_dtype(like.data_type)
    return numpy_helper.from_array(arr.astype(np_dtype), name)


def export_onnx(src_path: str | os.PathLike, weights: bytes, provenance: dict) -> bytes:
    """Write trained ``weights`` into the model at ``src_path``; return inference ``.onnx`` bytes.

    ``weights``: bytes-like in the bundle layout of ``load_bundle(src_path)`` (same offsets,
    little-endian float32, exactly ``graph["weights_nbytes"]`` bytes). Initializers keep their
    original dtype; tensors the importer split off (Identity-deduplicated initializers, copies
    of shared running statistics) become initializers of their own (next to their source), the
    Identity nodes go and the BatchNormalization inputs are re-pointed. The graph becomes an
    inference graph: BatchNormalization ``training_mode=0`` (opset >= 14) with only its first
    output, Dropout nodes removed (consumers rewired to their input). ``provenance`` (str keys;
    non-str values JSON-encoded) goes into ``metadata_props`` plus
    ``trained_with="webgpu-trainer"``. The result passes
    ``onnx.checker.check_model(full_check=True)``.

    Raises ``ValueError`` if the blob size is wrong (expected vs got bytes) or the graph
    cannot be converted; ``OnnxImportError`` for an unreadable source model.
    """
    src_path = os.fspath(src_path)
    graph, blob = load_bundle(src_path, check_trainable=False)
    weights = bytes(weights)
    if len(weights) != len(blob):
        raise ValueError(f"{src_path}: weight blob has the wrong size: expected {len(blob)} "
                         f"bytes, got {len(weights)}")
    model = _read_model(src_path)
    base = os.path.dirname(os.path.abspath(src_path))
    if any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer):
        onnx.external_data_helper.load_external_data_for_model(model, base)
    if model.functions:
        model = onnx.inliner.inline_local_functions(model)
    g = model.graph
    names = _node_names(g)
    by_node = dict(zip(names, g.node))
    inits = list(g.initializer)
    by_name = {t.name: t for t in inits}
    added: dict[str, list] = {}  # source initializer -> new initializers after it
    drop_nodes = set()
    for spec in graph["tensors"]:
        count = spec["nbytes"] // 4
        arr = np.frombuffer(weights, dtype="<f4", count=count, offset=spec["offset"])
        arr = arr.reshape(spec["shape"])
        src = spec.get("source")
        if src is None:
            old = by_name[spec["name"]]
            old.CopyFrom(_as_initializer(arr, old, old.name))
            continue
        root = src.get("identity_of") or src.get("copy_of")
        while root not in by_name:  # Identity of an Identity: find the stored initializer
            root = next(t["source"]["identity_of"] for t in graph["tensors"] if t["name"] == root)
        new = _as_initializer(arr, by_name[root], spec["name"])
        added.setdefault(root, []).append(new)
        if "identity_of" in src:
            drop_nodes.update(id(n) for n in g.node
                              if n.op_type == "Identity" and list(n.output) == [spec["name"]])
        else:
            by_node[src["node"]].input[src["input"]] = spec["name"]
    if added or drop_nodes:
        del g.initializer[:]
        for t in inits:
            g.initializer.append(t)
            g.initializer.extend(added.get(t.name, []))
        keep = [n for n in g.node if id(n) not in drop_nodes]
        del g.node[:]
        g.node.extend(keep)
    _to_inference(g, _opset(model))

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

"""One node evaluated on numpy constants with ONNX semantics: the constant folder's kernel
(the shape ops by hand, other standard ops through ``onnx.reference`` on small inputs)."""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .constants import MAX_FOLD_ELEMENTS, MAX_REFERENCE_ELEMENTS
from .errors import _NotFoldable
from .protos import _attr, _type_name
from .shapes import _int_list, _numel, _reshape_dims


def _guard(numel: int, node: onnx.NodeProto) -> None:
    if numel > MAX_FOLD_ELEMENTS:
        raise _NotFoldable(f"would materialise {numel:,} values")


def _eval_op(node: onnx.NodeProto, ins: list, opset: int) -> list:
    """Evaluate one node on numpy constants (ONNX semantics); _NotFoldable to leave it. The
    shape ops (:data:`_SHAPE_OPS`) and integer arithmetic (:func:`_arithmetic`) by hand,
    anything else through ``onnx.reference`` (:func:`_reference`)."""
    by_hand = _SHAPE_OPS.get(node.op_type)
    out = by_hand(node, ins) if by_hand else _arithmetic(node, ins)
    return out if out is not None else _reference(node, ins, opset)


def _axes_of(node: onnx.NodeProto, ins: list, k: int) -> list[int] | None:
    """The axes of a node: input ``k`` (newer opsets) or the ``axes`` attribute."""
    if len(ins) > k and ins[k] is not None:
        return _int_list(ins[k])
    v = _attr(node, "axes")
    return None if v is None else [int(a) for a in v]


def _cast(node, ins) -> list:
    to = int(_attr(node, "to"))
    try:
        dt = helper.tensor_dtype_to_np_dtype(to)
    except Exception:  # noqa: BLE001
        raise _NotFoldable(f"cast to {_type_name(to)}") from None
    if np.dtype(dt).kind not in "biuf":
        raise _NotFoldable(f"cast to {_type_name(to)}")
    return [np.asarray(ins[0]).astype(dt)]


def _gather(node, ins) -> list:
    axis = int(_attr(node, "axis", 0))
    return [np.take(ins[0], np.asarray(ins[1], np.int64), axis=axis)]


def _concat(node, ins) -> list:
    axis = int(_attr(node, "axis", 0))
    return [np.concatenate([np.asarray(v) for v in ins if v is not None], axis=axis)]


def _unsqueeze(node, ins) -> list:
    x = ins[0]
    axes = _axes_of(node, ins, 1) or []
    rank = x.ndim + len(axes)
    y = x
    for a in sorted(a % rank for a in axes):
        y = np.expand_dims(y, a)
    return [y]


def _squeeze(node, ins) -> list:
    x = ins[0]
    axes = _axes_of(node, ins, 1)
    if axes is None:
        return [np.squeeze(x)]
    return [np.squeeze(x, axis=tuple(a % max(x.ndim, 1) for a in axes))]


def _constant_of_shape(node, ins) -> list:
    shape = _int_list(ins[0])
    _guard(_numel(shape), node)
    val = _attr(node, "value")
    v = numpy_helper.to_array(val).reshape(-1) if val is not None else np.zeros(1, np.float32)
    return [np.full(shape, v[0], dtype=v.dtype)]


def _range(node, ins) -> list:
    start, limit, delta = (np.asarray(v).reshape(()) for v in ins[:3])
    if delta == 0:
        raise _NotFoldable("delta 0")
    count = max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0)
    _guard(count, node)
    return [(start + np.arange(count) * delta).astype(start.dtype)]


def _reshape(node, ins) -> list:
    x = ins[0]
    out = _reshape_dims(list(x.shape), _int_list(ins[1]), int(_attr(node, "allowzero", 0)))
    if out is None:
        raise _NotFoldable(f"cannot reshape {list(x.shape)} to {_int_list(ins[1])}")
    return [x.reshape(out)]


def _slice(node, ins) -> list:
    x = ins[0]
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


def _transpose(node, ins) -> list:
    perm = _attr(node, "perm")
    return [np.transpose(ins[0], None if perm is None else list(perm))]


def _expand(node, ins) -> list:
    x = ins[0]
    shape = np.broadcast_shapes(x.shape, tuple(_int_list(ins[1])))
    _guard(_numel(shape), node)
    return [np.broadcast_to(x, shape).copy()]


def _tile(node, ins) -> list:
    x = ins[0]
    reps = _int_list(ins[1])
    _guard(x.size * _numel(reps), node)
    return [np.tile(x, reps)]


_SHAPE_OPS = {
    "Identity": lambda node, ins: [ins[0] if ins else None],
    "Cast": _cast,
    "CastLike": lambda node, ins: [np.asarray(ins[0]).astype(ins[1].dtype)],
    "Gather": _gather,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": _concat,
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "Reshape": _reshape,
    "Slice": _slice,
    "Transpose": _transpose,
    "Expand": _expand,
    "Tile": _tile,
}
"""op_type -> ``fn(node, ins)``: the shape ops the folder evaluates by hand."""

_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Equal": np.equal,
           "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal,
           "GreaterOrEqual": np.greater_equal, "And": np.logical_and,
           "Or": np.logical_or, "Max": np.maximum, "Min": np.minimum}
_UNARY = {"Neg": np.negative, "Abs": np.abs, "Sqrt": np.sqrt, "Floor": np.floor,
          "Ceil": np.ceil, "Not": np.logical_not, "Sign": np.sign, "Exp": np.exp,
          "Log": np.log, "Reciprocal": np.reciprocal}
_REDUCE = {"ReduceProd": np.prod, "ReduceSum": np.sum, "ReduceMax": np.max,
           "ReduceMin": np.min}


def _arithmetic(node, ins) -> list | None:
    """Elementwise ops, Where and the Reduce ops that keep the dtype (ONNX: integer Div
    truncates toward zero); None for anything else (left to ``onnx.reference``)."""
    op = node.op_type
    x = ins[0] if ins else None
    if op in _BINARY and len(ins) == 2:
        a, b = np.asarray(ins[0]), np.asarray(ins[1])
        _guard(_numel(np.broadcast_shapes(a.shape, b.shape)), node)
        out = _BINARY[op](a, b)
        return [out.astype(a.dtype) if op in ("Add", "Sub", "Mul", "Max", "Min") else out]
    if op == "Div":
        a, b = np.asarray(ins[0]), np.asarray(ins[1])
        if a.dtype.kind in "iu":
            if np.any(b == 0):
                raise _NotFoldable("integer division by zero")
            q = np.abs(a) // np.abs(b) * np.sign(a) * np.sign(b)  # ONNX truncates toward zero
            return [q.astype(a.dtype)]
        return [(a / b).astype(a.dtype)]
    if op in _UNARY:
        return [_UNARY[op](np.asarray(x)).astype(np.asarray(x).dtype)]
    if op == "Where":
        return [np.where(ins[0], ins[1], ins[2])]
    if op in _REDUCE and x is not None:
        axes = _axes_of(node, ins, 1)
        keep = bool(_attr(node, "keepdims", 1))
        if not axes and _attr(node, "noop_with_empty_axes", 0):
            return [x]
        ax = None if not axes else tuple(a % x.ndim for a in axes)
        return [np.asarray(_REDUCE[op](x, axis=ax, keepdims=keep)).astype(x.dtype)]
    return None


def _reference(node, ins, opset: int) -> list:
    """Any other op: the ONNX reference implementation, on small inputs only."""
    if sum(np.asarray(v).size for v in ins if v is not None) > MAX_REFERENCE_ELEMENTS:
        raise _NotFoldable("inputs too large to fold")
    try:
        from onnx.reference import ReferenceEvaluator
        ev = ReferenceEvaluator(node, opsets={"": opset})
        names = [n for n in node.input]
        feeds = {n: v for n, v in zip(names, ins) if n}
        outs = ev.run(None, feeds)
    except Exception as e:  # noqa: BLE001
        raise _NotFoldable(f"not evaluable ({type(e).__name__}: {e})") from e
    for o in outs:
        _guard(np.asarray(o).size, node)
    return [np.asarray(o) for o in outs]

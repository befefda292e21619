"""Which initializers train: quantized weights dequantized into float32 parameters
(:func:`_dequantize_weights`, shared with the export), the rule for one-element float
initializers (:func:`classify_scalars`, a part of the checks stage) and the list of every
initializer that does not train, with the reason (:func:`frozen_list`, the bundle's ``frozen``).

The rule for a float initializer holding one value (shape ``[]``, ``[1]``, ...) used by the
graph: it stays a frozen constant when

1. a node reads it where ONNX expects a setting, not data (Dropout's ratio, Clip's bounds,
   Pad's value, a Reshape shape, ...; ``constants._CONST_SLOTS``), or as the exponent of Pow;
2. it is one of the numbers of a GELU written out with Erf or Tanh
   (``0.5 x (1 + erf(x / sqrt 2))``, ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))``);
3. its name is one an exporter generates for constants (``val_12``, ``onnx::Div_7``,
   ``/Constant_output_0``, ``scalar_tensor_default``, ``const_fold_opt__3``, ``ortshared_*``),
   unless it is the slope of a PRelu (``nn.PReLU()``'s one weight, which the dynamo exporter's
   optimizer renames ``val_7``) or an operand of a product (MatMul's A or B, Gemm's A or B,
   Conv's W: ``nn.Linear(1, 1)`` on a 3-D input exports its weight as ``onnx::MatMul_12``);

otherwise it is a parameter and trains, as a scalar ``nn.Parameter`` does in PyTorch (torch's
exporters name parameters by their ``state_dict`` key, e.g. ``scale``). Larger float
initializers train (BatchNorm running statistics are buffers) unless they hold an infinity or
NaN: an additive attention mask, e.g. a registered buffer ``triu(full((T, T), -inf), 1)``,
which Adam would turn into a learned bias (and weight decay into NaN).
"""
from __future__ import annotations

import math
import re

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from .constants import _CONST_SLOTS, _DEFAULT_DOMAINS, _FLOAT_TYPES, _FOLD_ONLY, _MIRROR
from .protos import _attr, _constant_value, _dtype_name, _node_names, _type_name
from .shapes import _numel
from .state import ImportState

GENERATED_NAME = re.compile(r"^(_?val_\d+|onnx::.*|/.*|.*Constant(_\d+)?_output_\d+|"
                            r"scalar_tensor.*|const_fold_opt__\d+|ortshared_.*)$")
_GELU = {"sqrt2": math.sqrt(2.0), "inv_sqrt2": 1 / math.sqrt(2.0), "one": 1.0, "half": 0.5,
         "cube": 0.044715, "sqrt_2_over_pi": math.sqrt(2 / math.pi), "three": 3.0, "two": 2.0}
# the inputs that hold weights (a one-value one is still a weight when an exporter renamed it:
# a product's operand, nn.PReLU()'s one slope)
_WEIGHT_SLOTS = {"MatMul": (0, 1), "Gemm": (0, 1), "Conv": (1,), "ConvTranspose": (1,),
                 "PRelu": (1,)}
_SLOT_NAMES = {"Reshape": {1: "shape"}, "Expand": {1: "shape"}, "Tile": {1: "repeats"}}
_QUANTIZED = {TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16,
              TensorProto.INT32, TensorProto.INT4, TensorProto.UINT4}


def _near(v, key) -> bool:
    return v is not None and abs(float(v) - _GELU[key]) <= 1e-3 * abs(_GELU[key])


def _dequantize(x: np.ndarray, scale: np.ndarray, zero, axis: int, block: int) -> np.ndarray:
    """``(x - zero) * scale`` with ONNX DequantizeLinear's per-tensor, per-axis and blocked
    forms, in float32. ValueError when the shapes do not fit."""
    x = x.astype(np.float32)
    scale = np.asarray(scale, np.float32)
    zero = np.zeros_like(scale) if zero is None else np.asarray(zero).astype(np.float32)
    if scale.size == 1 and not block:
        return ((x - zero.reshape(())) * scale.reshape(())).astype(np.float32)
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis < x.ndim:
        raise ValueError(f"axis {axis} is outside the weights' {x.ndim} dims")
    if block:
        if scale.ndim != x.ndim:
            raise ValueError(f"blocked scale of shape {list(scale.shape)} for weights of "
                             f"shape {list(x.shape)}")
        scale = np.repeat(scale, block, axis=axis).take(range(x.shape[axis]), axis=axis)
        zero = np.repeat(zero, block, axis=axis).take(range(x.shape[axis]), axis=axis)
    else:
        if scale.ndim != 1 or scale.size != x.shape[axis]:
            raise ValueError(f"scale of shape {list(scale.shape)} does not fit axis {axis} of "
                             f"weights of shape {list(x.shape)}")
        shape = [1] * x.ndim
        shape[axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return ((x - zero) * scale).astype(np.float32)


def _dequantize_weights(model: onnx.ModelProto) -> tuple[list[dict], list[str]]:
    """In place: every DequantizeLinear of a quantized weight initializer (scale and zero point
    from initializers or Constant nodes) becomes a float32 initializer named as its output, next
    to the quantized one; the node goes. Returns ``(done, problems)``: ``done`` is one dict per
    rewrite (``node``, ``output``, ``weights``, ``dtype``, ``shape``, ``inputs``); a
    DequantizeLinear of activations is left (the op checks refuse it)."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    consts = {n.output[0]: n for n in g.node
              if n.op_type == "Constant" and n.domain in _DEFAULT_DOMAINS and n.output}
    done, problems, drop = [], [], []
    for n, name in zip(list(g.node), _node_names(g)):
        if n.op_type != "DequantizeLinear" or n.domain not in _DEFAULT_DOMAINS or \
                not n.input or n.input[0] not in inits:
            continue
        t = inits[n.input[0]]
        if t.data_type not in _QUANTIZED | {TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2}:
            continue

        def value(k, n=n):
            if len(n.input) <= k or not n.input[k]:
                return None
            x = n.input[k]
            if x in inits:
                return numpy_helper.to_array(inits[x])
            if x in consts:
                return _constant_value(consts[x])
            raise ValueError(f"input {k} {x!r} is computed, not an initializer")
        try:
            w = _dequantize(numpy_helper.to_array(t), value(1), value(2),
                            int(_attr(n, "axis", 1)), int(_attr(n, "block_size", 0) or 0))
        except Exception as e:  # noqa: BLE001 - bad shapes, exotic dtypes
            problems.append(f"node {name} (DequantizeLinear) cannot dequantize initializer "
                            f"{t.name!r} ({_type_name(t.data_type)} {list(t.dims)}): {e}")
            continue
        new = numpy_helper.from_array(w, n.output[0])
        pos = list(g.initializer).index(t) + 1
        g.initializer.insert(pos, new)
        drop.append(n)
        done.append({"node": name, "output": n.output[0], "weights": t.name,
                     "dtype": _dtype_name(t.data_type), "shape": list(t.dims),
                     "inputs": [x for x in n.input if x]})
    for n in drop:
        g.node.remove(n)
    return done, problems


def note_dequantized(s: ImportState, done: list[dict]) -> None:
    """``s.dequantized`` and a note for each weight :func:`_dequantize_weights` rewrote."""
    s.dequantized = {d["output"]: d for d in done}
    for d in done:
        s.notes.append(
            f"node {d['node']} (DequantizeLinear): the {d['dtype']} weights "
            f"{d['weights']!r} {d['shape']} are dequantized into the float32 parameter "
            f"{d['output']!r}, which trains; the trained model is exported with float32 "
            "weights there")


def classify_scalars(s: ImportState) -> None:
    """``s.constant_reason``: {name: why it stays a constant} and ``s.scalar_params``
    (the one-element float initializers that train), by the module docstring's rule; larger
    float initializers holding an infinity or NaN (masks) are constants too."""
    g = s.g
    uses: dict[str, list] = {}
    for n, name in zip(g.node, s.names):
        for k, x in enumerate(n.input):
            if x:
                uses.setdefault(x, []).append((n, name, k))
    scalars = {t.name: float(numpy_helper.to_array(t).reshape(-1)[0])
               for t in g.initializer
               if t.data_type in _FLOAT_TYPES and _numel(t.dims) == 1 and t.name in uses}
    gelu = _gelu_constants(s, scalars, uses)
    s.scalar_params = []  # constant_reason may hold masks already (masked_fill.py)
    _non_finite(s, uses)
    for x, v in scalars.items():
        why = None
        for n, name, k in uses[x]:
            slot = _SLOT_NAMES.get(n.op_type, {}).get(k) or _MIRROR.get(n.op_type, {}).get(k)
            if k in _CONST_SLOTS.get(n.op_type, ()) or n.op_type in _FOLD_ONLY:
                why = (f"the {slot or f'input {k}'} of node {name} ({n.op_type}), a "
                       "setting rather than data")
            elif n.op_type == "Pow" and k == 1:
                why = f"the exponent of node {name} (Pow)"
            if why:
                break
        if why is None and x in gelu:
            why = f"a constant ({v:g}) of the GELU written out around node {gelu[x]}"
        weight = any(k in _WEIGHT_SLOTS.get(n.op_type, ()) for n, _, k in uses[x])
        if why is None and GENERATED_NAME.match(x) and not weight:
            why = f"a constant ({v:g}) with an exporter-generated name"
        if why:
            s.constant_reason[x] = why
        else:
            s.scalar_params.append(x)
    if s.scalar_params:
        s.notes.append("one-element float initializers that train as parameters "
                       "(like a scalar nn.Parameter; --freeze NAME keeps one fixed): "
                       + ", ".join(map(repr, s.scalar_params)))


def _non_finite(s: ImportState, uses: dict) -> None:
    """Float initializers of more than one value, read by the graph, that hold an infinity or
    NaN (additive masks) into ``s.constant_reason``."""
    for t in s.g.initializer:
        if t.data_type in _FLOAT_TYPES and _numel(t.dims) > 1 and t.name in uses:
            v = numpy_helper.to_array(t)
            kinds = [k for k, bad in (("-inf", np.isneginf(v)), ("+inf", np.isposinf(v)),
                                      ("NaN", np.isnan(v))) if bad.any()]
            if kinds:
                s.constant_reason[t.name] = (f"holds {' and '.join(kinds)} (a mask, e.g. a "
                                             "registered attention-mask buffer): a constant")


def _gelu_constants(s: ImportState, scalars: dict, uses: dict) -> dict:
    """{scalar initializer: Erf / Tanh node name} for the numbers of a written-out GELU."""
    g = s.g
    producer = {o: (n, name) for n, name in zip(g.node, s.names) for o in n.output}
    found: dict[str, str] = {}

    def const(n, key):  # the input of n that is a scalar initializer near _GELU[key]
        return next((x for x in n.input if _near(scalars.get(x), key)), None)

    def other(n, c):
        return next((x for x in n.input if x != c), None)

    for e, ename in zip(g.node, s.names):
        if e.op_type not in ("Erf", "Tanh") or not e.input:
            continue
        p = producer.get(e.input[0], (None, None))[0]
        if p is None:
            continue
        if e.op_type == "Erf":
            c = const(p, "sqrt2") if p.op_type == "Div" else \
                const(p, "inv_sqrt2") if p.op_type == "Mul" else None
            marks = [c]
        else:  # tanh form: Mul(sqrt(2/pi), Add(x, Mul(0.044715, Pow(x, 3))))
            c = const(p, "sqrt_2_over_pi") if p.op_type == "Mul" else None
            marks = [c]
            a = producer.get(other(p, c), (None, None))[0] if c else None
            for q in ([a] + [producer.get(x, (None, None))[0] for x in a.input]
                      if a is not None and a.op_type == "Add" else []):
                if q is not None and q.op_type == "Mul":
                    marks.append(const(q, "cube"))
                    r = producer.get(other(q, const(q, "cube")), (None, None))[0]
                    if r is not None and r.op_type == "Pow":
                        marks.append(const(r, "three"))
        if c is None:
            continue
        # After Erf / Tanh: + 1, then x * ... and * 0.5 (or / 2), in either order.
        frontier, seen = [e.output[0]], set()
        for _ in range(3):
            nxt = []
            for v in frontier:
                for n, _, _ in uses.get(v, []):
                    if id(n) in seen or n.op_type not in ("Add", "Mul", "Div"):
                        continue
                    seen.add(id(n))
                    marks += [const(n, "one") if n.op_type == "Add" else
                              const(n, "half") if n.op_type == "Mul" else const(n, "two")]
                    nxt += list(n.output)
            frontier = nxt
        x_in = other(p, c)  # 0.5 * x computed first
        for n, _, _ in uses.get(x_in, []):
            if n.op_type == "Mul" and const(n, "half"):
                marks.append(const(n, "half"))
        for m in marks:
            if m:
                found.setdefault(m, ename)
    return found


def frozen_list(s: ImportState, tensor_names: set, constants: dict) -> list[dict]:
    """Every initializer that is not a trained tensor, and every float constant of more
    than one value the remaining nodes read, each with the reason (the bundle's
    ``frozen``)."""
    out = []
    deq_inputs = {x: d for d in s.dequantized.values()
                  for x in d["inputs"]}
    for t in s.g.initializer:
        if t.name in tensor_names:
            continue
        if t.name in deq_inputs:
            d = deq_inputs[t.name]
            why = (f"dequantized by node {d['node']} into the float32 parameter "
                   f"{d['output']!r}")
        elif t.name in s.constant_reason:
            why = s.constant_reason[t.name]
        elif t.name in constants:
            why = _constant_reason(s, t.name)
        elif t.name in s.scalar_params:
            continue
        elif any(t.name in n.input for n in s.g.node):
            why = "folded with the constant shape arithmetic (no node reads it at run time)"
        else:
            why = "not used by the graph"
        out.append({"name": t.name, "shape": list(t.dims),
                    "dtype": _dtype_name(t.data_type), "reason": why})
    inits = {t.name for t in s.g.initializer}
    for x, c in constants.items():
        if x not in inits and c["dtype"].startswith("float") and len(c["values"]) > 1:
            out.append({"name": x, "shape": c["shape"], "dtype": c["dtype"],
                        "reason": "computed from Constant nodes (not an initializer), "
                                  f"read by {', '.join(_users_of(s, x)[:3])}"})
    return out


def _constant_reason(s: ImportState, x: str) -> str:
    """Why the constant ``x`` is not data: the setting it is of its first reader."""
    for n, name in zip(s.g.node, s.names):
        if name in s.folded:
            continue
        for k, i in enumerate(n.input):
            if i == x and k in _CONST_SLOTS.get(n.op_type, ()):
                slot = _SLOT_NAMES.get(n.op_type, {}).get(k) or \
                    _MIRROR.get(n.op_type, {}).get(k) or f"input {k}"
                return f"the {slot} of node {name} ({n.op_type}), a setting rather than data"
    return f"a constant read by {', '.join(_users_of(s, x)[:3]) or 'the graph'}"


def _users_of(s: ImportState, x: str) -> list[str]:
    return [f"{name} ({n.op_type})" for n, name in zip(s.g.node, s.names)
            if x in n.input and name not in s.folded]

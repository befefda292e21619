"""The shape and attribute rules of the layout ops (ONNX Transpose, Concat, Slice, Pad, Expand,
Split): ``infer`` and the per-op specs that ``layout.py`` lowers to strided gathers.
Attribute-like inputs (Slice starts/ends/axes/steps, Pad pads/axes, Expand shape, Split split)
must be constants of the model description; the errors are ``GraphError`` naming the node and
the input."""

from ..errors import GraphError

MAX_RANK = 6


def _strides(shape) -> list:
    """Row-major element strides of a contiguous tensor of ``shape``."""
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= d
    return out[::-1]


def _error(node, msg):
    return GraphError(f"node {node['name']} ({node['op_type']}): {msg}")


def _input_values(node, k, values, what):
    """The values of constant input ``k`` (None when absent); GraphError when not constant."""
    inputs = node["inputs"]
    if len(inputs) <= k or not inputs[k]:
        return None
    if values[k] is None:
        raise _error(node, f"input {k} {inputs[k]!r} ({what}) is not a constant of the model; "
                           "only constant " + what + " are supported")
    return [int(v) for v in values[k]]


def _axes(node, axes, rank):
    """Axes normalised to [0, rank); GraphError when out of range or repeated."""
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise _error(node, f"axis {a} out of range for rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise _error(node, f"repeated axes {list(axes)}")
    return out


def _check_rank(node, shape):
    if len(shape) > MAX_RANK:
        raise _error(node, f"rank {len(shape)} > {MAX_RANK} is not supported")


# ---- per-op geometry (shared by infer, forward and backward) ---------------------------------

def transpose_perm(node, rank):
    """``perm`` attribute (default: the dims reversed), checked to be a permutation."""
    perm = node.get("attrs", {}).get("perm")
    perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
    if sorted(perm) != list(range(rank)):
        raise _error(node, f"perm {perm} is not a permutation of {rank} dims")
    return perm


def concat_axis(node, shapes):
    """Normalised ``axis``; GraphError when ranks or non-axis sizes differ."""
    rank = len(shapes[0])
    if "axis" not in node.get("attrs", {}):
        raise _error(node, "missing attribute axis")
    axis = int(node["attrs"]["axis"])
    if not -rank <= axis < rank:
        raise _error(node, f"axis {axis} out of range for rank {rank}")
    axis %= rank
    for s in shapes:
        if len(s) != rank or any(a != b for d, (a, b) in enumerate(zip(s, shapes[0]))
                                 if d != axis):
            raise _error(node, f"input shapes {shapes} differ outside axis {axis}")
    return axis


def concat_reads(node, shapes):
    """The shapes a Concat concatenates: its inputs' own, or where ``rewrites/concats.py``
    folded a Transpose or an Expand into it (attribute ``_reads``, per input None, {"perm":
    p} or {"expand": True}) the shape that op made: the input's dims permuted by p, or the
    input broadcast to the other inputs' dims (its own size along the axis). GraphError when
    an input cannot broadcast so."""
    reads = node.get("attrs", {}).get("_reads")
    if not reads:
        return [list(s) for s in shapes]
    if len(reads) != len(shapes):
        raise _error(node, f"_reads has {len(reads)} entries for {len(shapes)} inputs")
    out = [[s[q] for q in r["perm"]] if r and "perm" in r else list(s)
           for s, r in zip(shapes, reads)]
    ref = next((o for o, r in zip(out, reads) if not (r and r.get("expand"))), None)
    if ref is None:
        raise _error(node, "every input is a folded Expand (no shape to broadcast to)")
    axis = int(node.get("attrs", {}).get("axis", 0)) % len(ref)
    for k, r in enumerate(reads):
        if r and r.get("expand"):
            xp = [1] * (len(ref) - len(out[k])) + out[k]
            if len(xp) != len(ref) or any(a not in (1, b) for d, (a, b) in
                                          enumerate(zip(xp, ref)) if d != axis):
                raise _error(node, f"input {k} of shape {out[k]} does not broadcast to "
                                   f"{ref} outside axis {axis}")
            out[k] = [xp[d] if d == axis else ref[d] for d in range(len(ref))]
    return out


def slice_spec(node, shape, values):
    """Per dim of x: (start, step, count) of ONNX Slice, starts/ends clamped per the operator
    definition (step > 0: [0, dim]; step < 0: start in [0, dim - 1], end in [-1, dim - 1]).

    ``values``: per node input, its constant values or None. Opset >= 10 takes starts, ends,
    axes, steps from inputs 1..4, older opsets from the attributes starts, ends, axes.
    """
    rank = len(shape)
    if len(node["inputs"]) > 1:
        starts = _input_values(node, 1, values, "starts")
        ends = _input_values(node, 2, values, "ends")
        if starts is None or ends is None:
            raise _error(node, "starts and ends inputs are required")
        axes = _input_values(node, 3, values, "axes")
        steps = _input_values(node, 4, values, "steps")
    else:
        a = node.get("attrs", {})
        if "starts" not in a or "ends" not in a:
            raise _error(node, "attributes starts and ends are required (opset < 10)")
        starts, ends = [int(v) for v in a["starts"]], [int(v) for v in a["ends"]]
        axes, steps = a.get("axes"), None
        axes = None if axes is None else [int(v) for v in axes]
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise _error(node, f"starts {starts}, ends {ends}, axes {axes}, steps {steps} differ "
                           "in length")
    spec = [(0, 1, d) for d in shape]
    for ax, s, e, st in zip(_axes(node, axes, rank), starts, ends, steps):
        dim = shape[ax]
        if st == 0:
            raise _error(node, "step 0")
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
            count = max(0, (e - s + st - 1) // st)
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
            count = max(0, (s - e + (-st) - 1) // (-st))
        spec[ax] = (s if count else 0, st, count)
    return spec


def pad_spec(node, shape, values):
    """Per dim of x: (begin, end) pads (negative crops) and the constant: ``(pads, value,
    value_is_input)``. Opset >= 11: pads, constant_value, axes (18) are inputs 1..3, older
    opsets the attributes pads and value. Modes "constant", "reflect" (pads in [0, dim - 1])
    and "edge" (pads >= 0)."""
    rank = len(shape)
    a = node.get("attrs", {})
    mode = pad_mode(node)
    value, from_input = 0.0, False
    if len(node["inputs"]) > 1:
        pads = _input_values(node, 1, values, "pads")
        if pads is None:
            raise _error(node, "the pads input is required")
        if len(node["inputs"]) > 2 and node["inputs"][2]:
            if values[2] is not None:
                value = float(values[2][0]) if len(values[2]) else 0.0
            else:
                from_input = True  # a tensor (e.g. a float initializer): read on the device
        axes = _input_values(node, 3, values, "axes")
    else:
        if "pads" not in a:
            raise _error(node, "attribute pads is required (opset < 11)")
        pads, value, axes = [int(v) for v in a["pads"]], float(a.get("value", 0.0)), None
    axes = list(range(rank)) if axes is None else _axes(node, axes, rank)
    if len(pads) != 2 * len(axes):
        raise _error(node, f"pads {pads} do not have 2 x {len(axes)} entries")
    spec = [(0, 0)] * rank
    for i, ax in enumerate(axes):
        spec[ax] = (pads[i], pads[i + len(axes)])
    for d, (lo, hi) in zip(shape, spec):
        if d + lo + hi < 0:
            raise _error(node, f"pads {pads} crop more than the dims {shape}")
        if mode != "constant" and (min(lo, hi) < 0 or (lo or hi) and d == 0
                                   or mode == "reflect" and max(lo, hi) > d - 1):
            raise _error(node, f"pads {pads} do not fit mode {mode!r} on the dims {shape} "
                               "(reflect: 0 <= pad <= dim - 1; edge: pad >= 0)")
    return spec, value, from_input


def pad_mode(node) -> str:
    """Pad's mode: "constant", "reflect" or "edge"; GraphError for another ("wrap")."""
    mode = node.get("attrs", {}).get("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("constant", "reflect", "edge"):
        raise _error(node, f"mode {mode!r} is not supported (only 'constant', 'reflect', "
                           "'edge')")
    return mode


def split_spec(node, shape, values):
    """``(axis, sizes)`` of Split: the sizes from the ``split`` input (opset 13+) or attribute,
    else ``num_outputs`` (opset 18) or one per output, equal parts (the last one smaller when
    the axis does not divide: opset 18); GraphError when they do not add up to the axis."""
    a = node.get("attrs", {})
    rank, outs = len(shape), len(node["outputs"])
    axis = int(a.get("axis", 0))
    if not -rank <= axis < rank:
        raise _error(node, f"axis {axis} out of range for rank {rank}")
    axis %= rank
    dim = shape[axis]
    sizes = _input_values(node, 1, values, "split")
    if sizes is None and a.get("split") is not None:
        sizes = [int(v) for v in a["split"]]
    if sizes is None:
        parts = int(a.get("num_outputs", outs))
        size = -(-dim // parts)
        sizes = [max(0, min(size, dim - k * size)) for k in range(parts)]
    if len(sizes) != outs or sum(sizes) != dim or min(sizes) < 0:
        raise _error(node, f"split {sizes} does not cut axis {axis} of size {dim} into "
                           f"{outs} outputs")
    return axis, sizes


def with_batch(node, want, batch):
    """Expand's shape input with the batch size at the node's ``batch_axes`` (the importer's
    form of an Expand to the batch, ``cls.expand(N, -1, -1)``); as it is without them."""
    axes = (node.get("attrs") or {}).get("batch_axes")
    if not axes or want is None:
        return want
    want = [int(v) for v in want]
    for i in axes:
        want[i] = batch
    return want


def expand_shape(node, shape, values):
    """The output shape: NumPy (bidirectional) broadcasting of x's shape and the shape input."""
    want = _input_values(node, 1, values, "shape")
    if want is None:
        raise _error(node, "the shape input is required")
    rank = max(len(shape), len(want))
    a = [1] * (rank - len(shape)) + list(shape)
    w = [1] * (rank - len(want)) + want
    out = []
    for da, dw in zip(a, w):
        if da != dw and 1 not in (da, dw):
            raise _error(node, f"shape {list(shape)} does not broadcast to {want}")
        out.append(da if dw == 1 else dw)
    return out


def infer(node, ins, consts):
    """Output shapes by the ONNX operator definitions; GraphError naming the node when the
    shapes or attributes do not fit, a mode is unsupported or an attribute-like input
    (starts, ends, axes, steps, pads, shape) is not a constant."""
    op, x = node["op_type"], ins[0]
    if op == "Concat":
        shapes = [s for s in ins]
        if not shapes or any(s is None for s in shapes):
            raise _error(node, "every input must be present")
        shapes = concat_reads(node, shapes)
        _check_rank(node, shapes[0])
        axis = concat_axis(node, shapes)
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        return [out]
    _check_rank(node, x)
    if op == "Transpose":
        return [[x[p] for p in transpose_perm(node, len(x))]]
    if op == "Slice":
        return [[c for _, _, c in slice_spec(node, x, consts)]]
    if op == "Pad":
        spec, _, _ = pad_spec(node, x, consts)
        return [[d + lo + hi for d, (lo, hi) in zip(x, spec)]]
    if op == "Split":
        axis, sizes = split_spec(node, x, consts)
        return [[s if d == axis else x[d] for d in range(len(x))] for s in sizes]
    if op == "Expand":
        out = expand_shape(node, x, consts)
        _check_rank(node, out)
        return [out]
    raise _error(node, "not a layout op")

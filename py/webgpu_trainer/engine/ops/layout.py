"""Data movement: ONNX Transpose, Concat, Slice, Pad, Expand and Split, forward and backward
(shaders/layout.wgsl; Pad's modes reflect and edge: shaders/pad.wgsl), float32 tensors of rank
<= 6.

Every op and gradient is one strided gather (``strided``): per output dimension a size, an
affine map of the index into the source (``t = idx * mul + add``, then ``/ div`` when exact)
and bounds; out-of-bounds cells get a fill value. The gradients follow PyTorch's autograd:

- Transpose: dx = transpose(dy, inverse(perm));
- Concat: dx_k = the slice of dy along ``axis`` that input k filled;
- Slice: dx = dy scattered back (zeros where nothing was selected), written as a gather over
  dx: dx[j] = dy[(j - start) / step] when exact and in range, else 0;
- Pad: dx = the crop of dy (zeros where negative pads cropped x); d constant_value = the sum of
  dy over the padded cells (``masked_sum``) when the value is a tensor that needs a gradient;
  reflect / edge: dy scatter-added back onto the cells each padded cell copies, one padded dim
  after the other (torch's reflection_pad / replication_pad backward);
- Expand: dx = dy summed over the broadcast dimensions (``sum_expanded``, split over
  workgroups when few outputs sum many values, the parts added by reduce.wgsl);
- Split: one copy per output; dx = the outputs' gradients concatenated, zeros for an output
  that has none (torch's ``split`` backward). Parts the plan made views of x (and of dx:
  ``fusion.split_offsets``) need neither.

Attribute-like inputs (Slice starts/ends/axes/steps, Pad pads/axes, Expand shape, Split split)
must be constants of the model description; ``infer`` (layout_rules.py, with the per-op
specs) raises ``GraphError`` naming the node and the input otherwise. The form (inputs or
attributes) follows the node: inputs when present (Slice opset >= 10, Pad opset >= 11, Split
opset >= 13), else the attributes of the older opsets.
"""

import math

from ..backends.base import groups_1d
from .gemm import reduce_splits
from .layout_rules import (MAX_RANK, _strides, concat_axis, concat_reads, pad_mode, pad_spec,
                           slice_spec, split_spec, transpose_perm)
from .layout_rules import infer  # noqa: F401  (the ops contract: every family has infer)

TYPES = ("Concat", "Expand", "Pad", "Slice", "Split", "Transpose")
GRAD_EVERY_OUTPUT = True  # the plan gives every output a gradient (Split), not only the first


def _perm(node, opset, shapes):
    """Transpose's default perm: the axes reversed (needs the input's rank)."""
    x = shapes(node["inputs"][0])
    return list(range(len(x)))[::-1] if x is not None else None


def _split(node, opset, shapes):
    """Split's default sizes: ``num_outputs`` (else one per output) equal parts, the last
    smaller (needs the input's size along ``axis``)."""
    a, x = node["attrs"], shapes(node["inputs"][0])
    if x is None:
        return None
    ax = a["axis"] % len(x)
    parts = int(a.get("num_outputs", len(node["outputs"])))
    if isinstance(x[ax], int) and parts:
        size = -(-x[ax] // parts)
        return [min(size, x[ax] - i * size) for i in range(parts)]
    return None


ATTRS = {"Concat": {}, "Expand": {}, "Slice": {}, "Pad": {"mode": "constant", "value": 0.0},
         "Transpose": {"perm": _perm}, "Split": {"axis": 0, "split": _split}}


def normalize(node, opset, shapes) -> list:
    """Concat has no default axis: its absence is a problem."""
    if node["op_type"] == "Concat" and "axis" not in node["attrs"]:
        return [f"node {node['name']} (Concat) has no axis attribute"]
    return []


def _values(b, node):
    """Per input: the constant's values (model description) or None."""
    consts = b.plan.graph.constants
    return [consts[i]["values"] if i and i in consts else None for i in node["inputs"]]


# ---- dispatch ----------------------------------------------------------------------------

def _coalesce(dims):
    """Drop size-1 plain dims and merge adjacent plain dims that are contiguous in both the
    source and the destination. A dim is (size, mul, add, div, lim, src_stride, dst_stride);
    plain = (size, 1, 0, 1, size, ...), an identity map."""
    out = []
    for d in dims:
        plain = d[1:5] == (1, 0, 1, d[0])
        if plain and d[0] == 1:
            continue
        if plain and out:
            o = out[-1]
            if o[1:5] == (1, 0, 1, o[0]) and o[5] == d[0] * d[5] and o[6] == d[0] * d[6]:
                size = o[0] * d[0]
                out[-1] = (size, 1, 0, 1, size, d[5], d[6])
                continue
        out.append(tuple(d))
    return out


def _pack(n, dims, src_off=0, dst_off=0, value=0.0, use_fill=0, red=0, splits=1, red_dims=()):
    """The Params fields of layout.wgsl: ``dims`` as (size, mul, add, div, lim, src_stride,
    dst_stride) fill geo (size, mul, add, div) and ext (lim, src_stride, dst_stride); for
    ``sum_expanded`` ext holds the reduced ``red_dims`` (size, dy_stride) instead."""
    if len(dims) > MAX_RANK or len(red_dims) > MAX_RANK:
        raise ValueError(f"layout kernel: rank {max(len(dims), len(red_dims))} > {MAX_RANK}")
    if any(d[3] <= 0 for d in dims):
        raise ValueError(f"layout kernel: divisors must be positive: {dims}")
    geo, ext = [], []
    for k in range(MAX_RANK):
        geo += list(dims[k][:4]) if k < len(dims) else [1, 1, 0, 1]
        if red_dims:
            ext += [*red_dims[k], 0, 0] if k < len(red_dims) else [1, 0, 0, 0]
        else:
            ext += [*dims[k][4:], 0] if k < len(dims) else [1, 0, 0, 0]
    return dict(n=int(n), rank=len(dims), src_off=int(src_off), dst_off=int(dst_off),
                value=float(value), use_fill=int(use_fill), red=int(red), splits=int(splits),
                red_rank=len(red_dims), quad=0, geo=_rows(geo), ext=_rows(ext))


def _rows(flat) -> list:
    """``flat`` (a multiple of 4 values) as rows of 4 ints (the uniform's vec4<i32>)."""
    return [[int(v) for v in flat[k:k + 4]] for k in range(0, len(flat), 4)]


async def gather(b, x, out, dims, src_off=0, dst_off=0, value=0.0, fill=None):
    """One ``strided`` dispatch over the index space of ``dims`` (see layout.wgsl): writes
    every destination cell it indexes, ``value`` (or ``fill[0]``) where the source is out of
    bounds. When the last dim (after ``_coalesce``) is a plain copy at least 4 long, each
    thread takes 4 consecutive cells (``quad``: one index decomposition for the 4)."""
    # every dim of size 1 (a one-element Concat input): one cell
    dims = _coalesce(dims) or [_plain(1, 0, 0)]
    n = math.prod([d[0] for d in dims])
    if n == 0:
        return
    params = _pack(n, dims, src_off, dst_off, value, 1 if fill is not None else 0)
    last = dims[-1]
    quad = int(last[1:5] == (1, 0, 1, last[0]) and last[0] >= 4)  # plain, 4+ long
    params["quad"] = quad
    await b.kernel("layout", "strided", b.elementwise_groups(_cdiv(n, 4) if quad else n),
                   params=params, x=x, fill=fill, out=out)


def _cdiv(a, b):
    return (a + b - 1) // b


def _plain(size, src_stride, dst_stride):
    return (size, 1, 0, 1, size, src_stride, dst_stride)


async def forward(b, node, ins, outs, train):
    """y = op(x): one gather per output (Concat: one per input)."""
    op, y = node["op_type"], outs[0]
    if op == "Split":
        await _split(b, node, ins[0], outs)
        return
    ys = _strides(y.shape)
    if op == "Concat":
        shapes = concat_reads(node, [t.shape for t in ins])
        axis = concat_axis(node, shapes)
        off = 0
        for t, shape, r in zip(ins, shapes, _reads(node, len(ins))):
            src = _read_strides(t.shape, shape, r)
            dims = [_plain(d, s, o) for d, s, o in zip(shape, src, ys)]
            await gather(b, t, y, dims, dst_off=off * ys[axis])
            off += shape[axis]
        return
    x = ins[0]
    xs = _strides(x.shape)
    if op == "Transpose":
        perm = transpose_perm(node, len(x.shape))
        dims = [_plain(y.shape[d], xs[perm[d]], ys[d]) for d in range(len(perm))]
        await gather(b, x, y, dims)
    elif op == "Slice":
        spec = slice_spec(node, x.shape, _values(b, node))
        dims = [(c, st, s, 1, dim, xst, yst)
                for (s, st, c), dim, xst, yst in zip(spec, x.shape, xs, ys)]
        await gather(b, x, y, dims)
    elif op == "Pad" and pad_mode(node) != "constant":
        await _pad_mode_forward(b, node, x, y)
    elif op == "Pad":
        spec, value, from_input = pad_spec(node, x.shape, _values(b, node))
        dims = [(yd, 1, -lo, 1, xd, xst, yst)
                for (lo, _), xd, yd, xst, yst in zip(spec, x.shape, y.shape, xs, ys)]
        await gather(b, x, y, dims, value=value, fill=ins[2] if from_input else None)
    elif op == "Expand":
        lead = len(y.shape) - len(x.shape)
        xp = [1] * lead + list(x.shape)
        xsp = [0] * lead + xs
        dims = [_plain(yd, 0 if xd == 1 else xst, yst)
                for xd, yd, xst, yst in zip(xp, y.shape, xsp, ys)]
        await gather(b, x, y, dims)


async def backward(b, node, ins, outs, gins, gouts):
    """Writes every non-None ``gins`` (see the module docstring for the formulas)."""
    op, dy = node["op_type"], gouts[0]
    if op == "Split":
        if gins[0] is not None:
            await _split_grad(b, node, ins[0], gins[0], gouts)
        return
    ds = _strides(dy.shape)
    if op == "Concat":
        shapes = concat_reads(node, [t.shape for t in ins])
        axis = concat_axis(node, shapes)
        off = 0
        for t, g, shape, r in zip(ins, gins, shapes, _reads(node, len(ins))):
            if g is not None and r and r.get("expand"):  # summed over the broadcast dims
                await _sum_expanded(b, dy, g, t.shape, shape, ds, off * ds[axis])
            elif g is not None:  # dim j of the input is dim inv[j] of its part of dy
                perm = r["perm"] if r and "perm" in r else list(range(len(shape)))
                inv = [perm.index(j) for j in range(len(perm))]
                dims = [_plain(t.shape[j], ds[inv[j]], gs) for j, gs in
                        enumerate(_strides(t.shape))]
                await gather(b, dy, g, dims, src_off=off * ds[axis])
            off += shape[axis]
        return
    x, dx = ins[0], gins[0]
    xs = _strides(x.shape)
    if op == "Transpose":
        if dx is not None:
            perm = transpose_perm(node, len(x.shape))
            inv = [perm.index(j) for j in range(len(perm))]
            await gather(b, dy, dx, [_plain(x.shape[j], ds[inv[j]], xs[j])
                                     for j in range(len(inv))])
    elif op == "Slice":
        if dx is not None:
            spec = slice_spec(node, x.shape, _values(b, node))
            # t = (idx - start) / step, written with a positive divisor (the kernel's
            # contract): (start - idx) / -step for a negative step.
            dims = [(xd, 1, -s, st, c, dst, xst) if st > 0 else (xd, -1, s, -st, c, dst, xst)
                    for (s, st, c), xd, dst, xst in zip(spec, x.shape, ds, xs)]
            await gather(b, dy, dx, dims, value=0.0)
    elif op == "Pad" and pad_mode(node) != "constant":
        if dx is not None:
            await _pad_mode_backward(b, node, x, dx, dy)
    elif op == "Pad":
        spec, _, from_input = pad_spec(node, x.shape, _values(b, node))
        if dx is not None:
            dims = [(xd, 1, lo, 1, yd, dst, xst)
                    for (lo, _), xd, yd, dst, xst in zip(spec, x.shape, dy.shape, ds, xs)]
            await gather(b, dy, dx, dims, value=0.0)
        if from_input and len(gins) > 2 and gins[2] is not None:
            await _pad_value_grad(b, dy, gins[2], spec, x.shape)
    elif op == "Expand" and dx is not None:
        await _sum_expanded(b, dy, dx, x.shape)


def _reads(node, n) -> list:
    """A Concat's ``_reads`` (rewrites/concats.py): per input None, {"perm": p} or
    {"expand": True}."""
    return node.get("attrs", {}).get("_reads") or [None] * n


def _read_strides(shape, logical, read) -> list:
    """Element strides in a contiguous tensor of ``shape`` of each dim of the ``logical``
    shape a Concat reads it as (``concat_reads``): its own, permuted, or 0 along the dims an
    Expand broadcasts."""
    own = _strides(shape)
    if read and "perm" in read:
        return [own[q] for q in read["perm"]]
    if read and read.get("expand"):
        lead = len(logical) - len(shape)
        padded, strides = [1] * lead + list(shape), [0] * lead + own
        return [0 if n == 1 and m != 1 else st for n, m, st in zip(padded, logical, strides)]
    return own


async def _split(b, node, x, outs):
    """Each output: its part of x along the axis (a copy), unless the plan made it a view of
    x there (``Plan._split_part``)."""
    axis, sizes = split_spec(node, x.shape, _values(b, node))
    xs, off = _strides(x.shape), 0
    for t, size in zip(outs, sizes):
        if t is not None and not _in_place(t, x, off * xs[axis]):
            dims = [_plain(d, s, o) for d, s, o in zip(t.shape, xs, _strides(t.shape))]
            await gather(b, x, t, dims, src_off=off * xs[axis])
        off += size


async def _split_grad(b, node, x, dx, gouts):
    """dx = the outputs' gradients concatenated along the axis, zeros where an output has
    none (every cell out of bounds: the fill value 0)."""
    axis, sizes = split_spec(node, x.shape, _values(b, node))
    xs, off = _strides(x.shape), 0
    for g, size in zip(gouts, sizes):
        shape = [size if d == axis else n for d, n in enumerate(x.shape)]
        if g is not None and _in_place(g, dx, off * xs[axis]):
            off += size  # the plan put this part's gradient in its place in dx
            continue
        if g is not None:
            dims = [_plain(n, s, o) for n, s, o in zip(shape, _strides(shape), xs)]
        else:
            dims = [(n, 1, 0, 1, 0, 0, o) for n, o in zip(shape, xs)]
        await gather(b, g, dx, dims, dst_off=off * xs[axis], value=0.0)
        off += size


def _in_place(part, whole, start) -> bool:
    """Whether tensor ``part`` is the view of ``whole`` from element ``start``."""
    return part.buf is whole.buf and part.offset == whole.offset + 4 * start


_PAD_MODES = {"reflect": 0, "edge": 1}  # pad.wgsl's mode


async def _pad_mode_forward(b, node, x, y):
    """Pad reflect / edge: one dispatch of pad.wgsl ``pad_forward``."""
    spec, _, _ = pad_spec(node, x.shape, _values(b, node))
    geo = [[yd, xd, lo, 0] for (lo, _), xd, yd in zip(spec, x.shape, y.shape)]
    geo += [[1, 1, 0, 0]] * (MAX_RANK - len(geo))
    if y.numel:
        await b.kernel("pad", "pad_forward", groups_1d(y.numel),
                       params=dict(n=y.numel, rank=len(x.shape), mode=_PAD_MODES[pad_mode(node)],
                                   inner=1, big=1, small=1, lo=0, geo=geo), x=x, out=y)


async def _pad_mode_backward(b, node, x, dx, dy):
    """dx = dy folded back along each padded dim in turn (pad.wgsl ``pad_fold``; scratch
    between folds); a plain copy when nothing is padded."""
    spec, _, _ = pad_spec(node, x.shape, _values(b, node))
    padded = [k for k, (lo, hi) in enumerate(spec) if lo or hi]
    if not padded:
        await gather(b, dy, dx, [_plain(d, s, s) for d, s in zip(x.shape, _strides(x.shape))])
        return
    shape, src = list(dy.shape), dy
    for k in padded:
        shape[k] = x.shape[k]
        n = math.prod(shape)
        dst = dx if k == padded[-1] else b.scratch(n)
        params = dict(n=n, rank=0, mode=_PAD_MODES[pad_mode(node)],
                      inner=math.prod(shape[k + 1:]), big=dy.shape[k], small=x.shape[k],
                      lo=spec[k][0], geo=[[1, 1, 0, 0]] * MAX_RANK)
        if n:
            await b.kernel("pad", "pad_fold", groups_1d(n), params=params, x=src, out=dst)
        src = dst


async def _pad_value_grad(b, dy, out, spec, xshape):
    """out[0] = sum of dy over the cells Pad filled with the constant (not read from x)."""
    dims = _coalesce([(yd, 1, -lo, 1, xd, 0, 0)
                      for (lo, _), xd, yd in zip(spec, xshape, dy.shape)])
    n = dy.numel
    parts = b.reduce_parts(n)
    target = b.scratch(parts) if parts > 1 else out
    await b.kernel("layout", "masked_sum", (parts, 1, 1), params=_pack(n, dims), x=dy,
                   out=target)
    if parts > 1:
        await reduce_splits(b, target, out, parts, 1)


def _merge(dims):
    """Drop size-1 (size, stride) dims and merge adjacent contiguous ones."""
    out = []
    for size, stride in dims:
        if size == 1:
            continue
        if out and out[-1][1] == size * stride:
            out[-1] = (out[-1][0] * size, stride)
        else:
            out.append((size, stride))
    return out


def expand_lanes(b, n: int, red: int) -> int:
    """Threads an output of layout.wgsl ``sum_expanded_lanes`` for ``n`` sums of ``red`` terms
    each (an Expand's gradient), or 1 (``sum_expanded``: CPU adapters, whose golden numbers it
    keeps, and outputs that fill the GPU alone). On GPU adapters (``b.tiled``, with
    ``Builder.EXPAND_LANES``) below ``Builder.SPLIT_THREADS`` outputs of at least 16 terms: the
    smallest power of two (2..64) whose threads reach that target, or the largest that leaves
    each lane at least 4 terms. The ViT's class token, [64, 1, 64] summed over the batch of
    64, ran as 64 threads adding 64 terms each in turn (the H100 profile of 2026-12-07 timed
    that dispatch alone at 106 us; 16 lanes of 4 terms now)."""
    if not b.tiled or not getattr(b, "EXPAND_LANES", True) or n >= b.SPLIT_THREADS \
            or red < 16:
        return 1
    lanes = 1
    while lanes < 64 and n * lanes < b.SPLIT_THREADS and 2 * lanes * 4 <= red:
        lanes *= 2
    return lanes


async def _sum_expanded(b, dy, dx, xshape, yshape=None, ystrides=None, src_off=0):
    """dx = dy summed over the dims Expand broadcast (leading ones and x's size-1 dims). dy:
    the whole tensor ``dy``, or the region of it of ``yshape`` at element strides
    ``ystrides`` from element ``src_off`` (a Concat's part, rewrites/concats.py)."""
    yshape = list(dy.shape) if yshape is None else list(yshape)
    ds = _strides(yshape) if ystrides is None else list(ystrides)
    lead = len(yshape) - len(xshape)
    xp = [1] * lead + list(xshape)
    kept = _merge([(yd, st) for xd, yd, st in zip(xp, yshape, ds) if xd == yd])
    red = _merge([(yd, st) for xd, yd, st in zip(xp, yshape, ds) if xd != yd])
    n, r = dx.numel, math.prod([s for s, _ in red])
    if not red:  # nothing broadcast: a copy, dx contiguous in the order of the kept dims
        dst = _strides([s for s, _ in kept])
        await gather(b, dy, dx, [_plain(s, st, o) for (s, st), o in zip(kept, dst)],
                     src_off=src_off)
        return
    lanes = expand_lanes(b, n, r)
    if lanes > 1:
        params = _pack(n, [(s, st, 0, 1, s, 0, 0) for s, st in kept], src_off=src_off, red=r,
                       red_dims=red)
        await b.kernel("layout", "sum_expanded_lanes", groups_1d(n * lanes, 256),
                       params=params, constants={"LANES": lanes}, x=dy, out=dx)
        return
    splits = b.splits(n, r, min_per_split=64)
    target = b.scratch(splits * n) if splits > 1 else dx
    params = _pack(n, [(s, st, 0, 1, s, 0, 0) for s, st in kept], src_off=src_off, red=r,
                   splits=splits, red_dims=red)
    gx, gy, _ = groups_1d(n)
    await b.kernel("layout", "sum_expanded", (gx, gy, splits), params=params, x=dy, out=target)
    if splits > 1:
        await reduce_splits(b, target, dx, splits, n)

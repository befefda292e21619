"""Resize (ONNX, opsets 10-21) over the last two axes of an NCHW input: mode nearest (every
nearest_mode) and linear (bilinear), coordinate_transformation_mode half_pixel,
pytorch_half_pixel, asymmetric and align_corners, the scales or sizes given as constants (as
``nn.Upsample`` / ``F.interpolate`` export). shaders/resize.wgsl.

Each output row (column) reads at most two input rows (columns) with weights: the taps, made on
the host once per node (``taps``). Forward: y = the weighted sum of the 2 x 2 taps. Backward (no
atomics): dx[i] = the sum over the output rows / columns that read i, through the inverse of the
taps (also made on the host).
"""

import math
import struct

from ..backends.base import groups_1d
from . import card
from ..errors import GraphError

TYPES = ("Resize",)
ATTRS = {"Resize": {
    "mode": "nearest", "coordinate_transformation_mode": "half_pixel",
    "nearest_mode": "round_prefer_floor", "cubic_coeff_a": -0.75, "exclude_outside": 0,
    "extrapolation_value": 0.0,
    "antialias": lambda node, opset, shapes: 0 if opset >= 18 else None,
    "keep_aspect_ratio_policy": lambda node, opset, shapes: "stretch" if opset >= 18 else None}}
MODES = ("nearest", "linear")
COORDS = ("half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def normalize(node, opset, shapes) -> list:
    """The attribute values the engine cannot run, as problems naming the node."""
    a, where = node["attrs"], f"node {node['name']} (Resize)"
    checks = (("mode", MODES), ("coordinate_transformation_mode", COORDS),
              ("nearest_mode", NEAREST), ("antialias", (0,)),
              ("keep_aspect_ratio_policy", ("stretch",)))
    return [f"{where}: {key} {a[key]!r} is not supported (only {', '.join(map(str, ok))})"
            for key, ok in checks if key in a and a[key] not in ok]


def output_size(node, shape, consts) -> tuple:
    """((OH, OW), (scale_h, scale_w)) of ``node`` for the input ``shape`` [N, C, H, W];
    ``consts``: per input, the constant's values or None. Raises GraphError naming the node
    for another rank, computed scales / sizes or a scale on N or C."""
    where = f"node {node['name']} (Resize)"
    if len(shape) != 4:
        raise GraphError(f"{where}: input {list(shape)} is not NCHW (only 2-D Resize)")
    ins = node["inputs"]
    slots = (1, None) if len(ins) == 2 else (2, 3)  # opset 10: (X, scales)
    scales, sizes = (consts[k] if k is not None and k < len(ins) and ins[k] else None
                     for k in slots)
    if not scales and not sizes:
        raise GraphError(f"{where}: the scales / sizes input must be a constant")
    axes = node.get("attrs", {}).get("axes")

    def full(v, one):  # the values of ``axes`` (opset 18) spread over the 4 dims
        if axes is None:
            return list(v)
        at = [a % 4 for a in axes]
        return [v[at.index(d)] if d in at else one for d in range(4)]

    if sizes:
        sz = full(sizes, -1)
        if any(s not in (-1, d) for s, d in zip(sz[:2], shape[:2])):
            raise GraphError(f"{where}: sizes {list(sizes)} resize N or C of {list(shape)}")
        out = [int(v) for v in sz[2:]]
        scale = [o / i for o, i in zip(out, shape[2:])]
    else:
        sc = [float(v) for v in full(scales, 1.0)]
        if sc[0] != 1 or sc[1] != 1:
            raise GraphError(f"{where}: scales {list(scales)} resize N or C")
        out = [int(math.floor(i * s)) for i, s in zip(shape[2:], sc[2:])]
        scale = sc[2:]
    if min(out) <= 0:
        raise GraphError(f"{where}: output size {out} of input {list(shape)} is empty")
    return tuple(out), tuple(scale)


def infer(node, ins, consts):
    """[N, C, OH, OW] (see ``output_size``)."""
    (oh, ow), _ = output_size(node, ins[0], consts)
    return [[ins[0][0], ins[0][1], oh, ow]]


def _source(a, x, length, out_len, scale) -> float:
    """The input coordinate of output position x (ONNX coordinate_transformation_mode)."""
    mode = a["coordinate_transformation_mode"]
    if mode == "align_corners":
        return 0.0 if out_len == 1 else x * (length - 1) / (out_len - 1)
    if mode == "asymmetric":
        return x / scale
    if mode == "pytorch_half_pixel" and out_len == 1:
        return 0.0
    return (x + 0.5) / scale - 0.5


def _nearest(a, s: float) -> int:
    mode, frac = a["nearest_mode"], s - math.floor(s)
    if mode == "floor":
        return math.floor(s)
    if mode == "ceil":
        return math.ceil(s)
    if frac == 0.5:
        return math.floor(s) if mode == "round_prefer_floor" else math.ceil(s)
    return math.floor(s + 0.5)


def taps(attrs, length, out_len, scale) -> list:
    """Per output position of one axis: (i0, i1, w0, w1), the two input positions it reads
    and their weights (nearest: one position, weight 1; linear: the source clamped into
    [0, length - 1], then its floor and the next position, PyTorch's and ONNX's edge rule)."""
    out = []
    for x in range(out_len):
        s = _source(attrs, x, length, out_len, scale)
        if attrs["mode"] == "nearest":
            i = min(max(_nearest(attrs, s), 0), length - 1)
            out.append((i, i, 1.0, 0.0))
            continue
        s = min(max(s, 0.0), length - 1)
        i0 = int(math.floor(s))
        i1 = min(i0 + 1, length - 1)
        out.append((i0, i1, 1.0 - (s - i0), s - i0))
    return out


def _inverse(tp, length) -> tuple:
    """(starts [length + 1], entries [(o, w), ...]): the output positions reading each input
    position with their summed weights (entries[starts[i]:starts[i+1]] for input i)."""
    per = [dict() for _ in range(length)]
    for o, (i0, i1, w0, w1) in enumerate(tp):
        for i, w in ((i0, w0), (i1, w1)):
            if w:
                per[i][o] = per[i].get(o, 0.0) + w
    starts, entries = [0], []
    for d in per:
        entries += sorted(d.items())
        starts.append(len(entries))
    return starts, entries


def _table(b, node, x, y) -> tuple:
    """resize.wgsl's Params and its f32 table (made once per node): the taps of the rows then
    the columns ([i0, i1, w0, w1] each), then per axis the inverse (starts, (o, w) pairs)."""
    n, c, h, w = x.shape
    oh, ow = y.shape[2:]
    consts = b.plan.graph.constants
    vals = [consts[i]["values"] if i and i in consts else None for i in node["inputs"]]
    _, (scale_h, scale_w) = output_size(node, x.shape, vals)
    a = card.read(node, ATTRS)
    th, tw = taps(a, h, oh, scale_h), taps(a, w, ow, scale_w)
    data = [v for t in th + tw for v in t]
    offs = {}
    for axis, tp, length in (("h", th, h), ("w", tw, w)):
        starts, entries = _inverse(tp, length)
        offs[axis + "s"], offs[axis + "e"] = len(data), len(data) + len(starts)
        data += [float(v) for v in starts] + [v for e in entries for v in e]
    buf = b.save(node, len(data), "taps")
    b.dev.write(buf, struct.pack(f"<{len(data)}f", *data))
    params = dict(n=0, H=h, W=w, OH=oh, OW=ow, tw=4 * oh, hs=offs["hs"], he=offs["he"],
                  ws=offs["ws"], we=offs["we"])
    return params, buf, n * c


async def forward(b, node, ins, outs, train):
    """y = the weighted sum of each output pixel's 2 x 2 input taps."""
    params, tab, planes = _table(b, node, ins[0], outs[0])
    total = planes * params["OH"] * params["OW"]
    await b.kernel("resize", "resize_forward", groups_1d(total), params={**params, "n": total},
                   x=ins[0], tab=tab, out=outs[0])


async def backward(b, node, ins, outs, gins, gouts):
    """dx = the taps' weights times dy, gathered per input pixel through the inverse taps."""
    if gins[0] is None:
        return
    params, tab, planes = _table(b, node, ins[0], outs[0])
    total = planes * params["H"] * params["W"]
    await b.kernel("resize", "resize_backward", groups_1d(total),
                   params={**params, "n": total}, x=gouts[0], tab=tab, out=gins[0])

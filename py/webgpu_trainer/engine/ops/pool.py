"""2-D pooling (NCHW): MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool forward and
backward (shaders/pool.wgsl); 1-D pooling ([N, C, L]: ``nn.MaxPool1d``, ``nn.AvgPool1d``,
``nn.AdaptiveAvgPool1d(1)``) on the same kernels as [N, C, 1, L] (``card.lift_1d``).

Semantics are ONNX's (opset 22 MaxPool / AveragePool; attributes kernel_shape, strides, pads
[top, left, bottom, right], dilations (MaxPool), ceil_mode, count_include_pad (AveragePool),
auto_pad), the output size and the average's divisor follow PyTorch's ``pooling_output_shape``
and ``avg_pool2d`` (aten/src/ATen/native/Pool.h, AvgPoolKernel.cpp), which ONNX matches:

- ceil_mode: ``out = ceil((size + p0 + p1 - d*(k-1) - 1) / s) + 1``, minus one when the last
  window would start past the input and its left padding (``(out-1)*s >= size + p0``);
- AveragePool divisor: the window clipped to ``[-p0, size + p1)`` when count_include_pad, else
  the number of input elements in the window;
- MaxPool gradient: each output's gradient goes to the FIRST maximum of its window in window
  order (rows, then columns), PyTorch's rule; padding never wins (it is -inf).

Training-mode MaxPool saves the argmax of every output (u32, index in the H*W plane) in a
per-node buffer (``b.save(node, ..., "argmax")``); the input gradient is a gather over the
windows that contain each input element (no atomics), which writes every element of dx.

Not supported (GraphError from ``infer``): inputs other than NCL / NCHW, MaxPool's Indices output,
AveragePool dilations other than 1, ceil_mode together with auto_pad, and windows that hold no
input element (padding at least as large as the window). ``storage_order`` only concerns
Indices and is ignored.
"""

from ..backends.base import groups_1d
from ..errors import GraphError
from . import card

TYPES = ("MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool")
TAKES_RELU_GRAD = True  # a preceding in-place Relu's backward is masked into the dx kernel

ATTRS = {"MaxPool": {**card.window_attrs(), "ceil_mode": 0, "storage_order": 0},
         "AveragePool": {**card.window_attrs(dilations=False), "ceil_mode": 0,
                         "count_include_pad": 0},
         "GlobalMaxPool": {}, "GlobalAveragePool": {}}


def normalize(node, opset, shapes) -> list:
    """MaxPool / AveragePool: ``auto_pad`` made explicit pads (``card.resolve_auto_pad``)."""
    if node["op_type"].startswith("Global"):
        return []
    return card.resolve_auto_pad(node, opset, shapes)


def out_len(size: int, k: int, s: int, p0: int, p1: int, d: int, ceil_mode: int) -> int:
    """Output length along one axis (PyTorch ``pooling_output_shape``, ONNX MaxPool)."""
    span = size + p0 + p1 - d * (k - 1) - 1
    if span < 0:
        return 0
    n = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (n - 1) * s >= size + p0:
        n -= 1
    return n


def _auto_pads(mode, size, k, s, d):
    """(begin, end) padding of ONNX auto_pad SAME_UPPER / SAME_LOWER (extra at the end /
    the beginning) so that out = ceil(size / s); VALID: none."""
    if mode == "VALID":
        return 0, 0
    out = (size + s - 1) // s
    total = max(0, (out - 1) * s + d * (k - 1) + 1 - size)
    small = total // 2
    return (small, total - small) if mode == "SAME_UPPER" else (total - small, small)


def _has_input(size, n_out, k, s, p0, d):
    """True when every window along the axis holds at least one input element."""
    for o in range(n_out):
        start = o * s - p0
        lo = 0 if start >= 0 else (-start + d - 1) // d
        if lo >= k or start + lo * d >= size:
            return False
    return True


def geometry(node, x) -> dict:
    """Window geometry of a pooling node for the input shape ``x`` [N, C, H, W] ([N, C, L]:
    that of [N, C, 1, L]):
    ``k`` (KH, KW), ``s`` strides, ``pads`` [top, left, bottom, right], ``d`` dilations,
    ``out`` (OH, OW), ``include_pad`` (0/1). Raises GraphError naming the node."""
    op, name = node["op_type"], node["name"]

    def error(msg):
        return GraphError(f"node {name} ({op}): {msg}")

    if len(x) not in (3, 4):
        raise error(f"input {list(x)} is not NCL or NCHW (only 1-D and 2-D pooling are "
                    "supported)")
    kernel = list((node.get("attrs") or {}).get("kernel_shape") or [])
    if not op.startswith("Global") and len(kernel) != len(x) - 2:
        raise error(f"kernel_shape {kernel} does not describe a {len(x) - 2}-D window over "
                    f"input {list(x)}")
    a = card.lift_1d(node).get("attrs", {}) if len(x) == 3 else node.get("attrs", {}) or {}
    x = card.as_2d(x)
    h, w = x[2], x[3]
    if op.startswith("Global"):
        return {"k": (h, w), "s": (1, 1), "pads": [0, 0, 0, 0], "d": (1, 1), "out": (1, 1),
                "include_pad": 0}
    k = list(a.get("kernel_shape") or [])
    s = list(a.get("strides") or [1, 1])
    d = list(a.get("dilations") or [1, 1])
    pads = list(a.get("pads") or [0, 0, 0, 0])
    if len(k) != 2 or len(s) != 2 or len(d) != 2 or len(pads) != 4:
        raise error(f"kernel_shape {k}, strides {s}, dilations {d}, pads {pads} do not describe "
                    "a 2-D window (2, 2, 2 and 4 values)")
    if min(k + s + d) < 1 or min(pads) < 0:
        raise error(f"kernel_shape {k}, strides {s}, dilations {d} must be >= 1 and pads "
                    f"{pads} >= 0")
    if op == "AveragePool" and d != [1, 1]:
        raise error(f"dilations {d} are not supported (only 1)")
    ceil_mode = int(a.get("ceil_mode", 0) or 0)
    auto_pad = a.get("auto_pad") or "NOTSET"
    if auto_pad != "NOTSET":
        if auto_pad not in ("VALID", "SAME_UPPER", "SAME_LOWER"):
            raise error(f"unknown auto_pad {auto_pad!r}")
        if ceil_mode:
            raise error(f"ceil_mode together with auto_pad={auto_pad} is not supported")
        (pt, pb), (pl, pr) = (_auto_pads(auto_pad, h, k[0], s[0], d[0]),
                              _auto_pads(auto_pad, w, k[1], s[1], d[1]))
        pads = [pt, pl, pb, pr]
    oh = out_len(h, k[0], s[0], pads[0], pads[2], d[0], ceil_mode)
    ow = out_len(w, k[1], s[1], pads[1], pads[3], d[1], ceil_mode)
    if oh <= 0 or ow <= 0:
        raise error(f"input {list(x)} too small for kernel {k} (dilations {d}, pads {pads})")
    if not (_has_input(h, oh, k[0], s[0], pads[0], d[0])
            and _has_input(w, ow, k[1], s[1], pads[1], d[1])):
        raise error(f"a window of kernel {k} (pads {pads}, dilations {d}) holds only padding")
    return {"k": tuple(k), "s": tuple(s), "pads": pads, "d": tuple(d), "out": (oh, ow),
            "include_pad": int(a.get("count_include_pad", 0) or 0)}


def infer(node, ins, consts):
    """[N, C, OH, OW] ([N, C, 1, 1] for the global pools; [N, C, OL] / [N, C, 1] in 1-D);
    raises GraphError on a rank other than 3 and 4, a requested MaxPool Indices output and the
    other unsupported cases (module doc)."""
    outs = node.get("outputs", [])
    if node["op_type"] == "MaxPool" and len(outs) > 1 and outs[1]:
        raise GraphError(f"node {node['name']} (MaxPool): the Indices output is not supported")
    x = ins[0]
    g = geometry(node, x)
    return [[x[0], x[1], *g["out"][2 - (len(x) - 2):]]]


def _params(x_shape, g, flags, total) -> dict:
    _n, _c, h, w = card.as_2d(x_shape)
    (kh, kw), (sh, sw), (dh, dw) = g["k"], g["s"], g["d"]
    pt, pl, pb, pr = g["pads"]
    oh, ow = g["out"]
    return dict(total=total, H=h, W=w, OH=oh, OW=ow, KH=kh, KW=kw, sh=sh, sw=sw, pt=pt, pl=pl,
                dh=dh, dw=dw, end_h=h + pb, end_w=w + pr, flags=flags)


def _is_max(node):
    return node["op_type"] in ("MaxPool", "GlobalMaxPool")


async def forward(b, node, ins, outs, train):
    """y [N, C, OH, OW] float32 from x [N, C, H, W]; training-mode max pools also store the
    argmax of every output for the backward."""
    x, y = ins[0], outs[0]
    g = geometry(node, x.shape)
    if _is_max(node):
        arg = b.save(node, y.numel, "argmax") if train else None
        params = _params(x.shape, g, 2 if train else 0, y.numel)
        await b.kernel("pool", "max_forward", groups_1d(y.numel), params=params, src=x, dst=y,
                       arg=arg)
    else:
        params = _params(x.shape, g, g["include_pad"], y.numel)
        await b.kernel("pool", "avg_forward", groups_1d(y.numel), params=params, src=x, dst=y)


async def backward(b, node, ins, outs, gins, gouts):
    """dx [N, C, H, W] (written, every element) from dy [N, C, OH, OW] (PyTorch autograd of
    max_pool2d / avg_pool2d: the gradient goes to the saved argmax, or is spread over the
    window divided by the forward's divisor)."""
    if gins[0] is None:
        return
    x, y = ins[0], outs[0]
    g = geometry(node, x.shape)
    n = x.numel
    mask = 4 if "backward" in b.fused(node) else 0  # dx = 0 where x <= 0: a ReLU before
    m = x if mask else None
    if _is_max(node):
        arg = b.save(node, y.numel, "argmax")
        await b.kernel("pool", "max_backward", groups_1d(n),
                       params=_params(x.shape, g, mask, n), src=gouts[0], dst=gins[0],
                       arg=arg, m=m)
    else:
        await b.kernel("pool", "avg_backward", groups_1d(n),
                       params=_params(x.shape, g, g["include_pad"] | mask, n), src=gouts[0],
                       dst=gins[0], m=m)

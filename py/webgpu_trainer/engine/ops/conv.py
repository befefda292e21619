"""Conv 2-D (NCHW, ONNX pads/strides/dilations/group) forward and backward (shaders/conv2d.wgsl);
1-D Conv ([N, C, L], ``nn.Conv1d``) runs on the same kernels as [N, C, 1, L] (``card.lift_1d``);
ConvTranspose 2-D on the same kernels: its forward is the input gradient of the convolution
whose weight it holds, its backward that convolution's forward (dx) and weight gradient (dw).

Threads own 8 channels x 4 columns (see the shader); on CPU adapters stride-1 3-wide windows
run on conv2d_wide.wgsl (8 channels x 8-16 columns; the 3 x 3 weight gradient 8 channels x
2 x 9 taps). The weight gradient splits the batch (split-K) when there are too few threads to fill
the GPU, and reduce.wgsl adds the parts.
A depthwise Conv (group == channels) runs on its own kernels (ops/conv_depthwise.py).
"""

import math

from ..backends.base import groups_1d
from . import card, conv_depthwise, conv_gemm, gemm
from ..errors import GraphError

TYPES = ("Conv", "ConvTranspose")


def _kernel_from_weight(node, opset, shapes):
    """kernel_shape = the weight's spatial dims when the model leaves it out."""
    w = shapes(node["inputs"][1]) if len(node["inputs"]) > 1 else None
    return list(w[2:]) if w else None


ATTRS = {"Conv": {"kernel_shape": _kernel_from_weight, **card.window_attrs(), "group": 1},
         "ConvTranspose": {"kernel_shape": _kernel_from_weight, **card.window_attrs(),
                           "group": 1, "output_padding": lambda node, opset, shapes:
                           [0] * len(node["attrs"]["kernel_shape"])}}


def normalize(node, opset, shapes) -> list:
    """auto_pad (Conv) / output_shape and auto_pad (ConvTranspose) made explicit pads."""
    if node["op_type"] == "ConvTranspose":
        return _t_normalize(node, opset, shapes)
    return card.resolve_auto_pad(node, opset, shapes)
FUSES_RELU_FORWARD = True  # a following in-place Relu is applied by the Conv's forward
TAKES_RELU_GRAD = True  # a preceding in-place Relu's backward is masked into the dx kernel
WIDE = True  # CPU adapters: stride-1 3-wide windows through ``forward_wide`` (False: A/B)
WIDE_QUADS = None  # forward_wide's column quads a thread (None: ``wide_quads`` picks; A/B)
WIDE_WEIGHT = True  # CPU adapters: stride-1 3 x 3 weight gradients through ``weight_wide``
WIDE_WC = 2  # ... with this many input channels a thread (1 or 2)


def macs(node, shapes) -> int:
    """Multiply-adds of one sample: output elements x weight elements per output channel
    (ConvTranspose: input elements x weight elements per input channel)."""
    if node["op_type"] == "ConvTranspose":
        return math.prod(shapes[node["inputs"][0]][1:]) * \
            math.prod(shapes[node["inputs"][1]][1:])
    return math.prod(shapes[node["outputs"][0]][1:]) * math.prod(shapes[node["inputs"][1]][1:])


def out_size(size: int, k: int, stride: int, pad0: int, pad1: int, dil: int) -> int:
    """Output length of a convolution or pooling window (ONNX Conv, auto_pad NOTSET)."""
    return (size + pad0 + pad1 - dil * (k - 1) - 1) // stride + 1


def infer(node, ins, consts):
    """[N, K, OH, OW] ([N, K, OL] for a 1-D Conv); raises GraphError on a channel mismatch,
    a too small input or a rank other than 3 and 4 (3-D Conv)."""
    if node["op_type"] == "ConvTranspose":
        return _t_infer(node, ins, consts)
    x, w = ins[0], ins[1]
    if len(x) not in (3, 4) or len(w) != len(x):
        raise GraphError(f"node {node['name']} (Conv): input {x} and weight {w} are not a 1-D "
                         "(NCL) or 2-D (NCHW) convolution (3-D Conv is not supported)")
    if len(x) == 3:
        y = infer(card.lift_1d(node), [card.as_2d(x), card.as_2d(w)], consts)[0]
        return [y[:2] + y[3:]]
    a = node.get("attrs", {})
    pads = a.get("pads", [0, 0, 0, 0])
    st, dl = a.get("strides", [1, 1]), a.get("dilations", [1, 1])
    if x[1] != w[1] * a.get("group", 1):
        raise GraphError(f"node {node['name']} (Conv): input has {x[1]} channels, weight "
                         f"{w} expects {w[1] * a.get('group', 1)}")
    oh = out_size(x[2], w[2], st[0], pads[0], pads[2], dl[0])
    ow = out_size(x[3], w[3], st[1], pads[1], pads[3], dl[1])
    if oh <= 0 or ow <= 0:
        raise GraphError(f"node {node['name']} (Conv): input {x} too small for kernel {w}")
    return [[x[0], w[0], oh, ow]]


def init(node, graph):
    """PyTorch's default init (nn.Conv2d.reset_parameters, engine/init.py): weight and bias
    ~ U(+-1/sqrt(fan_in)), fan_in = in_channels / groups * kernel height * kernel width
    (ConvTranspose2d: the weight's dims 1.. too, out_channels / groups x kernel)."""
    ins = node["inputs"]
    w = graph.tensors.get(ins[1])
    if w is None:
        return []
    fan_in = 1
    for d in w["shape"][1:]:
        fan_in *= d
    return [(name, "uniform", fan_in) for name in ins[1:3] if name in graph.tensors]


def _geometry(node, x, w, y):
    """(geometry, window) of conv2d.wgsl; a 1-D Conv as its 2-D form over [N, C, 1, L]."""
    a = card.lift_1d(node)["attrs"]
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
        raise NotImplementedError(f"{node['name']}: Conv auto_pad={a['auto_pad']} (use pads)")
    if len(x.shape) not in (3, 4):
        raise NotImplementedError(f"{node['name']}: only 1-D and 2-D Conv are supported")
    n, c, h, wd = card.as_2d(x.shape)
    k, _, kh, kw = card.as_2d(w.shape)
    oh, ow = card.as_2d(y.shape)[2:]
    pads = a.get("pads", [0, 0, 0, 0])
    sh, sw = a.get("strides", [1, 1])
    dh, dw = a.get("dilations", [1, 1])
    geometry = [n, c, h, wd, k, oh, ow, a.get("group", 1)]
    window = {"KH": kh, "KW": kw, "sh": sh, "sw": sw, "ph": pads[0], "pw": pads[1],
              "dh": dh, "dw": dw}
    return geometry, window


def _params(g, has_bias=0, splits=1, mask=0, relu=0) -> dict:
    """conv2d.wgsl's Params: the geometry ``g`` (N, C, H, W, K, OH, OW, G), then the flags."""
    names = ("N", "C", "H", "W", "K", "OH", "OW", "G")
    return dict(zip(names, g), has_bias=has_bias, splits=splits, mask=mask, relu=relu)


def packed_numel(b, buf) -> int:
    return b.save_sizes[id(buf)]


def _cdiv(a, b):
    return (a + b - 1) // b


async def forward(b, node, ins, outs, train):
    if node["op_type"] == "ConvTranspose":
        return await _t_forward(b, node, ins, outs, train)
    x, w, bias = ins[0], ins[1], ins[2] if len(ins) > 2 else None
    g, win = _geometry(node, x, w, outs[0])
    relu = int("forward" in b.fused(node))  # a following in-place ReLU, fused
    if conv_depthwise.applies(g):
        await conv_depthwise.forward(b, g, win, x, w, bias, outs[0], relu=relu)
        return
    await conv_forward(b, node, g, win, x, w, bias, outs[0], relu=relu)


async def conv_forward(b, node, g, win, x, w, bias, y, relu=0, mask=0, mask_src=None):
    """y = the convolution of x with w (+ bias; ReLU'd with ``relu``; masked where mask_src
    <= 0 with ``mask``, then bias must be None) for the geometry ``g`` and window ``win``."""
    n, c, h, wd, k, oh, ow, grp = g
    tile = conv_gemm.gemm_tile(b, k, n * oh * ow, c * win["KH"] * win["KW"], grp)
    if tile:
        await conv_gemm.forward(b, g, win, tile, x, w, bias if mask_src is None else None, y,
                                relu=relu, mask_src=mask_src if mask else None)
        return
    params = _params(g, has_bias=int(bias is not None), relu=relu, mask=mask)
    kg = k // grp
    packed = b.save(node, (c // grp) * win["KH"] * win["KW"] * grp * _cdiv(kg, 8) * 8, "wfwd")
    await b.kernel("conv2d", "pack_forward", groups_1d(packed_numel(b, packed)), params=params,
                   constants=win, w=w, y=packed)
    threads, shader, entry, consts = _forward_threads(b, n, grp, kg, oh, ow, win)
    await b.kernel(shader, entry, groups_1d(threads), params=params, constants=consts,
                   x=x, wt=packed, b=bias if mask_src is None else mask_src, y=y)


def _forward_threads(b, n, grp, kg, oh, ow, win):
    """(threads, shader, entry, constants) of the forward: 8 channels x 4 columns a thread, or
    4 channels on GPUs where 8 would leave fewer than 64 Ki threads (small batches; measured on
    an H200: SeedNet at batch 64 0.533 ms/step against 0.550; 4 x 2 a thread was slower again).
    CPU adapters: stride-1 3-wide rows through conv2d_wide.wgsl ``forward_wide`` (8 channels x
    4 * WQ columns), else ``forward`` loading a row's input columns once (``ROW_LOADS``)."""
    threads = n * grp * _cdiv(kg, 8) * oh * _cdiv(ow, 4)
    if b.tiled and threads < 65536:
        return n * grp * _cdiv(kg, 4) * oh * _cdiv(ow, 4), "conv2d", "forward", {**win, "FCT": 4}
    if b.tiled:
        return threads, "conv2d", "forward", win
    if WIDE and win["sw"] == win["dw"] == 1 and win["KW"] == 3:
        wq = wide_quads(ow)
        return n * grp * _cdiv(kg, 8) * oh * _cdiv(ow, 4 * wq), "conv2d_wide", "forward_wide", \
            {**win, "WQ": wq}
    return threads, "conv2d", "forward", {**win, "ROW_LOADS": 1}


def wide_quads(ow: int) -> int:
    """Column quads a ``forward_wide`` thread owns for output rows ``ow`` wide (WIDE_QUADS when
    set): the fewest loads a row, each thread loading 8 channels' weights at 3 taps (24) and
    its 4 * WQ + 2 input columns (22-24 wide: 3, 26 wide: 4)."""
    if WIDE_QUADS:
        return WIDE_QUADS
    return min((2, 3, 4), key=lambda q: (_cdiv(ow, 4 * q) * (24 + 4 * q + 2), q))


async def backward(b, node, ins, outs, gins, gouts):
    if node["op_type"] == "ConvTranspose":
        return await _t_backward(b, node, ins, outs, gins, gouts)
    x, w = ins[0], ins[1]
    dy = gouts[0]
    g, win = _geometry(node, x, w, outs[0])
    n, c, h, wd, k, oh, ow, grp = g
    # a ReLU before this layer: its backward fused here (dx = 0 where x <= 0)
    mask = int("backward" in b.fused(node))
    mask_src = x if mask else None
    depthwise = conv_depthwise.applies(g)
    if gins[0] is not None and depthwise:
        await conv_depthwise.input_grad(b, g, win, w, dy, gins[0], mask_src=mask_src)
    elif gins[0] is not None:
        await input_grad(b, node, g, win, w, dy, gins[0], mask=mask, mask_src=mask_src)
    if gins[1] is not None and depthwise:
        await conv_depthwise.weight_grad(b, g, win, x, dy, gins[1])
    db = gins[2] if len(ins) > 2 and ins[2] is not None and len(gins) > 2 else None
    if gins[1] is not None and not depthwise:
        if await weight_grad(b, g, win, x, dy, gins[1], db=db):
            db = None  # summed beside the weight gradient (conv2d_wgrad.wgsl BIAS_TAP)
    if db is not None:
        await gemm.channel_sum(b, dy, db, outer=n, channels=k, inner=oh * ow)


async def input_grad(b, node, g, win, w, dy, dx, mask=0, mask_src=None, bias=None, relu=0):
    """dx of the convolution (geometry ``g``, window ``win``) for the output gradient dy:
    stride 1 with pads inside the window as a forward convolution, else by stride classes on
    GPU adapters (conv_gemm.strided_input_grad), else ``backward_input``.
    ``mask`` / ``mask_src``: a fused ReLU's gradient; ``bias`` / ``relu``: ConvTranspose's."""
    n, c, h, wd, k, oh, ow, grp = g
    kh, kw = win["KH"], win["KW"]
    full_pad_ok = win["ph"] <= win["dh"] * (kh - 1) and win["pw"] <= win["dw"] * (kw - 1)
    if win["sh"] == win["sw"] == 1 and full_pad_ok:
        tile = conv_gemm.gemm_tile(b, c, n * h * wd, k * kh * kw, grp)
        if tile:
            await conv_gemm.input_grad(b, g, win, tile, w, dy, dx,
                                       mask_src=mask_src if mask else None, bias=bias, relu=relu)
            return
        await _input_grad_as_forward(b, node, g, win, w, dy, dx, mask, mask_src, bias, relu)
        return
    tile = conv_gemm.strided_tile(b, g, win)
    if tile:
        await conv_gemm.strided_input_grad(b, g, win, tile, w, dy, dx,
                                           mask_src=mask_src if mask else None, bias=bias,
                                           relu=relu)
        return
    params = _params(g, mask=mask, has_bias=int(bias is not None), relu=relu)
    threads = n * grp * _cdiv(c // grp, 8) * h * _cdiv(wd, 4)
    packed = b.save(node, k * kh * kw * _cdiv(c // grp, 8) * 8, "wbwd")
    await b.kernel("conv2d", "pack_backward", groups_1d(packed_numel(b, packed)),
                   params=params, constants=win, w=w, y=packed)
    await b.kernel("conv2d", "backward_input", groups_1d(threads), params=params,
                   constants=win, x=dy, wt=packed, b=bias if mask_src is None else mask_src,
                   y=dx)


async def weight_grad(b, g, win, x, dy, dw, db=None) -> bool:
    """dw = sum over the batch and output pixels of dy x (im2col x): on GPU adapters
    conv2d_wgrad.wgsl (threads over pixels, 8 channels x 8 taps each, chunks of pixels added by
    ``reduce_splits``), else conv2d.wgsl ``backward_weight`` (threads over (channels, taps),
    split over the batch). ``db``: the bias's gradient, summed here too where the pixels are
    split in parts on GPU adapters (``Builder.CONV_BIAS_TAP``: one more tap of value 1, its
    parts the reduction's tail); returns whether it was."""
    n, c, h, wd, k, oh, ow, grp = g
    taps = (c // grp) * win["KH"] * win["KW"]
    tile = conv_gemm.gemm_tile(b, k, taps, n * oh * ow, grp)
    if tile:
        await conv_gemm.weight_grad(b, g, win, tile, x, dy, dw)
        return False
    if b.tiled and (win["ph"] or win["pw"]) and b.PADDED_WEIGHT_GRAD:
        g, win, x = await _padded_input(b, g, win, x)
    bias_tap = False
    if b.tiled:
        wrb, groups = _wgrad_blocks(b, taps, k, grp)
        pixels = n * oh * ow
        # about WEIGHT_GRAD_THREADS threads, each thread at least 16 pixels
        splits = max(1, min(_cdiv(b.WEIGHT_GRAD_THREADS, 64 * groups * wrb),
                            pixels // (64 * 16), 65535))
        bias_tap = db is not None and splits > 1 and b.CONV_BIAS_TAP
        if bias_tap:  # the tap of value 1 after the R real ones (one more block when R % 8 == 0)
            wrb, groups = _wgrad_blocks(b, taps + 1, k, grp)
        counts, shader, entry = (groups, splits, 1), "conv2d_wgrad", "weight_grad"
        win = {**win, "WRB": wrb, **({"BIAS_TAP": 1} if bias_tap else {})}
    else:
        threads = grp * _cdiv(k // grp, 8) * _cdiv(taps, 4)
        splits = b.splits(threads, n, min_per_split=1)
        shader, entry = "conv2d", "backward_weight"
        if WIDE_WEIGHT and win["KH"] == win["KW"] == 3 and \
                win["sh"] == win["sw"] == win["dh"] == win["dw"] == 1:
            # the batch split as backward_weight's (the same sums); 8 x WIDE_WC x 9 a thread
            threads, shader, entry = grp * _cdiv(k // grp, 8) * _cdiv(c // grp, WIDE_WC), \
                "conv2d_wide", "weight_wide"
            win = {**win, "WC": WIDE_WC}
        gx, gy, _ = groups_1d(threads)
        counts = (gx, gy, splits)
    tail = k if bias_tap else 0
    out = b.temp(splits * (k * taps + tail)) if splits > 1 else dw
    await b.kernel(shader, entry, counts, params=_params(g, splits=splits), constants=win,
                   x=dy, w=x, y=out)
    if splits > 1:
        await gemm.reduce_splits(b, out, dw, splits, k * taps, tail=tail,
                                 out2=db if bias_tap else None)
    return bias_tap


def _wgrad_blocks(b, taps: int, k: int, grp: int) -> tuple:
    """(WRB, workgroups) of conv2d_wgrad.wgsl ``weight_grad`` for ``taps`` taps a group: blocks
    of 8 taps, ``Builder.WEIGHT_GRAD_BLOCKS`` of them a workgroup (2 where fewer), times
    blocks of 8 output channels."""
    rblocks = _cdiv(taps, 8)
    wrb = b.WEIGHT_GRAD_BLOCKS if rblocks >= b.WEIGHT_GRAD_BLOCKS else min(rblocks, 2)
    return wrb, grp * _cdiv(k // grp, 8) * _cdiv(rblocks, wrb)


async def _padded_input(b, g, win, x):
    """(geometry, window, buffer) of the layer's input zero-padded into scratch: the rows and
    columns the windows reach, (OH - 1) * sh + dh * (KH - 1) + 1 by the same for columns, so
    the weight gradient runs without padding and without bounds tests per tap."""
    n, c, h, wd, k, oh, ow, grp = g
    hp = (oh - 1) * win["sh"] + win["dh"] * (win["KH"] - 1) + 1
    wp = (ow - 1) * win["sw"] + win["dw"] * (win["KW"] - 1) + 1
    padded = b.temp(n * c * hp * wp, "scratch.pad")
    await b.kernel("conv2d_wgrad", "pad_input", b.elementwise_groups(n * c * hp * wp),
                   params=_params((n, c, h, wd, k, hp, wp, grp)), constants=win, w=x, y=padded)
    return (n, c, hp, wp, k, oh, ow, grp), {**win, "ph": 0, "pw": 0}, padded


async def _input_grad_as_forward(b, node, g, win, w, dy, dx, mask=0, mask_src=None, bias=None,
                                 relu=0):
    """dx of a stride-1 convolution = forward convolution of dy with the flipped, transposed
    filter and "full" padding (dilation d: pads d*(k-1) - p); the forward kernel is the fastest
    and needs no divisions."""
    n, c, h, wd, k, oh, ow, grp = g
    kh, kw, dh, dw = win["KH"], win["KW"], win["dh"], win["dw"]
    tw = {**win, "ph": dh * (kh - 1) - win["ph"], "pw": dw * (kw - 1) - win["pw"]}
    params = _params((n, k, oh, ow, c, h, wd, grp), mask=mask, has_bias=int(bias is not None),
                     relu=relu)
    cg = c // grp
    packed = b.save(node, (k // grp) * kh * kw * grp * _cdiv(cg, 8) * 8, "wtrans")
    await b.kernel("conv2d", "pack_transposed", groups_1d(packed_numel(b, packed)),
                   params=params, constants=tw, w=w, y=packed)
    threads, shader, entry, consts = _forward_threads(b, n, grp, cg, h, wd, tw)
    await b.kernel(shader, entry, groups_1d(threads), params=params, constants=consts,
                   x=dy, wt=packed, b=bias if mask_src is None else mask_src, y=dx)


# ---- ConvTranspose: x [N, Ci, H, W], w [Ci, Co/G, KH, KW] -> y [N, Co, OH, OW] ----------------

def _t_normalize(node, opset, shapes) -> list:
    """``output_shape`` (and auto_pad SAME_*: output = input x stride) made explicit ``pads``
    by the ONNX formula; VALID: zero pads. Returns the problems (unknown input size, an
    output_shape the window cannot reach)."""
    a, name = node["attrs"], node["name"]
    auto, out_shape = a.get("auto_pad", "NOTSET"), a.pop("output_shape", None)
    a["auto_pad"] = "NOTSET"
    if auto == "VALID":
        a["pads"] = [0] * len(a["pads"])
    if out_shape is None and auto not in ("SAME_UPPER", "SAME_LOWER"):
        return []
    x = shapes(node["inputs"][0])
    rank = len(a["kernel_shape"])
    if not x or len(x) != rank + 2 or not all(isinstance(d, int) for d in x[2:]):
        return [f"node {name} (ConvTranspose): output_shape / auto_pad need the input's "
                "spatial size, which is unknown"]
    want = list(out_shape)[-rank:] if out_shape is not None else \
        [x[2 + i] * a["strides"][i] for i in range(rank)]
    lo, hi = [], []
    for i in range(rank):
        total = a["strides"][i] * (x[2 + i] - 1) + a["output_padding"][i] + \
            (a["kernel_shape"][i] - 1) * a["dilations"][i] + 1 - want[i]
        if total < 0:
            return [f"node {name} (ConvTranspose): output_shape {list(out_shape or want)} is "
                    "larger than the window reaches (set output_padding)"]
        small, big = total // 2, total - total // 2
        lo.append(small if auto == "SAME_UPPER" else big)
        hi.append(big if auto == "SAME_UPPER" else small)
    a["pads"] = lo + hi
    return []


def _t_infer(node, ins, consts):
    """[N, Co, OH, OW], OH = sh (H - 1) + output_padding + dh (KH - 1) + 1 - pads."""
    a, x, w = node.get("attrs", {}), ins[0], ins[1]
    name, grp = node["name"], a.get("group", 1)
    if len(x) != 4:
        raise GraphError(f"node {name} (ConvTranspose): input {x} is not NCHW (only 2-D)")
    if x[1] != w[0]:
        raise GraphError(f"node {name} (ConvTranspose): input has {x[1]} channels, weight "
                         f"{w} expects {w[0]}")
    pads, st = a.get("pads", [0, 0, 0, 0]), a.get("strides", [1, 1])
    dl, op = a.get("dilations", [1, 1]), a.get("output_padding", [0, 0])
    out = [st[i] * (x[2 + i] - 1) + op[i] + dl[i] * (w[2 + i] - 1) + 1 - pads[i] - pads[i + 2]
           for i in range(2)]
    if min(out) <= 0:
        raise GraphError(f"node {name} (ConvTranspose): pads {pads} leave no output for "
                         f"input {x} and kernel {w}")
    return [[x[0], w[1] * grp, *out]]


def _t_geometry(node, x, w, y):
    """The geometry and window of the convolution whose input gradient this ConvTranspose is:
    that convolution maps y's shape to x's with the same weight, pads, strides, dilations."""
    a = node["attrs"]
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
        raise NotImplementedError(f"{node['name']}: ConvTranspose auto_pad={a['auto_pad']}")
    n, ci, h, wd = x.shape
    _, _, kh, kw = w.shape
    pads = a.get("pads", [0, 0, 0, 0])
    sh, sw = a.get("strides", [1, 1])
    dh, dw = a.get("dilations", [1, 1])
    geometry = [n, y.shape[1], y.shape[2], y.shape[3], ci, h, wd, a.get("group", 1)]
    window = {"KH": kh, "KW": kw, "sh": sh, "sw": sw, "ph": pads[0], "pw": pads[1],
              "dh": dh, "dw": dw}
    return geometry, window


async def _t_forward(b, node, ins, outs, train):
    """y = the convolution's input gradient for "dy" = x, plus the bias (fused ReLU too)."""
    x, w, bias = ins[0], ins[1], ins[2] if len(ins) > 2 else None
    g, win = _t_geometry(node, x, w, outs[0])
    relu = int("forward" in b.fused(node))
    await input_grad(b, node, g, win, w, x, outs[0], bias=bias, relu=relu)


async def _t_backward(b, node, ins, outs, gins, gouts):
    """dx = the convolution of dy (forward kernel), dw = the convolution's weight gradient
    with dy as its input and x as its output gradient, db = dy summed per channel."""
    x, w, dy = ins[0], ins[1], gouts[0]
    g, win = _t_geometry(node, x, w, outs[0])
    n, co, oh, ow = g[:4]
    mask = int("backward" in b.fused(node))
    if gins[0] is not None:
        await conv_forward(b, node, g, win, dy, w, None, gins[0], mask=mask,
                           mask_src=x if mask else None)
    if gins[1] is not None:
        await weight_grad(b, g, win, dy, x, gins[1])
    if len(ins) > 2 and ins[2] is not None and gins[2] is not None:
        await gemm.channel_sum(b, dy, gins[2], outer=n, channels=co, inner=oh * ow)

"""Depthwise Conv 2-D (group == in channels == out channels, MobileNet's 3x3 blocks) on
shaders/conv_depthwise.wgsl: forward, input gradient and weight gradient, every adapter.
conv2d.wgsl blocks 8 output channels a thread, 7 of them wasted with one channel a group, and
its weight gradient had 3 threads a channel. ops/conv.py asks ``applies`` and sends such a
Conv here (not ConvTranspose).

Geometry ``g`` = (N, C, H, W, K, OH, OW, G) and window ``win`` as ops/conv.py's ``_geometry``.
"""

from ..backends.base import groups_1d
from .gemm import reduce_splits

TARGET = 16384  # threads the weight gradient aims at (parts of the N*OH rows)
MIN_TERMS = 256  # products a weight-gradient thread sums at least
WG_TARGET = 1056  # workgroups of backward_weight_wg (8 of 256 threads on each of 132 SMs)
WG_MIN_PIXELS = 1024  # dy values a workgroup of backward_weight_wg takes at least
MAX_WINDOW = (7, 8)  # the largest KH x KW of backward_weight_wg (its named row registers)


def applies(g) -> bool:
    """True for a depthwise convolution: more than one group, one input and one output channel
    a group."""
    n, c, h, wd, k, oh, ow, grp = g
    return grp > 1 and c == k == grp


def _params(g, has_bias=0, splits=1, mask=0, relu=0) -> dict:
    names = ("N", "C", "H", "W", "K", "OH", "OW", "G")
    return dict(zip(names, g), has_bias=has_bias, splits=splits, mask=mask, relu=relu)


def _cdiv(a, b):
    return (a + b - 1) // b


async def forward(b, g, win, x, w, bias, y, relu=0):
    """y = the depthwise convolution of x with w (+ bias; max(., 0) with ``relu``)."""
    n, c, h, wd, k, oh, ow, grp = g
    await b.kernel("conv_depthwise", "forward", groups_1d(n * c * oh * _cdiv(ow, 4)),
                   params=_params(g, has_bias=int(bias is not None), relu=relu),
                   constants=win, x=x, w=w, b=bias, y=y)


async def input_grad(b, g, win, w, dy, dx, mask_src=None):
    """dx for the output gradient dy; 0 where ``mask_src`` <= 0 when given (a fused ReLU)."""
    n, c, h, wd, k, oh, ow, grp = g
    await b.kernel("conv_depthwise", "backward_input", groups_1d(n * c * h * _cdiv(wd, 4)),
                   params=_params(g, mask=int(mask_src is not None)), constants=win,
                   x=dy, w=w, b=mask_src, y=dx)


def splits(g, win) -> int:
    """Parts of the N*OH output rows the weight gradient sums separately: about ``TARGET``
    threads, each at least ``MIN_TERMS`` products, at most one part a row."""
    n, c, h, wd, k, oh, ow, grp = g
    outputs = c * win["KH"] * win["KW"]
    rows = n * oh
    return max(1, min(rows, _cdiv(TARGET, outputs), rows * ow // MIN_TERMS))


async def weight_grad(b, g, win, x, dy, dw):
    """dw [C, 1, KH, KW] = sum over the batch and output pixels of dy x the window of x: in
    parts, added by reduce.wgsl when there are several. GPU adapters (``b.tiled``, windows of
    at most ``MAX_WINDOW``): ``backward_weight_wg``, a workgroup per (channel, part of the
    batch), about ``WG_TARGET`` workgroups of at least ``WG_MIN_PIXELS`` pixels each (H200,
    MobileNetV2 at batch 1000: 4.49 -> 0.68 ms a step); else ``backward_weight``, a thread
    per (part of the N*OH rows, channel, tap) (``splits``)."""
    n, c, h, wd, k, oh, ow, grp = g
    taps = win["KH"] * win["KW"]
    if b.tiled and win["KH"] <= MAX_WINDOW[0] and win["KW"] <= MAX_WINDOW[1] and c <= 65535:
        parts = max(1, min(n, _cdiv(WG_TARGET, c), n * oh * ow // WG_MIN_PIXELS))
        entry, groups = "backward_weight_wg", (c, parts, 1)
    else:
        parts = splits(g, win)
        entry, groups = "backward_weight", groups_1d(parts * c * taps)
    out = b.temp(parts * c * taps) if parts > 1 else dw
    await b.kernel("conv_depthwise", entry, groups, params=_params(g, splits=parts),
                   constants=win, x=dy, w=x, y=out)
    if parts > 1:
        await reduce_splits(b, out, dw, parts, c * taps)

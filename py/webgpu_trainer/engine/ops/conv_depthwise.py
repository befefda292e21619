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
    ``splits`` parts of the rows, added by reduce.wgsl when there are several."""
    c, taps = g[1], win["KH"] * win["KW"]
    parts = splits(g, win)
    out = b.temp(parts * c * taps) if parts > 1 else dw
    await b.kernel("conv_depthwise", "backward_weight", groups_1d(parts * c * taps),
                   params=_params(g, splits=parts), constants=win, x=dy, w=x, y=out)
    if parts > 1:
        await reduce_splits(b, out, dw, parts, c * taps)

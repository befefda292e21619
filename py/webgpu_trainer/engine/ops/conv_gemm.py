"""Conv 2-D as an implicit GEMM (shaders/conv_gemm.wgsl) on GPU adapters: the forward, the
input gradient of a stride-1 convolution and the weight gradient of wide layers run on the tiles
of the GEMM (gemm.wgsl ``matmul_tiled``: 128 x 128, 64 x 128 or 64 x 64 per workgroup, 8 x 8
per thread, double-buffered workgroup memory), gathering im2col values in the tile loads; NCHW
stays the layout of every tensor. ops/conv.py asks ``gemm_tile`` per product and keeps its
direct kernels for thin layers (under ``Builder.CONV_GEMM_MIN`` channels: the first layer's
3, ResNet-8's 16 and 32), groups > 1, dilated strided input gradients and CPU adapters
(SwiftShader, lavapipe: their kernels are unchanged). The input gradient of a strided
convolution runs one product per stride class (``strided_input_grad``).

Geometry ``g`` = (N, C, H, W, K, OH, OW, G) and window ``win`` as ops/conv.py's ``_geometry``.
"""

from .gemm import reduce_splits

MAX_TILES = 65535  # workgroups along x of one dispatch (WebGPU's default limit)
TARGET = 512  # workgroups that keep an H200's 132 multiprocessors busy (gemm.py's target)


def gemm_tile(b, m: int, n: int, kd: int, grp: int = 1,
              least: int | None = -1) -> tuple[int, int] | None:
    """(TM, TW) of conv_gemm.wgsl for an [m, n] product summed over kd (tiles of 8 TM rows x
    8 TW columns), or None for the direct kernel: on GPU adapters (``b.tiled``), group 1,
    each of m, n, kd at least ``least`` (default ``b.CONV_GEMM_MIN``; None: never).
    (16, 16): 128 x 128 tiles when m and n are at least 128; (8, 16): 64 x 128 when m is 64 to
    127 (a 64-channel layer fills its rows); else (8, 8): 64 x 64."""
    least = b.CONV_GEMM_MIN if least == -1 else least
    if not b.tiled or grp != 1 or least is None or min(m, n, kd) < least:
        return None
    if min(m, n) >= 128:
        tile = (16, 16)
    elif m >= 64 and n >= 128:
        tile = (8, 16)
    else:
        tile = (8, 8)
    if _cdiv(m, 8 * tile[0]) * _cdiv(n, 8 * tile[1]) > MAX_TILES:
        return None
    return tile


def _cdiv(a, b):
    return (a + b - 1) // b


def _splits(tiles: int, m: int, n: int, kd: int, tw: int) -> int:
    """Parts of the sum over kd (split-K) so that ~TARGET workgroups run, each part at least 4
    steps of BK = TW / 2, the parts [splits, m, n] at most 2^24 values (64 MiB)."""
    if tiles >= TARGET:
        return 1
    return max(1, min(_cdiv(TARGET, tiles), kd // (2 * tw), (1 << 24) // (m * n), 256))


async def _run(b, mode, tile, m, n, kd, win, image, geom, a, out, *, bias=None, relu=0,
               mask_src=None, classes=None):
    """One conv_gemm dispatch (and the reduction of its split-K parts). ``tile`` = (TM, TW)
    from ``gemm_tile``; ``geom`` = (C, H, W, OH, OW) of the gathered image and window grid.
    ``classes``: mode 3's (stride classes, columns of the largest), each class ``splits`` z
    slices; n is then the batch and kd the largest class's sum.

    Split-K (``_splits``) when the tiles alone leave the GPU idle: the parts [splits, ...]
    are added by ``reduce_splits``, which then applies the epilogue (bias, ReLU, mask) in
    place of the kernel (ResNet-18 at batch 64: the 512-channel input gradient with a fused
    ReLU mask ran 32 workgroups, 1.1 ms, unsplit)."""
    tm, tw = tile
    tiles = _cdiv(m, 8 * tm) * _cdiv(classes[1] if classes else n, 8 * tw)
    c, h, w, oh, ow = geom
    count = m * n * (oh * ow if classes else 1)  # the output's (one part's) values
    splits = _splits(tiles * (classes[0] if classes else 1), m, count // m, kd, tw)
    params = dict(M=m, N=n, K=kd, splits=splits, C=c, H=h, W=w, OH=oh, OW=ow,
                  has_bias=int(bias is not None), relu=relu, mask=int(mask_src is not None))
    target = b.temp(splits * count) if splits > 1 else out
    await b.kernel("conv_gemm", "conv_gemm",
                   (tiles, 1, splits * (classes[0] if classes else 1)), params=params,
                   constants={**win, "MODE": mode, "TW": tw, "TM": tm}, a=a, img=image, bias=bias,
                   src=mask_src, out=target)
    if splits > 1:
        await reduce_splits(b, target, out, splits, count, bias=bias,
                            bias_mode=5 if bias is not None else 0, relu=relu,
                            mask_src=mask_src, channels=m, inner=oh * ow)


async def forward(b, g, win, tile, x, w, bias, y, relu=0, mask_src=None):
    """y [N, K, OH, OW] = x (*) w (+ bias, ReLU'd with ``relu``; 0 where mask_src <= 0)."""
    n, c, h, wd, k, oh, ow, _ = g
    kd = c * win["KH"] * win["KW"]
    await _run(b, 0, tile, k, n * oh * ow, kd, win, x, (c, h, wd, oh, ow), w, y, bias=bias,
               relu=relu, mask_src=mask_src)


async def input_grad(b, g, win, tile, w, dy, dx, mask_src=None, bias=None, relu=0):
    """dx [N, C, H, W] of a stride-1 convolution: dy [N, K, OH, OW] convolved with the flipped,
    transposed filter over the "full" window (pads d (k - 1) - p), a forward of mode 1."""
    n, c, h, wd, k, oh, ow, _ = g
    kh, kw = win["KH"], win["KW"]
    full = {**win, "ph": win["dh"] * (kh - 1) - win["ph"], "pw": win["dw"] * (kw - 1) - win["pw"]}
    await _run(b, 1, tile, c, n * h * wd, k * kh * kw, full, dy, (k, oh, ow, h, wd), w, dx,
               bias=bias, relu=relu, mask_src=mask_src)


def strided_tile(b, g, win) -> tuple[int, int] | None:
    """(TM, TW) for ``strided_input_grad`` of geometry ``g`` (None: the direct kernel): dilation 1,
    dx channels and the largest class's pixels at least ``b.CONV_GEMM_STRIDED_MIN``."""
    n, c, h, wd, k, _, _, grp = g
    if win["dh"] != 1 or win["dw"] != 1:
        return None
    cols = n * _cdiv(h, win["sh"]) * _cdiv(wd, win["sw"])
    return gemm_tile(b, c, cols, k, grp, least=b.CONV_GEMM_STRIDED_MIN)


async def strided_input_grad(b, g, win, tile, w, dy, dx, mask_src=None, bias=None, relu=0):
    """dx [N, C, H, W] of a convolution of any stride (dilation 1) by sub-pixel
    decomposition: for each of the sh * sw stride classes (r, q) (dx pixels r + sh*u,
    q + sw*v), a stride-1 product over the taps that reach them (mode 3, one z slice a
    class; a class no tap reaches is written as zeros). Shi et al. 2016, "Real-Time Single
    Image and Video Super-Resolution Using an Efficient Sub-Pixel Convolutional Neural
    Network", sec. 2.2 (the strided transposed convolution as stride-1 sub-filters)."""
    n, c, h, wd, k, oh, ow, _ = g
    classes = (win["sh"] * win["sw"], n * _cdiv(h, win["sh"]) * _cdiv(wd, win["sw"]))
    taps = _cdiv(win["KH"], win["sh"]) * _cdiv(win["KW"], win["sw"])  # the largest class's
    await _run(b, 3, tile, c, n, k * taps, win, dy, (k, oh, ow, h, wd), w, dx, bias=bias,
               relu=relu, mask_src=mask_src, classes=classes)


async def weight_grad(b, g, win, tile, x, dy, dw):
    """dw [K, C, KH, KW] = sum over the batch and output pixels of dy x im2col(x)."""
    n, c, h, wd, k, oh, ow, _ = g
    await _run(b, 2, tile, k, c * win["KH"] * win["KW"], n * oh * ow, win, x, (c, h, wd, oh, ow),
               dy, dw)

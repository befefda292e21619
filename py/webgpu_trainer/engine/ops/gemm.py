"""Gemm (ONNX: Y = alpha * A' * B' + beta * C) forward and backward (shaders/gemm.wgsl),
and the reductions they share with other ops (shaders/reduce.wgsl).

A' is A or A^T (transA), B' likewise; each is expressed as strides of one strided matmul, so the
gradients dA = alpha * dY * B'^T and dB = alpha * A'^T * dY reuse the same kernel.
"""

import math

from ..backends.base import groups_1d, groups_per_channel
from ..errors import GraphError
from . import card

TYPES = ("Gemm",)
FUSES_RELU_FORWARD = True  # a following in-place Relu is applied by the product's last kernel
TAKES_RELU_GRAD = True  # a preceding in-place Relu's backward masks dA (the product's epilogue)
CHANNEL_SUM_ROWS = True  # CPU adapters: bias gradients by channel_sum_rows (reduce.wgsl; A/B)

ATTRS = {"Gemm": {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}}


def macs(node, shapes) -> int:
    """Multiply-adds of one sample: output elements x K."""
    a = shapes[node["inputs"][0]]
    k = a[0] if card.read(node, ATTRS)["transA"] else a[1]
    return math.prod(shapes[node["outputs"][0]][1:]) * k


def infer(node, ins, consts):
    """[M, N] of op(A) [M, K] times op(B) [K, N]; raises GraphError when the K differ."""
    a, x, b = card.read(node, ATTRS), ins[0], ins[1]
    m, k = (x[1], x[0]) if a["transA"] else (x[0], x[1])
    kb, n = (b[1], b[0]) if a["transB"] else (b[0], b[1])
    if k != kb:
        raise GraphError(f"node {node['name']} (Gemm): inner sizes differ, A {x} vs B {b}")
    return [[m, n]]


def init(node, graph):
    """PyTorch's default init (nn.Linear.reset_parameters, engine/init.py) of B and C: U(+-1 /
    sqrt(fan_in)), fan_in = B's rows after transB (the Linear's in_features)."""
    ins = node["inputs"]
    w = graph.tensors.get(ins[1])
    if w is None:
        return []
    fan_in = w["shape"][1] if card.read(node, ATTRS)["transB"] else w["shape"][0]
    return [(name, "uniform", fan_in) for name in ins[1:3] if name in graph.tensors]


async def matmul(b, a, a_strides, bm, b_strides, out, m, n, k, alpha=1.0, bias=None,
                 bias_mode=0, beta=1.0, relu=0, mask_src=None, bsum=None, bsum_of=1,
                 gelu_grad=False) -> bool:
    """out[m, n] = alpha * sum_k a[m*sam + k*sak] * bm[k*sbk + n*sbn] (+ beta * bias), then
    max(out, 0) with ``relu`` (a fused ReLU: by the product, or ``reduce_splits`` when split);
    0 where ``mask_src`` (float32 [m * n], out's layout) <= 0 when given (a fused ReLU's
    gradient).

    Large outputs on GPU adapters (``tile_shape``): a workgroup-memory tiled kernel (128 x 128
    tiles, 8 x 8 per thread), else 4 x 4 per thread with no workgroup memory (CPU adapters,
    thin outputs; on GPU adapters with both operands aligned for vec4 loads, ``_vec_bits``
    == 3, ``matmul_vec``). Splits the sum over k (split-K) when the output alone leaves the
    GPU idle.

    ``bsum`` (float32 [m] when ``bsum_of`` is 1, [n] when 2): the sums over k of op(A)'s rows
    (1) or op(B)'s columns (2), unscaled: a Linear's bias gradient, the sum of dY over the
    batch, taken from the dY values its weight gradient loads anyway (gemm.wgsl ``BSUM``; the
    split parts added by the same ``reduce_splits`` as the product's). Only on the untiled
    kernels of GPU adapters (``Builder.GEMM_BIAS_SUM``); returns whether ``bsum`` was written
    (else the caller sums dY itself: CPU adapters keep channel_sum_rows and their golden
    numbers). In ``matmul_tiled`` the sums cost more than the pass they save (H200, the MLP at
    batch 1000: 0.844 -> 0.876 ms, ``2026-12-04-h200-s22-bsum-*``).
    """
    shape = tile_shape(b, m, n, k, b_strides, a_strides)
    if shape:  # the tiles are one row of workgroups: at most 65,535 (else the untiled kernel)
        wm, wn = shape
        if wm not in (8, 16) or wn not in (8, 16):  # BK 8 <= WM, WN; 32 (WM + WN) vec4 <= 16 KiB
            raise ValueError(f"matmul_tiled: {wm} x {wn} threads; each must be 8 or 16")
        tiles = ((m + 8 * wm - 1) // (8 * wm)) * ((n + 8 * wn - 1) // (8 * wn))
        if tiles > 65535:
            shape = None
    if shape:
        # enough workgroups for every multiprocessor, each split at least 2 steps of k (BK 8);
        # none with half the target (H200: [28000, 64] x [64, 256], 438 tiles, 0.17 ms split
        # in 2 against 0.086 whole; the MLP's 64 tiles of 1000 x 1024 fastest in ~8 parts)
        target = b.GEMM_TILE_TARGET
        splits = 1 if 2 * tiles >= target else max(1, min((target + tiles - 1) // tiles,
                                                          k // 16, 256))
        # the kernel rounds each part up to whole k steps (BK 8): no parts left empty by it
        per = (k + splits - 1) // splits
        splits = (k + (per + 7) // 8 * 8 - 1) // ((per + 7) // 8 * 8)
        counts = (tiles, 1, splits)
        entry, consts = "matmul_tiled", {"WM": wm, "WN": wn}
        if not b.GEMM_EDGE_CLAMP:
            consts["EDGE_CLAMP"] = 0
        vec = _vec_bits(b, a, a_strides, bm, b_strides)
    elif lanes := kpar_lanes(b, m, n, k, a_strides[1] == 1 and b_strides[0] == 1):
        blocks = ((m + 3) // 4) * ((n + 3) // 4)
        splits = 1
        counts = ((blocks + 256 // lanes - 1) // (256 // lanes), 1, 1)
        entry, consts = "matmul_kpar", {"KL": lanes}
        vec = 0
        if not (a_strides[1] == 1 and b_strides[0] == 1) and getattr(b, "GEMM_KPAR_ORDER", True):
            entry = "matmul_kpar_t"  # k strided: neighbouring threads take neighbouring blocks
            vec = _kpar_vec_bits(b, a, a_strides, bm, b_strides, m, n, k)
            if vec:
                consts["KVEC"] = vec
    else:
        wx = _threads_along_n(n)
        side_m, side_n = 4 * 64 // wx, 4 * wx
        threads = 64 * ((m + side_m - 1) // side_m) * ((n + side_n - 1) // side_n)
        splits = b.splits(((m + 3) // 4) * ((n + 3) // 4), k, min_per_split=64)
        gx, gy, _ = groups_1d(threads)
        # GPU adapters, both operands aligned: the same blocks from vec4 loads (matmul_vec)
        vec = _vec_bits(b, a, a_strides, bm, b_strides) \
            if b.tiled and getattr(b, "GEMM_VEC_UNTILED", True) else 0
        vec = 3 if vec == 3 and _covers_blocks(a, a_strides, m, k) and \
            _covers_blocks(bm, b_strides[::-1], n, k) else 0
        counts, entry, consts = (gx, gy, splits), "matmul_vec" if vec else "matmul", {"WX": wx}
    if gelu_grad:  # mask_src holds a Gelu's slope: times it (gemm.wgsl GELU_GRAD)
        consts = {**consts, "GELU_GRAD": 1}
    sums = bsum is not None and not shape and b.tiled and getattr(b, "GEMM_BIAS_SUM", True)
    tail = (m if bsum_of == 1 else n) if sums and splits > 1 else 0
    if sums:
        consts = {**consts, "BSUM": bsum_of}
    # the tiles' part 0 straight into out (gemm.wgsl part0): a part's scratch fewer
    part0 = int(bool(shape) and splits > 1 and not tail and b.GEMM_PART0_IN_OUT)
    target = b.temp((splits - part0) * (m * n + tail)) if splits > 1 else out
    params = dict(M=m, N=n, K=k, splits=splits, sam=a_strides[0], sak=a_strides[1],
                  sbk=b_strides[0], sbn=b_strides[1], bias_mode=bias_mode if bias else 0,
                  alpha=alpha, beta=beta, relu=relu, vec=vec, mask=int(mask_src is not None),
                  part0=part0)
    await b.kernel("gemm", entry, counts, params=params, constants=consts, a=a, bm=bm, bias=bias,
                   out=target, a4=a if vec & 1 else None, b4=bm if vec & 2 else None,
                   src=mask_src, bsum=bsum if sums and splits == 1 else None,
                   out0=out if part0 else None)
    if splits > 1:
        await reduce_splits(b, target, out, splits, m * n, n=n, bias=bias,
                            bias_mode=bias_mode if bias else 0, beta=beta, relu=relu,
                            mask_src=mask_src, tail=tail, out2=bsum if tail else None,
                            part0=part0, gelu_grad=gelu_grad)
    return sums


def kpar_lanes(b, m: int, n: int, k: int, k_contiguous: bool) -> int:
    """Lanes along k (KL) of gemm.wgsl ``matmul_kpar`` for an [m, n] output summed over k,
    or 0 (the other kernels). On GPU adapters (``b.tiled``): an output of at most
    ``Builder.GEMM_KPAR`` values summed over 32 <= k <= 4096 with k contiguous in both
    operands (``k_contiguous``: sak == 1 and sbk == 1, X W^T, so neighbouring lanes read
    neighbouring floats: a classifier's head, the MLP's products at batch 64), or over
    k <= ``Builder.GEMM_KPAR_STRIDED_K`` and at most ``GEMM_KPAR_STRIDED_OUT`` outputs
    otherwise (weight gradients over a batch's tokens, with their bias sums: the caller runs
    ``matmul_kpar_t`` there, its blocks rather than a block's lanes neighbouring threads).
    The lanes: the largest power of two from 8 to 64 (strided: to
    ``GEMM_KPAR_STRIDED_LANES``) that leaves each at least 4 of the k. An empty output takes
    the other kernels.

    H100 (``2026-12-06-h100-s30-kpar-*``, benchmarks/gemm.py): [64, 10] x k 1024 17.3 -> 10.1
    us, k 64 13.5 -> 6.6 us, [64, 1024] x k 784 28.3 -> 20.2 us (cuBLAS 25.9); but [1000, 32]
    x k 11616 119 -> 190 us. Weight gradients over 1792-28000 tokens on ``matmul_kpar``'s
    lane order made the encoder's step 1.4x (batch 64) and 3.3x (1000) slower; on
    ``matmul_kpar_t`` over up to 2,048 tokens its step at 64 is 3% faster
    (``2026-12-07-h100-s39-kp-*``), and the ViT's over 4,160 another 3%
    (``2026-12-07-h100-s40-kp8k-1``). None: off."""
    limit = getattr(b, "GEMM_KPAR", None)
    if not b.tiled or limit is None or not 0 < m * n <= limit or k < 32:
        return 0
    if k > (4096 if k_contiguous else getattr(b, "GEMM_KPAR_STRIDED_K", 0)):
        return 0
    if not k_contiguous and m * n > getattr(b, "GEMM_KPAR_STRIDED_OUT", limit):
        return 0
    most = 64 if k_contiguous else getattr(b, "GEMM_KPAR_STRIDED_LANES", 64)
    lanes = 8
    while lanes < most and 2 * lanes * 4 <= k:
        lanes *= 2
    return lanes


def _kpar_vec_bits(b, a, a_strides, bm, b_strides, m: int, n: int, k: int) -> int:
    """gemm.wgsl ``KVEC`` of ``matmul_kpar_t``: bit 0 when op(A)'s four rows of a
    block at one k are one aligned vec4 (sam == 1, sak a multiple of 4, and the binding holds
    the last block's whole vec4: ``_covers_blocks``), bit 1 likewise for op(B)'s four columns
    (sbn == 1). Rows and columns past the edge that such a vec4 reads feed only values past
    the output's edge, never stored. Off with ``b.GEMM_VEC4`` False."""
    if not getattr(b, "GEMM_VEC4", True):
        return 0
    (sam, sak), (sbk, sbn) = a_strides, b_strides
    va = sam == 1 and sak != 1 and sak % 4 == 0 and _binding_bytes(a) >= 16 and \
        _covers_blocks(a, a_strides, m, k)
    vb = sbn == 1 and sbk != 1 and sbk % 4 == 0 and _binding_bytes(bm) >= 16 and \
        _covers_blocks(bm, b_strides[::-1], n, k)
    return int(va) | 2 * int(vb)


def _vec_bits(b, a, a_strides, bm, b_strides) -> int:
    """gemm.wgsl ``p.vec`` of ``matmul_tiled``: bit 0 when op(A)'s four values of a load
    (four k of a row when sak == 1, else four rows at one k) are one aligned vec4 (the other
    stride a multiple of 4, the binding >= 16 bytes; bindings start at multiples of 256
    bytes), bit 1 likewise for op(B) (four columns when sbn == 1, else four k). Off with
    ``b.GEMM_VEC4`` False (A/B)."""
    if not getattr(b, "GEMM_VEC4", True):
        return 0

    def aligned(x, along, other) -> bool:
        return along == 1 and other % 4 == 0 and _binding_bytes(x) >= 16

    sam, sak = a_strides
    sbk, sbn = b_strides
    va = aligned(a, sak, sam) if sak == 1 else aligned(a, sam, sak)
    vb = aligned(bm, sbn, sbk) if sbn == 1 else aligned(bm, sbk, sbn)
    return int(va) | 2 * int(vb)


def _covers_blocks(x, strides, rows: int, k: int) -> bool:
    """Whether binding ``x`` of an operand with ``rows`` rows (m of op(A), n of op(B)) summed
    over ``k``, element (r, kk) at r * strides[0] + kk * strides[1], holds every vec4
    ``matmul_vec`` reads: along a unit-stride row dim it reads whole blocks of 4 rows, so the
    last k's row count rounded up to 4 must lie inside (a view bound to its last logical
    element would not). Along k it reads only inside the rows."""
    s_row, s_k = strides
    if s_row != 1:
        return True
    return _binding_bytes(x) >= 4 * ((k - 1) * s_k + (rows + 3) // 4 * 4)


def _binding_bytes(x) -> int:
    """Bytes of a bound operand: a Tensor / View's ``nbytes``, else a buffer's ``size``."""
    size = getattr(x, "nbytes", None)
    return getattr(x, "size", 0) if size is None else size


def _threads_along_n(n: int) -> int:
    """WX of gemm.wgsl ``matmul``: 8 threads of 4 columns along n in a workgroup (a 32 x 32
    block of out), fewer (a power of two) for outputs narrower than 32 columns."""
    wx = 1
    while wx < 8 and 4 * wx < n:
        wx *= 2
    return wx


def tile_shape(b, m: int, n: int, k: int, b_strides=None,
               a_strides=None) -> tuple[int, int] | None:
    """(WM, WN) threads along m and n of a ``matmul_tiled`` workgroup (an (8*WM) x (8*WN) tile of
    out) for an [m, n] output summed over k on GPU adapters, or None (the untiled kernel).

    - (16, 16), 128 x 128 tiles: outputs of at least 128 x 128 and 2^20 values, or 2^18
      values with k >= 256; not when the tiles are too few for the GPU (split-K would follow)
      and k is below ``b.GEMM_SPLIT_MIN_K`` (H200: [1024, 1024] over k 64, the MLP's weight
      gradient at batch 64, 0.040 ms tiled in 4 parts, 0.018 untiled). At 4096^3 on an H200
      they reach 26 TFLOP/s, the untiled kernel 12; on SeedNet's thin products
      ([1000, 11616] x [11616, 32] and its gradients) the untiled kernel with split-K is
      faster; on the wide MLP's at batch 1000 the tiles with split-K are (1.1-2.9x,
      benchmarks/gemm.py), at batch 64 ([1024, 784], k 64) they are not.
    - ``b.GEMM_NARROW`` (Builder): (16, 8), 128 x 64 tiles, for outputs 33-64 wide, at least
      4096 tall, summed over k >= 128 (a transformer's [tokens, d_model] products after the
      MLP's up-projection or the attention's concatenated heads). H200 (benchmarks/gemm.py,
      2026-12-03): [65000, 64] x k 128 (B read across rows) 0.16 ms tiled against 0.22
      untiled; at k 64 the untiled kernel was faster (28000 x 64: 0.031 against 0.081 ms), and
      for weight gradients ([64, 64..192] over k 28000-65000) the two were within 10%.
      Only when op(B) is read across rows (``b_strides`` (sbk, sbn) with sbn != 1: the
      forward's B = W^T of a Linear's W [out, in]): with B's rows contiguous (the input
      gradient dY @ W) the untiled kernel was faster (H200, 2026-12-04,
      ``2026-12-04-h200-s20-gemm-weight-grads.json``: [28000, 64] x k 192 0.077 against 0.108
      ms, [65000, 64] x k 128 0.112 against 0.124).
    - Over k <= ``b.GEMM_SHORT_K`` (64; H100, 2026-12-07, ``*-s39-gemm-enc.json``, the
      kernels since then): an input gradient dY W (op(A)'s k contiguous, ``a_strides``
      (sam, 1); op(B)'s rows contiguous) stays untiled even when large ([28000, 256] x 64:
      99.5 us tiled, 69.6 untiled); X W^T 33-64 wide (B read across rows) takes 128 x 128
      tiles where they are at least ``GEMM_TILE_TARGET`` / 2, no split-K ([28000, 64] x 64:
      45.8 untiled, 34.3 tiled; cuBLAS 33.7; split, the ViT's [4160, 64] at batch 64 made its
      step 5% slower). Weight gradients X^T dY keep the rules above (not measured here).
    """
    if not b.tiled:
        return None
    across = b_strides is None or b_strides[1] != 1  # op(B) read across its rows (X W^T)
    short = getattr(b, "GEMM_SHORT_K", None)
    if min(m, n) >= 128 and m * n >= (1 << 18) and (m * n >= (1 << 20) or k >= 256):
        few = 2 * (-(-m // 128)) * (-(-n // 128)) < b.GEMM_TILE_TARGET  # split-K would follow
        if few and b.GEMM_SPLIT_MIN_K is not None and k < b.GEMM_SPLIT_MIN_K:
            return None
        if short is not None and k <= short and not across and \
                (a_strides is None or a_strides[1] == 1):
            return None
        return (16, 16)
    if not getattr(b, "GEMM_NARROW", False):
        return None
    if 32 < n <= 64 and m >= 4096 and across:
        if k >= 128:
            return (16, 8)
        # ... and over short sums 128 x 128 tiles, where they are enough tiles for the GPU
        # without split-K (the ViT's [4160, 64] x 64 at batch 64 was 5% slower a step split)
        if short is not None and k <= short and 2 * (-(-m // 128)) >= b.GEMM_TILE_TARGET:
            return (16, 16)
    return None


async def reduce_splits(b, parts, out, splits, count, n=1, bias=None, bias_mode=0, beta=1.0,
                        relu=0, mask_src=None, channels=0, inner=0, tail=0, out2=None,
                        part0=0, gelu_grad=False):
    """out[e] = sum_s parts[s*count + e] (+ beta * bias by bias_mode; max(., 0) with relu; 0
    where mask_src[e] <= 0). ``bias_mode`` (shaders/reduce.wgsl): 1 bias[n], 2 bias[m], 3
    bias[e], 4 bias[0] (e = m * n_ + n), 5 an NCHW output's channel bias[(e // inner) %
    channels]. ``tail`` > 0: also out2[t] = sum_s parts[splits*count + s*tail + t] (float32
    [tail], plain sums: gemm.wgsl BSUM's bias gradient) in the same dispatch. ``part0`` 1 (no
    tail): part 0 is ``out`` itself and part s > 0 at parts[(s - 1)*count + e] (gemm.wgsl
    part0), added in place in the same order. ``gelu_grad``: times mask_src[e], a Gelu's slope
    (gelu_slope.wgsl), instead of the ReLU mask (its fused backward, gemm.wgsl GELU_GRAD).
    On GPU adapters, few outputs of many parts take ``reduce_splits_lanes``; at least
    4 * ``Builder.SPLIT_THREADS`` outputs, a multiple of 4, with no tail ``reduce_splits4``
    (four outputs a thread from vec4 loads; the same bits). H100 (2026-12-06,
    ``2026-12-06-h100-s34-reduce4-*``): the MLP's [1000, 1024] over 4 parts 15.6 -> 10.5-11.2
    us, its step at batch 1000 0.656 -> 0.632 ms of GPU time; used for every count (a quarter
    of the threads), the batch-64 steps of the MLP, SeedNet and the LSTM lost 2-5%."""
    params = dict(outer=0, C=channels, inner=inner, count=count, splits=splits, N=n,
                  bias_mode=bias_mode, beta=beta, relu=relu, mask=int(mask_src is not None),
                  tail=tail, part0=part0)
    gelu = {"GELU_GRAD": 1} if gelu_grad else {}
    lanes = split_lanes(b, count + tail, splits)
    if lanes > 1:
        await b.kernel("reduce", "reduce_splits_lanes", groups_1d((count + tail) * lanes, 256),
                       params=params, constants={"LANES": lanes, **gelu}, x=parts, bias=bias,
                       src=mask_src, out=out, out2=out2)
        return
    if b.tiled and b.REDUCE_VEC4 and tail == 0 and count % 4 == 0 and \
            count >= 4 * b.SPLIT_THREADS:
        # four outputs a thread from 16-byte loads (bindings start at multiples of 256 bytes)
        await b.kernel("reduce_vec4", "reduce_splits4", groups_1d(count // 4), params=params,
                       x4=parts, bias=bias, src=mask_src, out4=out, constants=gelu or None)
        return
    await b.kernel("reduce", "reduce_splits", groups_1d(count + tail), params=params, x=parts,
                   bias=bias, src=mask_src, out=out, out2=out2, constants=gelu or None)


def split_lanes(b, count: int, splits: int) -> int:
    """Threads an output of reduce.wgsl ``reduce_splits_lanes`` for ``count`` outputs of
    ``splits`` parts, or 1 (``reduce_splits``, a thread an output: CPU adapters, whose golden
    numbers it keeps, and outputs that fill the GPU alone). On GPU adapters (``b.tiled``) with
    fewer than ``Builder.SPLIT_THREADS`` outputs of at least 32 parts: the smallest power of
    two (2..16) whose threads reach that target, or the largest that leaves each lane at least
    two parts. H200 (2026-12-04, ``2026-12-04-h200-s20-lanes-*``): encoder / ViT at batch 1000
    2.154 / 7.199 -> 2.062 / 7.153 ms (weight gradients of [64, 64..256] over 64-256 parts); a
    first version from 2 parts cost the MLP's [1000, 10] over 15-16 parts 0.873 -> 0.898
    (``*-lanes-v1-*``), hence 32."""
    if (not b.tiled or not getattr(b, "REDUCE_LANES", True) or count >= b.SPLIT_THREADS
            or splits < 32):
        return 1
    lanes = 1
    while lanes < 16 and count * lanes < b.SPLIT_THREADS and 2 * lanes * 2 <= splits:
        lanes *= 2
    return lanes


async def channel_sum(b, x, out, outer, channels, inner):
    """out[c] = sum over outer and inner of x viewed as [outer, channels, inner]; in
    ``b.reduce_parts`` parts per channel, added by ``reduce_splits`` when there are several;
    on CPU adapters a thread per channel (``channel_sum_rows``, no barriers) unless fewer than 8
    channels hold more than 64 Ki elements each (a thread would then add them all alone). On
    GPU adapters, more than ``Builder.COLUMN_SUMS`` rows of ``inner`` 1 (a Linear's bias
    gradient over tokens) are first summed in parts by ``column_parts``."""
    if not b.tiled and CHANNEL_SUM_ROWS and (channels >= 8 or outer * inner <= 1 << 16):
        params = dict(outer=outer, C=channels, inner=inner, count=0, splits=1, N=0,
                      bias_mode=0, beta=0.0, relu=0, mask=0, tail=0, part0=0)
        await b.kernel("reduce", "channel_sum_rows", groups_1d(channels), params=params, x=x,
                       out=out)
        return
    if b.tiled and b.COLUMN_SUMS is not None and inner == 1 and outer > b.COLUMN_SUMS:
        x, outer = await column_parts(b, x, outer, channels)
    parts = b.reduce_parts(outer * inner)
    params = dict(outer=outer, C=channels, inner=inner, count=0, splits=parts, N=0, bias_mode=0,
                  beta=0.0, relu=0, mask=0, tail=0, part0=0)
    target = b.temp(parts * channels) if parts > 1 else out
    await b.kernel("reduce", "channel_sum", groups_per_channel(channels, parts), params=params, x=x,
                   out=target)
    if parts > 1:
        await reduce_splits(b, target, out, parts, channels)


async def column_parts(b, x, outer, channels):
    """(parts, P): the sums of x viewed as [outer, channels] over P parts of its rows, float32
    [P, channels] in a ``b.temp`` slot of its own, by reduce.wgsl ``column_parts`` (a thread per
    (part, column): neighbouring threads read a row's neighbouring values). About
    ``Builder.COLUMN_SUM_THREADS`` threads of at least 16 rows each, P <= 4096 (channel_sum
    then folds the parts with one workgroup a channel). H200, the ViT at batch 1000: its
    [65000, 64..192] bias gradients read values C apart in channel_sum, at 1/10 of the memory
    speed."""
    parts = max(1, min(-(-b.COLUMN_SUM_THREADS // channels), outer // 16, 4096))
    out = b.temp(parts * channels, "column_parts")
    params = dict(outer=outer, C=channels, inner=1, count=0, splits=parts, N=0, bias_mode=0,
                  beta=0.0, relu=0, mask=0, tail=0, part0=0)
    await b.kernel("reduce", "column_parts", groups_1d(parts * channels), params=params, x=x,
                   out=out)
    return out, parts


def _op_strides(shape, trans):
    """Strides (row, col) of op(X) for a row-major 2-D X, op = transpose when ``trans``."""
    return (1, shape[1]) if trans else (shape[1], 1)


def _bias_mode(node, c, m, n):
    """How C broadcasts to [M, N] (ONNX unidirectional broadcasting): 0 absent, 1 row vector
    [N] / [1, N], 2 column [M, 1], 3 full [M, N], 4 scalar [] / [1] / [1, 1]."""
    if c is None:
        return 0
    dims = ([1, 1] + list(c.shape))[-2:]
    if len(c.shape) > 2 or dims[0] not in (1, m) or dims[1] not in (1, n):
        raise ValueError(f"{node['name']}: Gemm C of shape {c.shape} does not broadcast to "
                         f"[{m}, {n}]")
    rows, cols = dims[0] == m and m > 1, dims[1] == n and n > 1
    return {(False, False): 4, (False, True): 1, (True, False): 2, (True, True): 3}[(rows, cols)]


async def forward(b, node, ins, outs, train):
    a_ = node["attrs"]
    A, B, C = ins[0], ins[1], ins[2] if len(ins) > 2 else None
    ta, tb = a_.get("transA", 0), a_.get("transB", 0)
    m, n = outs[0].shape
    k = A.shape[0] if ta else A.shape[1]
    await matmul(b, A, _op_strides(A.shape, ta), B, _b_strides(B.shape, tb), outs[0], m, n, k,
                 a_.get("alpha", 1.0), C, _bias_mode(node, C, m, n), a_.get("beta", 1.0),
                 relu=int("forward" in b.fused(node)))


def _b_strides(shape, trans):
    """Strides (k, n) of op(B): B is [K, N], or [N, K] when transB."""
    return (1, shape[1]) if trans else (shape[1], 1)


async def backward(b, node, ins, outs, gins, gouts):
    a_ = node["attrs"]
    A, B = ins[0], ins[1]
    C = ins[2] if len(ins) > 2 else None
    ta, tb = a_.get("transA", 0), a_.get("transB", 0)
    alpha = a_.get("alpha", 1.0)
    m, n = outs[0].shape
    k = A.shape[0] if ta else A.shape[1]
    sam, sak = _op_strides(A.shape, ta)
    sbk, sbn = _b_strides(B.shape, tb)
    dy = gouts[0]
    # an in-place ReLU before this Gemm (A its output): its backward masks dA here
    mask = A if "backward" in b.fused(node) else None
    da, gelu = gins[0], b.plan.gelu_grad_fused.get(node["name"])
    if gelu is not None:  # a Gelu before it (A its output): dA times its slope, into dGelu's input
        t = gelu[0]["inputs"][0]
        da, mask = b.plan.grads[t], b.plan.acts[t]
    if da is not None:  # d op(A)[m,k] = alpha * sum_n dY[m,n] * op(B)[k,n]
        if not ta:
            await matmul(b, dy, (n, 1), B, (sbn, sbk), da, m, k, n, alpha, mask_src=mask,
                         gelu_grad=gelu is not None)
        else:
            await matmul(b, B, (sbk, sbn), dy, (1, n), da, k, m, n, alpha, mask_src=mask,
                         gelu_grad=gelu is not None)
    db = gins[2] if C is not None and len(gins) > 2 else None
    if db is not None and a_.get("beta", 1.0) != 1.0:
        raise NotImplementedError(f"{node['name']}: gradient of C with beta != 1")
    mode = _bias_mode(node, C, m, n) if db is not None else 0
    # a row-vector bias's gradient (the sum of dY over m) from the weight gradient's loads
    row_sums = db if mode == 1 else None
    if gins[1] is not None:  # d op(B)[k,n] = alpha * sum_m op(A)[m,k] * dY[m,n]
        if not tb:
            done = await matmul(b, A, (sak, sam), dy, (n, 1), gins[1], k, n, m, alpha,
                                bsum=row_sums, bsum_of=2)
        else:
            done = await matmul(b, dy, (1, n), A, (sam, sak), gins[1], n, k, m, alpha,
                                bsum=row_sums, bsum_of=1)
        if done:
            db = None
    if db is None:
        return
    if mode == 1:
        await channel_sum(b, dy, db, outer=m, channels=n, inner=1)
    elif mode == 2:
        await channel_sum(b, dy, db, outer=1, channels=m, inner=n)
    elif mode == 4:
        await channel_sum(b, dy, db, outer=1, channels=1, inner=m * n)
    else:
        await reduce_splits(b, dy, db, 1, m * n)

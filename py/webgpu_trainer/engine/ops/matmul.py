"""MatMul (ONNX MatMul = numpy.matmul) forward and backward (shaders/matmul.wgsl).

Y = A @ B over the last two dims; a 1-D A [K] is promoted to [1, K] and a 1-D B [K] to [K, 1],
the added dim removed from Y; the batch dims (all but the last two) broadcast numpy-style.
Gradients (PyTorch's matmul backward): dA = dY @ B^T and dB = A^T @ dY, each summed over the
batch dims its operand was broadcast along. Any operand may be a weight (nn.Linear exported as
MatMul(x, W^T) + Add, or MatMul(W, x)) or an activation; float32, contiguous row-major.

Every product is one dispatch of the batched kernel (plus one ``reduce_splits`` when the k
range is split; on GPU adapters a product with no batch dims left goes to the Gemm's kernels):
batch dims are described by sizes and per-operand strides (0 where the operand
broadcasts), "kept" (the output's) or "reduced" (summed, in the gradients). Before dispatch the
dims are simplified: size-1 dims dropped, adjacent dims merged, kept dims that only one operand
walks contiguously folded into the rows, reduced dims contiguous with the k range folded into k
(the weight gradient of a batched Linear becomes one long, splittable sum).
"""

import math

from ..backends.base import groups_1d
from . import gemm
from .gemm import reduce_splits
from ..errors import GraphError

TYPES = ("MatMul",)
ATTRS = {"MatMul": {}}


def macs(node, shapes) -> int:
    """Multiply-adds of one sample: output elements x K (the last dim of A)."""
    return math.prod(shapes[node["outputs"][0]][1:]) * shapes[node["inputs"][0]][-1]


MAX_DIMS = 4  # kept / reduced batch dims of one dispatch (after merging)


def _split(a, b):
    """(batch shape, A's and B's batch shapes left-padded with 1, rows N, inner K, cols M) of
    numpy.matmul(A, B) with 1-D operands promoted; raises ValueError when they do not fit."""
    if not a or not b:
        raise ValueError(f"a scalar operand: shapes {a} and {b}")
    a2 = [1] + list(a) if len(a) == 1 else list(a)
    b2 = list(b) + [1] if len(b) == 1 else list(b)
    if a2[-1] != b2[-2]:
        raise ValueError(f"inner sizes differ: A {a} vs B {b}")
    ab, bb = a2[:-2], b2[:-2]
    rank = max(len(ab), len(bb))
    ab, bb = [1] * (rank - len(ab)) + ab, [1] * (rank - len(bb)) + bb
    batch = []
    for x, y in zip(ab, bb):
        if x != y and 1 not in (x, y):
            raise ValueError(f"batch dims do not broadcast: A {a} vs B {b}")
        batch.append(y if x == 1 else x)
    return batch, ab, bb, a2[-2], a2[-1], b2[-1]


def out_shape(a, b):
    """numpy.matmul's output shape for operand shapes ``a`` and ``b`` (lists of int)."""
    batch, _, _, n, _, m = _split(a, b)
    return batch + ([n] if len(a) > 1 else []) + ([m] if len(b) > 1 else [])


def _perms(node):
    """The folded Transposes (engine/rewrites/transposes.py): (perm of operand 0, of operand 1,
    of the output), each a list or None."""
    a = node.get("attrs") or {}
    return a.get("_perm0"), a.get("_perm1"), a.get("_perm_y")


def _permuted(shape, perm):
    """``shape`` transposed by ``perm`` (numpy.transpose's axes); ``shape`` when None."""
    if perm is None:
        return list(shape)
    if sorted(perm) != list(range(len(shape))):
        raise ValueError(f"perm {perm} does not fit shape {list(shape)}")
    return [shape[p] for p in perm]


def infer(node, ins, consts):
    """numpy.matmul's output shape (operands and output transposed by the node's folded
    Transposes); raises GraphError naming the node when the shapes do not fit (inner sizes,
    batch broadcasting, a 0-D operand, a perm of the wrong rank)."""
    p0, p1, py = _perms(node)
    try:
        return [_permuted(out_shape(_permuted(ins[0], p0), _permuted(ins[1], p1)), py)]
    except ValueError as exc:
        raise GraphError(f"node {node['name']} (MatMul): {exc}") from exc


def init(node, graph):
    """PyTorch's default init (engine/init.py) of a 2-D weight B [in, out] as nn.Linear's
    (exported as MatMul(x, W^T) + Add(bias)): U(+-1/sqrt(in)), and the same for the parameters
    of an Add that reads the product (the bias)."""
    ins = node["inputs"]
    w = graph.tensors.get(ins[1])
    if w is None or len(w["shape"]) != 2:
        return []
    fan_in = w["shape"][0]
    out = [(ins[1], "uniform", fan_in)]
    for user in graph.consumers.get(node["outputs"][0], []):
        if user["op_type"] == "Add":
            out += [(name, "uniform", fan_in) for name in user["inputs"] if name in graph.tensors]
    return out


def _strides(batch, own, mat):
    """Per batch dim the element stride of an operand with batch shape ``own`` (padded to
    ``batch``'s rank, contiguous, ``mat`` elements per matrix); 0 where it broadcasts."""
    out, s = [0] * len(batch), mat
    for i in range(len(batch) - 1, -1, -1):
        out[i] = s if own[i] == batch[i] and batch[i] > 1 else 0
        s *= own[i]
    return out


def _merge(dims):
    """Merge adjacent dims (size, stride_a, stride_b[, stride_out]) whose strides all chain."""
    out = []
    for d in dims:
        if out and all(p == c * d[0] for p, c in zip(out[-1][1:], d[1:])):
            out[-1] = (out[-1][0] * d[0], *d[1:])
            continue
        out.append(tuple(d))
    return out


def _vec(dims, k):
    """Component ``k`` (0 size, 1 stride a, 2 stride b, 3 stride out) of up to 4 dims,
    right-aligned."""
    pad = [(1, 0, 0, 0)] * (MAX_DIMS - len(dims)) + list(dims)
    return [d[k] for d in pad]


WG_TILE = 4096  # floats of matmul.wgsl matmul_wg's workgroup tile
WG_THREADS = 256  # its workgroup


def _wg_chunk(b, rows, cols, inner, red, kept) -> int:
    """The k values ``matmul_wg`` (a 256-thread workgroup per batch index, operands staged in
    workgroup memory) stages at a time for a product of ``kept`` batch indices, or 0 for the
    per-thread kernel. GPU adapters (``b.tiled``), no reduced batch dims, and A [rows, k] plus
    B^T [cols, k] with rows padded to k + 1 fitting the 4096-float tile:

    - the whole of k, with more than ``Builder.MATMUL_WG`` 4x4 blocks a batch index:
      attention's per-head scores at 65 tokens (289 blocks; H200 ViT at batch 1000 7.39 ->
      7.22 ms). At 28 tokens (49 blocks) it lost with 64 or 256 threads (the encoder 2.14 ->
      2.29 / 2.20 ms).
    - chunks of k (>= 8), with at most 256 blocks (one a thread, summed over the chunks), when
      the per-thread kernel would run fewer than ``Builder.SPLIT_THREADS`` threads: attention's
      K-65 products at batch 64 (ViT 1.94 -> 1.85 ms). At batch 1000 (68 of 256 threads busy)
      it lost: 7.23 -> 8.23.
    """
    if not b.tiled or b.MATMUL_WG is None or red or inner <= 0:
        return 0
    blocks = -(-rows // 4) * -(-cols // 4)
    if (rows + cols) * (inner + 1) <= WG_TILE:
        return inner if blocks > b.MATMUL_WG else 0
    kc = WG_TILE // (rows + cols) - 1
    few = kept * blocks < b.SPLIT_THREADS
    return kc if few and blocks <= WG_THREADS and kc >= 8 else 0


async def batched(b, a, a_mat, bm, b_mat, out, rows, cols, inner, dims, node=None,
                  out_mat=None, alpha=1.0):
    """out[z, m, n] = sum_r sum_k a[A(z, r) + m*sam + k*sak] * bm[B(z, r) + k*sbk + n*sbn]
    (r over the reduced batch dims).

    ``a_mat`` = (sam, sak), ``b_mat`` = (sbk, sbn) element strides; ``dims``: batch dims
    ``(size, stride_a, stride_b, kept)`` in order, kept ones laid out contiguously in ``out``
    (outermost first) ahead of [rows, cols]. One dispatch (+ a split-K reduction).
    ``out_mat`` = (som, son): out is strided instead (a folded Transpose, rewrites/transposes;
    each dim a 5th entry, its out stride): out[z, m, n] at z . so + m*som + n*son, one
    dispatch, unsplit, never on the Gemm's kernels. ``alpha``: every output value scaled by
    it (a folded scalar Mul, ``_alpha``).
    """
    sam, sak = a_mat
    sbk, sbn = b_mat
    if out_mat is None:  # contiguous: kept dims outermost first ahead of [rows, cols]
        out_mat, so, full = (cols, 1), rows * cols, []
        for d in reversed(dims):
            full.append((*d[:4], so if d[3] else 0))
            so *= d[0] if d[3] else 1
        dims = full[::-1]
    som, son = out_mat
    dims = [d for d in dims if d[0] != 1]
    strided = (som, son) != (cols, 1) or any(
        d[4] != rows * cols * math.prod(e[0] for e in dims[i + 1:] if e[3])
        for i, d in enumerate(dims) if d[3])
    total = math.prod(out.shape)
    if total == 0:
        return  # nothing to write (an empty output)
    red = [d[:3] for d in dims if not d[3]]
    if any(d[0] == 0 for d in red):
        inner, red = 0, []  # a sum over nothing: the kernel writes zeros
    # reduced dims contiguous with k (in both operands) become part of k
    changed = True
    while changed:
        changed = False
        for d in red:
            if d[1] == inner * sak and d[2] == inner * sbk:
                inner *= d[0]
                red.remove(d)
                changed = True
                break
    kept = _merge([(d[0], d[1], d[2], d[4]) for d in dims if d[3]])
    # the innermost kept dims walk A's rows and out's contiguously, B not at all: they
    # become rows
    while kept:
        size, sa, sb, so = kept[-1]
        if sb == 0 and sa == rows * sam and so == rows * som:
            rows *= size
            kept.pop()
        else:
            break
    red = _merge(red)
    if len(kept) > MAX_DIMS or len(red) > MAX_DIMS:
        raise NotImplementedError(
            f"{node['name'] if node else 'MatMul'}: more than {MAX_DIMS} kept or reduced batch "
            f"dims after merging ({kept}, {red})")
    if not kept and not red and inner and not strided and b.tiled and \
            getattr(b, "MATMUL_GEMM", True):
        # one plain product on a GPU adapter: the Gemm's kernels (workgroup-memory tiles that
        # read either operand along its contiguous dim, where this kernel read a Linear's W
        # across rows for dX = dY @ W^T: 5x the forward's time on an H200; else its untiled
        # kernel, k unrolled by 4, with its own split-K rule). CPU adapters keep this kernel
        # (and its golden numbers).
        await gemm.matmul(b, a, (sam, sak), bm, (sbk, sbn), out, rows, cols, inner,
                          alpha=alpha)
        return
    nkept = math.prod([d[0] for d in kept])
    base = dict(M=rows, N=cols, K=inner, sam=sam, sak=sak, sbk=sbk, sbn=sbn, kept=nkept,
                ks=_vec(kept, 0), ksa=_vec(kept, 1), ksb=_vec(kept, 2), kso=_vec(kept, 3),
                som=som, son=son, strided=int(strided), alpha=float(alpha))
    kc = _wg_chunk(b, rows, cols, inner, red, nkept)
    if kc:
        params = dict(base, splits=1, reduced=1, kc=kc, rs=_vec([], 0), rsa=_vec([], 1),
                      rsb=_vec([], 2))
        tile = -(-(rows + cols) * (kc + 1) // 64) * 64
        entry = "matmul_wg" if kc == inner else "matmul_wg_chunks"
        await b.kernel("matmul", entry, groups_1d(nkept, 1), params=params,
                       constants={"TILE": tile}, a=a, bm=bm, out=out)
        return
    threads = nkept * ((rows + 3) // 4) * ((cols + 3) // 4)
    splits = b.splits(threads, inner, min_per_split=64) if inner and not strided else 1
    target = b.temp(splits * total) if splits > 1 else out
    params = dict(base, splits=splits, reduced=math.prod([d[0] for d in red]), kc=0,
                  rs=_vec(red, 0), rsa=_vec(red, 1), rsb=_vec(red, 2))
    gx, gy, _ = groups_1d(threads)
    await b.kernel("matmul", "matmul", (gx, gy, splits), params=params, a=a, bm=bm, out=target)
    if splits > 1:
        await reduce_splits(b, target, out, splits, total)


def _logical(shape, perm):
    """(shape, element strides) of a contiguous tensor of ``shape`` seen through ``perm``
    (numpy.transpose(x, perm)); ``perm`` None: itself."""
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    if perm is None:
        return list(shape), strides
    return [shape[p] for p in perm], [strides[p] for p in perm]


def _operands(node, A, B):
    """The layout of a MatMul with folded Transposes (rank >= 2 operands): (batch, n, k, m,
    A's batch strides, (sam, sak), B's batch strides, (sbk, sbn), Y's logical batch strides,
    (sym, syn)); a stride is 0 on a batch dim the operand broadcasts along."""
    p0, p1, py = _perms(node)
    la, sa = _logical(A.shape, p0)
    lb, sb = _logical(B.shape, p1)
    batch, ab, bb, n, k, m = _split(la, lb)
    ly = batch + [n, m]
    if py is None:
        _, sy = _logical(ly, None)
    else:  # Y is stored as transpose(logical, py): logical dim py[j] has storage stride j's
        _, zs = _logical(_permuted(ly, py), None)
        sy = [0] * len(ly)
        for j, d in enumerate(py):
            sy[d] = zs[j]

    def batch_strides(own, strides):
        pad = len(batch) - len(own)
        full = [0] * pad + list(strides[:-2])
        return [full[i] if i >= pad and own[i - pad] == batch[i] and batch[i] > 1 else 0
                for i in range(len(batch))]
    return (batch, n, k, m, batch_strides(la[:-2], sa), (sa[-2], sa[-1]),
            batch_strides(lb[:-2], sb), (sb[-2], sb[-1]), sy[:-2], (sy[-2], sy[-1]))


def _alpha(node) -> float:
    """The scale of a MatMul with folded scalar Muls (rewrites/scales.py ``_alpha``), else 1."""
    return float(node.get("attrs", {}).get("_alpha", 1.0))


async def _forward_folded(b, node, A, B, Y):
    batch, n, k, m, sa, a_mat, sb, b_mat, sy, y_mat = _operands(node, A, B)
    dims = [(d, x, y, True, o) for d, x, y, o in zip(batch, sa, sb, sy)]
    await batched(b, A, a_mat, B, b_mat, Y, n, m, k, dims, node, out_mat=y_mat,
                  alpha=_alpha(node))


async def _backward_folded(b, node, A, B, dY, gins):
    """dA = dY @ B^T and dB = A^T @ dY through the folded Transposes' strides: dY read as Y
    was written, each gradient written in its operand's own layout (summed over the batch
    dims it broadcasts along)."""
    batch, n, k, m, sa, (sam, sak), sb, (sbk, sbn), sy, (sym, syn) = _operands(node, A, B)
    if gins[0] is not None:  # dA[n, k] = sum_m dY[n, m] * B[k, m]
        dims = [(d, y, x, sa_ != 0 or d == 1, sa_) for d, y, x, sa_ in zip(batch, sy, sb, sa)]
        await batched(b, dY, (sym, syn), B, (sbn, sbk), gins[0], n, k, m, dims, node,
                      out_mat=(sam, sak), alpha=_alpha(node))
    if len(gins) > 1 and gins[1] is not None:  # dB[k, m] = sum_n A[n, k] * dY[n, m]
        dims = [(d, x, y, sb_ != 0 or d == 1, sb_) for d, x, y, sb_ in zip(batch, sa, sy, sb)]
        await batched(b, A, (sak, sam), dY, (sym, syn), gins[1], k, m, n, dims, node,
                      out_mat=(sbk, sbn), alpha=_alpha(node))


async def forward(b, node, ins, outs, train):
    """Y = alpha * A @ B (numpy.matmul; alpha 1 unless scalar Muls were folded in): one
    batched dispatch."""
    A, B, Y = ins[0], ins[1], outs[0]
    if any(p is not None for p in _perms(node)):
        await _forward_folded(b, node, A, B, Y)
        return
    batch, ab, bb, n, k, m = _split(A.shape, B.shape)
    sa, sb = _strides(batch, ab, n * k), _strides(batch, bb, k * m)
    dims = [(d, x, y, True) for d, x, y in zip(batch, sa, sb)]
    await batched(b, A, (k, 1), B, (m, 1), Y, n, m, k, dims, node, alpha=_alpha(node))


async def backward(b, node, ins, outs, gins, gouts):
    """dA = alpha * dY @ B^T summed over the batch dims A broadcasts along; dB = alpha * A^T @
    dY likewise."""
    A, B, dY = ins[0], ins[1], gouts[0]
    if any(p is not None for p in _perms(node)):
        await _backward_folded(b, node, A, B, dY, gins)
        return
    batch, ab, bb, n, k, m = _split(A.shape, B.shape)
    sa, sb = _strides(batch, ab, n * k), _strides(batch, bb, k * m)
    sy = _strides(batch, batch, n * m)
    if gins[0] is not None:  # dA[n, k] = sum_m dY[n, m] * B[k, m]
        dims = [(d, y, x, ab[i] == d) for i, (d, y, x) in enumerate(zip(batch, sy, sb))]
        await batched(b, dY, (m, 1), B, (1, m), gins[0], n, k, m, dims, node,
                      alpha=_alpha(node))
    if len(gins) > 1 and gins[1] is not None:  # dB[k, m] = sum_n A[n, k] * dY[n, m]
        dims = [(d, x, y, bb[i] == d) for i, (d, x, y) in enumerate(zip(batch, sa, sy))]
        await batched(b, A, (1, k), dY, (m, 1), gins[1], k, m, n, dims, node,
                      alpha=_alpha(node))

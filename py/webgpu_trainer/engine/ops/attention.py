"""Attention as one op, forward and backward (shaders/attention.wgsl): the fused form of

    S = alpha_s * MatMul(Q, K^T);  P = Softmax(S, axis=-1);  Y = alpha_y * MatMul(P, V)

that ``rewrites/attention.py`` makes of those three nodes. It is not an ONNX op (ONNX's own
Attention of opset 23 has other inputs and attributes): only the rewrite makes it, and
``graph.Graph`` accepts it only from there (``internal=True``). The node keeps what the two
MatMuls had: ``scores`` / ``values`` are their attrs (folded Transposes ``_perm0`` /
``_perm1`` / ``_perm_y`` and scale ``_alpha``, rewrites/transposes.py and scales.py), so Q, K
and V are read and Y written through the strides of a head split, and the gradients are
written in Q's, K's and V's own layouts. Inputs ``[q, kt, v]`` (the first MatMul's two and
the second's B), outputs ``[y, p]``: Y (its gradient is the op's only one) and P, which only
this op's backward reads: stored as [z, TK, TQ] (transposed), and only by a training
forward (a probe's plan keeps its Softmaxes unfused, ``GpuEngine._probe_plan``).

Same numbers as the three ops within float32 rounding (softmax's maximum and sum online).
Where the rows alone are too few threads for the GPU (batch 64), each row's keys are split
over up to 8 threads (``lanes``), whose partials are added in a fixed order.
float32; the batch dims (before the last two) must match between the products with no
operand broadcast along them; the head width (Q's and V's last dim) at most ``DMAX``; rows
contiguous and every width and stride a multiple of 4 (the kernels read and write vec4s).
"""

import math
from types import SimpleNamespace

from ..backends.base import groups_1d
from . import matmul

TYPES = ("FusedAttention",)
DMAX = 64  # 4 x shaders/attention.wgsl DMAX4: the widest q / v row a thread holds


def _operands(attrs, a_shape, b_shape):
    node = {"attrs": attrs or {}}
    return matmul._operands(node, SimpleNamespace(shape=list(a_shape)),
                            SimpleNamespace(shape=list(b_shape)))


def layout(scores, values, q_shape, kt_shape, v_shape) -> dict:
    """The kernel's sizes and strides for the products of attrs ``scores`` and ``values``
    (each MatMul's attrs) over inputs of these shapes: a dict of shaders/attention.wgsl
    Params fields (less ``write_p`` and ``want``; strides in vec4s) and ``DQ4`` / ``DV4``
    (the head widths in vec4s). Raises ValueError saying why they
    cannot be one op: a transposed score output (``_perm_y`` of the first product) or a
    transposed P (``_perm0`` of the second), batch dims that differ or broadcast, more than
    4 of them, a head wider than ``DMAX``, rows not contiguous or a width or stride not a
    multiple of 4."""
    if (scores or {}).get("_perm_y") is not None or (values or {}).get("_perm0") is not None:
        raise ValueError("the scores are stored transposed")
    batch, tq, dq, tk, qb, (q_r, q_c), kb, (k_c, k_r), _, _ = _operands(scores, q_shape,
                                                                       kt_shape)
    p_shape = batch + [tq, tk]
    batch2, n2, k2, dv, _, _, vb, (v_r, v_c), yb, (y_r, y_c) = _operands(values, p_shape,
                                                                         v_shape)
    if batch2 != batch or n2 != tq or k2 != tk:
        raise ValueError(f"the products' shapes differ: {batch + [tq, tk]} vs "
                         f"{batch2 + [n2, k2]}")
    dims = [i for i, d in enumerate(batch) if d > 1]
    if any(s[i] == 0 for s in (qb, kb, vb, yb) for i in dims):
        raise ValueError("an operand broadcasts along a batch dim")
    if len(dims) > 4:
        raise ValueError(f"{len(dims)} batch dims (at most 4)")
    if not (0 < dq <= DMAX and 0 < dv <= DMAX) or tq < 1 or tk < 1:
        raise ValueError(f"head widths {dq}, {dv} (1 to {DMAX})")
    if (q_c, k_c, v_c, y_c) != (1, 1, 1, 1):
        raise ValueError("rows not contiguous")
    strides = [dq, dv, q_r, k_r, v_r, y_r] + [s[i] for s in (qb, kb, vb, yb) for i in dims]
    if any(s % 4 for s in strides):
        raise ValueError("a width or stride not a multiple of 4 (the kernel reads vec4s)")

    def vec(s):  # batch strides in vec4s
        return [0] * (4 - len(dims)) + [s[i] // 4 for i in dims]
    zs = [1] * (4 - len(dims)) + [batch[i] for i in dims]
    z = math.prod(zs)
    return dict(TQ=tq, TK=tk, rows=z * tq, keys=z * tk, zs=zs, q_b=vec(qb), k_b=vec(kb),
                v_b=vec(vb), y_b=vec(yb), q_r=q_r // 4, k_r=k_r // 4, v_r=v_r // 4,
                y_r=y_r // 4, DQ4=dq // 4, DV4=dv // 4,
                alpha_s=float((scores or {}).get("_alpha", 1.0)),
                alpha_y=float((values or {}).get("_alpha", 1.0)))


def infer(node, ins, consts):
    """[Y's shape, P's shape]: the second product's output (through its ``_perm_y``) and the
    scores' [batch..., TQ, TK]."""
    a = node["attrs"]
    s = matmul.infer({"name": node["name"], "attrs": a["scores"]}, ins[:2], consts[:2])[0]
    y = matmul.infer({"name": node["name"], "attrs": a["values"]}, [s, ins[2]],
                     [None, consts[2]])[0]
    return [y, s]


UNROLL_ROWS = 1 << 17  # fewer query rows: 4 keys a loop step (attention.wgsl U), else 1


def lanes(b, rows: int, length: int) -> int:
    """Threads a row (attention.wgsl LANES: 1, 2, 4 or 8) for ``rows`` rows (queries, or keys
    in attention_dkv) each over ``length`` keys (queries): doubled while the rows' threads
    stay below ``Builder.ATTENTION_LANE_THREADS`` and each lane keeps at least 2 of the
    length, on GPU adapters (``b.tiled``; a CPU adapter runs few threads at once anyway).
    1 with the target None (A/B)."""
    target = getattr(b, "ATTENTION_LANE_THREADS", None) if b.tiled else None
    n = 1
    while target and n < 8 and rows * n < target and 4 * n <= length:
        n *= 2
    return n


def _params(node, ins):
    """(Params, override constants) of the node's dispatches. U, keys a step: 4 below
    ``UNROLL_ROWS`` rows (H100, GPU ms a step with 4 / with 1: encoder at 64 (7,168 rows)
    0.375 / 0.387, ViT at 64 (16,640) 1.040 / 1.091, encoder at 1000 (112,000) 1.306 /
    1.315), 1 from there (ViT at 1000, 260,000 rows: 4.77 / 4.68)."""
    a = node["attrs"]
    lay = layout(a["scores"], a["values"], ins[0].shape, ins[1].shape, ins[2].shape)
    consts = {"DQ4": lay.pop("DQ4"), "DV4": lay.pop("DV4"),
              "U": 4 if lay["rows"] < UNROLL_ROWS else 1}
    return lay, consts


async def forward(b, node, ins, outs, train):
    """Y (and, when training, P for the backward) in one dispatch: ``lanes`` threads a query
    row."""
    params, consts = _params(node, ins)
    n = lanes(b, params["rows"], params["TK"])
    await b.kernel("attention", "attention_forward", groups_1d(params["rows"] * n),
                   params={**params, "write_p": int(train), "want": 0},
                   constants={**consts, "LANES": n} if n > 1 else consts,
                   q=ins[0], k=ins[1], v=ins[2], pt=outs[1], out=outs[0])


async def backward(b, node, ins, outs, gins, gouts):
    """dQ (with D = rowsum(P * dP) into scratch), then dK and dV: two dispatches."""
    if gouts[0] is None or all(g is None for g in gins):
        return
    params, consts = _params(node, ins)
    dsum = b.scratch(params["rows"], "attention.dsum")
    want = sum(1 << k for k, g in enumerate(gins[:3]) if g is not None)
    params = {**params, "write_p": 0, "want": want}
    common = dict(q=ins[0], k=ins[1], v=ins[2], dy=gouts[0], pt=outs[1], dsum=dsum)
    n = lanes(b, params["rows"], params["TK"])
    await b.kernel("attention", "attention_dq", groups_1d(params["rows"] * n), params=params,
                   constants={**consts, "LANES": n} if n > 1 else consts, out=gins[0],
                   **common)
    if gins[1] is not None or gins[2] is not None:
        n = lanes(b, params["keys"], params["TQ"])
        await b.kernel("attention", "attention_dkv", groups_1d(params["keys"] * n),
                       params=params, constants={**consts, "LANES": n} if n > 1 else consts,
                       out=gins[1], out2=gins[2], **common)

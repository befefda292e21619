"""MatMul (ops/matmul.py, shaders/matmul.wgsl): each operand a weight or an activation
(input -> Gemm -> Reshape to the operand's shape, so its gradient flows into that Gemm); the
product is reshaped to [batch, -1] and ends in a Gemm + LogSoftmax head."""

import numpy as np

from cases import case
from cases.blocks import chain, head2, shape_const
from conftest import f32, head, node, rng_for

# id: (A, B, batch) with each operand ("param" | "act", shape); an activation's element count
# is a multiple of batch.
SHAPES = {
    # [N, K] @ [K, M] with a weight B, sizes 1 / 7 / 33
    "2d_1x1x1": (("act", [1, 1]), ("param", [1, 1]), 1),
    "2d_7x33x7": (("act", [7, 33]), ("param", [33, 7]), 7),
    "2d_33x7x33": (("act", [33, 7]), ("param", [7, 33]), 33),
    "2d_1x7x33": (("act", [1, 7]), ("param", [7, 33]), 1),
    "2d_33x1x7": (("act", [33, 1]), ("param", [1, 7]), 33),
    # batched activation times a weight (nn.Linear by the dynamo exporter: x @ W^T)
    "3d_x_2d": (("act", [3, 7, 33]), ("param", [33, 5]), 3),
    "3d_x_2d_splitk_fwd": (("act", [4, 5, 300]), ("param", [300, 3]), 4),
    "3d_x_2d_splitk_dw": (("act", [8, 40, 7]), ("param", [7, 3]), 8),
    # broadcast batch dims on both sides: [2, 1, N, K] @ [3, K, M]
    "bcast_4d": (("act", [2, 1, 7, 5]), ("param", [3, 5, 6]), 2),
    "bcast_4d_33": (("act", [2, 1, 1, 33]), ("param", [3, 33, 7]), 2),
    "bcast_4d_weight_a": (("param", [3, 7, 5]), ("act", [2, 1, 5, 6]), 2),
    # the weight as the first operand: W [P, K] @ x [B, K, M] (dW sums over the batch)
    "weight_a_2d": (("param", [6, 7]), ("act", [3, 7, 33]), 3),
    # 1-D operands
    "vec_param_x_3d": (("param", [7]), ("act", [3, 7, 5]), 3),
    "3d_x_vec_param": (("act", [3, 5, 7]), ("param", [7]), 3),
    "2d_x_vec_param": (("act", [4, 33]), ("param", [33]), 4),
    "vec_x_vec": (("act", [7]), ("param", [7]), 1),
    "vec_x_2d_param": (("act", [33]), ("param", [33, 7]), 1),
    # activation times activation: both gradients
    "act_act_3d": (("act", [3, 7, 5]), ("act", [3, 5, 33]), 3),
    "act_act_bcast": (("act", [2, 3, 7, 5]), ("act", [2, 1, 5, 4]), 2),
    "act_act_2d": (("act", [1, 33]), ("act", [33, 7]), 1),
}


def matmul_case(name, a_spec, b_spec, batch, same=False):
    """The case of one MatMul of ``a_spec`` and ``b_spec`` (``same``: MatMul(a, a))."""
    rng = rng_for("matmul", name)
    fin = 5
    nodes, tensors, consts, acts = [], [], {}, []
    names = []
    for tag, (kind, shape) in zip("ab", (a_spec, b_spec)):
        if same and tag == "b":
            names.append(names[0])
            break
        numel = int(np.prod(shape))
        if kind == "param":
            w = f32(rng.standard_normal(shape) / np.sqrt(shape[-2] if len(shape) > 1 else 4))
            tensors.append((f"{tag}.w", w, "param"))
            names.append(f"{tag}.w")
            continue
        assert numel % batch == 0, (name, shape, batch)
        per = numel // batch
        tensors += [(f"{tag}.pre.w", f32(rng.standard_normal((per, fin)) / np.sqrt(fin)), "param"),
                    (f"{tag}.pre.b", f32(0.1 * rng.standard_normal(per)), "param")]
        consts[f"{tag}.shape"] = shape_const(shape)
        nodes += [node("Gemm", ["input", f"{tag}.pre.w", f"{tag}.pre.b"], [f"{tag}.flat"],
                       transB=1),
                  node("Reshape", [f"{tag}.flat", f"{tag}.shape"], [tag])]
        names.append(tag)
        acts.append(tag)
    nodes.append(node("MatMul", names, ["y"]))
    y_shape = list(np.matmul(np.zeros(a_spec[1]), np.zeros(b_spec[1])).shape)
    consts["y.shape"] = shape_const([batch, -1])
    nodes.append(node("Reshape", ["y", "y.shape"], ["y2"]))
    feats = max(1, int(np.prod(y_shape)) // batch)
    hn, ht = head2("y2", feats, rng)
    x = f32(rng.standard_normal((batch, fin)))
    return case(f"matmul/{name}", nodes + hn, tensors + ht, x, np.zeros(batch, np.int64),
                constants=consts, tag="MatMul", acts=tuple(acts) + ("y",),
                dacts=tuple(acts) + ("y",))


def _batched_weight():
    """[N, 3, 7, 7] @ a [7, 5] weight after a 1x1 Conv (the browser's first parity list)."""
    rng = rng_for("matmul_batched_weight")
    c, hw = 3, 7
    return chain(rng, "matmul/chain_batched_weight", c, hw, [
        node("MatMul", ["pre", "mm.w"], ["body_out"])], c * hw * 5,
        extra=[("mm.w", f32(rng.standard_normal((hw, 5)) / np.sqrt(hw)), "param")],
        tag="MatMul", acts=("pre", "body_out"), dacts=("pre", "body_out"))


def attention(id, rng, tokens=6, heads=2, width=16, features=8, batch=2, classes=3, **opts):
    """Scaled dot-product attention by hand: input [N, tokens, features] -> q, k, v (MatMuls
    by weights, no key bias: its gradient is zero) -> ``heads`` heads of ``width`` (Reshape,
    Transpose) -> MatMul(q, k^T) * width^-1/2 -> Softmax(-1) -> MatMul(., v) -> Transpose,
    Reshape -> Gemm -> LogSoftmax. With ``fuse_all_attention`` the plan runs the product,
    Softmax and product as one FusedAttention (shaders/attention.wgsl's three kernels).
    6 tokens leave a partial step of the kernels' 4 keys (queries) a step; on GPU adapters
    (Builder.TILED) each row's keys (dK / dV: each key's queries) are split over
    ``ops/attention.lanes`` threads (attention.wgsl LANES): 2 at 6 tokens, 8 from 32."""
    d = heads * width
    nodes, tensors = [], []
    for name, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [node("MatMul", ["input", f"{name}.w"], [f"{name}.lin"]),
                  node("Reshape", [f"{name}.lin", "heads.shape"], [f"{name}.split"]),
                  node("Transpose", [f"{name}.split"], [name], perm=perm)]
        tensors.append((f"{name}.w", f32(rng.standard_normal((features, d))
                                         / np.sqrt(features)), "param"))
    nodes += [node("MatMul", ["q", "k"], ["s"]), node("Mul", ["s", "scale"], ["s2"]),
              node("Softmax", ["s2"], ["p"], axis=-1), node("MatMul", ["p", "v"], ["y"]),
              node("Transpose", ["y"], ["yt"], perm=[0, 2, 1, 3]),
              node("Reshape", ["yt", "flat.shape"], ["flat"])]
    hn, ht = head("flat", tokens * d, classes, rng)
    consts = {"heads.shape": shape_const([0, tokens, heads, width]),
              "flat.shape": shape_const([0, -1]),
              "scale": {"dtype": "float32", "shape": [], "values": [width ** -0.5]}}
    x = rng.standard_normal((batch, tokens, features))
    return case(id, nodes + hn, tensors + ht, x, np.arange(batch) % classes, constants=consts,
                fuse_all_attention=True, **opts)


def runs_fused_attention(res, want):
    """The plan ran the attention as one FusedAttention, not MatMul, Softmax, MatMul."""
    ops = [n["op_type"] for n in res["plan"].graph.nodes]
    assert ops.count("FusedAttention") == 1 and "Softmax" not in ops, ops


CASES = [matmul_case(name, *SHAPES[name]) for name in SHAPES] + \
    [matmul_case("same_operand", ("act", [3, 7, 7]), ("act", [3, 7, 7]), 3, same=True),
     _batched_weight(),
     # the GPU self-check's case of shaders/attention.wgsl (forward, backward): 38 tokens, 8
     # threads a row on GPU adapters (LANES 8: forward and dQ over the keys, dK / dV over the
     # queries), whose loop of 4 x 8 keys a step leaves a partial step of 6 (one thread a row:
     # 38 = 9 x 4 + 2); one head of 64 (ops/attention.DMAX): the lanes' partial rows meet in
     # 4 rounds (lane_sums) and each lane stores 2 of a row's 16 vec4; 2 classes keep the
     # head's weights (38 x 64 x 2) and selfcheck.json small
     attention("matmul/chain_attention", rng_for("matmul_attention"), tokens=38, heads=1,
               width=64, classes=2, tag="MatMul", acts=("flat",), dacts=("flat",),
               checks=(runs_fused_attention,), selfcheck=True)]

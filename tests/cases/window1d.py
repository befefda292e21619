"""1-D Conv and pooling cases ([N, C, L]: ``nn.Conv1d``, ``nn.MaxPool1d``, ``nn.AvgPool1d``,
``nn.AdaptiveAvgPool1d(1)``), run on the 2-D kernels as [N, C, 1, L]: input -> Conv 1-D
kernel 1 -> op -> Flatten -> Gemm -> LogSoftmax, so the op's input gradient flows into a Conv.
``CONV`` joins tests/cases/conv.py's list, ``POOL`` tests/cases/pool.py's."""

import numpy as np

from cases import case
from conftest import f32, head, node, rng_for
from webgpu_trainer.engine.ops.pool import out_len

# id: (C, K, L, k, pads [begin, end], stride, dilation, group)
CONV_SHAPES = {
    "k3_pad1": (3, 5, 16, 3, [1, 1], 1, 1, 1),
    "k5_s2_asym_pads": (2, 4, 19, 5, [2, 1], 2, 1, 1),
    "k3_dil2": (2, 3, 15, 3, [2, 2], 1, 2, 1),
    "depthwise_s2": (4, 4, 12, 3, [1, 1], 2, 1, 4),
    "group2_len33": (4, 6, 33, 3, [0, 0], 1, 1, 2),
    "k9_c9": (9, 9, 40, 9, [4, 4], 3, 1, 1),
}

# id: (op, C, L, k, pads, stride, dilation, ceil_mode, count_include_pad)
POOL_SHAPES = {
    "max_k2_s2": ("MaxPool", 3, 16, 2, [0, 0], 2, 1, 0, 0),
    "max_k3_s2_pad1_ceil": ("MaxPool", 2, 14, 3, [1, 1], 2, 1, 1, 0),
    "max_k3_dil2_asym": ("MaxPool", 2, 17, 3, [2, 0], 1, 2, 0, 0),
    "avg_k2_s2": ("AveragePool", 3, 15, 2, [0, 0], 2, 1, 0, 0),
    "avg_k3_s2_pad_incl_ceil": ("AveragePool", 2, 14, 3, [1, 1], 2, 1, 1, 1),
    "avg_k3_pad_excl": ("AveragePool", 2, 9, 3, [1, 1], 1, 1, 0, 0),
    "global_avg": ("GlobalAveragePool", 4, 13, 0, None, 1, 1, 0, 0),
    "global_max": ("GlobalMaxPool", 3, 33, 0, None, 1, 1, 0, 0),
}


def _case(id, tag, rng, c, length, body, out_shape, tensors=()):
    """input [2, c, length] -> Conv 1x1 (1-D) -> ``body`` (nodes reading "pre", writing
    "body_out" of ``out_shape`` without the batch) -> Flatten -> head."""
    batch, classes = 2, 5
    pre_w = f32(rng.standard_normal((c, c, 1)) / np.sqrt(c) + np.eye(c)[:, :, None])
    pre_b = f32(rng.standard_normal(c) * 0.1)
    nodes = [node("Conv", ["input", "pre.w", "pre.b"], ["pre"], kernel_shape=[1], pads=[0, 0],
                  strides=[1], dilations=[1], group=1), *body,
             node("Flatten", ["body_out"], ["flat"], axis=1)]
    hn, ht = head("flat", int(np.prod(out_shape)), classes, rng)
    x = f32(rng.permutation(batch * c * length).reshape(batch, c, length)
            / (batch * c * length) * 4 - 2)

    def shape(res, want):
        assert list(res["acts"]["body_out"].shape) == [batch, *out_shape]

    return case(id, nodes + hn, [("pre.w", pre_w, "param"), ("pre.b", pre_b, "param"),
                                 *tensors, *ht], x, rng.integers(0, classes, batch), tag=tag,
                acts=("pre", "body_out"), dacts=("pre", "body_out"), checks=(shape,))


def _conv(name):
    c, k, length, kw, pads, s, d, g = CONV_SHAPES[name]
    rng = rng_for("conv1d", name)
    w = f32(rng.standard_normal((k, c // g, kw)) / np.sqrt(c // g * kw))
    b = f32(rng.standard_normal(k) * 0.1)
    body = [node("Conv", ["pre", "conv.w", "conv.b"], ["body_out"], kernel_shape=[kw],
                 pads=pads, strides=[s], dilations=[d], group=g)]
    out = (length + pads[0] + pads[1] - d * (kw - 1) - 1) // s + 1
    return _case(f"conv/conv1d_{name}", "Conv", rng, c, length, body, [k, out],
                 [("conv.w", w, "param"), ("conv.b", b, "param")])


def _pool(name):
    op, c, length, k, pads, s, d, ceil, incl = POOL_SHAPES[name]
    rng = rng_for("pool1d", name)
    if op.startswith("Global"):
        return _case(f"pool/pool1d_{name}", op, rng, c, length,
                     [node(op, ["pre"], ["body_out"])], [c, 1])
    extra = {"dilations": [d]} if op == "MaxPool" else {"count_include_pad": incl}
    body = [node(op, ["pre"], ["body_out"], kernel_shape=[k], pads=pads, strides=[s],
                 ceil_mode=ceil, auto_pad="NOTSET", **extra)]
    out = out_len(length, k, s, pads[0], pads[1], d, ceil)
    return _case(f"pool/pool1d_{name}", op, rng, c, length, body, [c, out])


CONV = [_conv(name) for name in CONV_SHAPES]
POOL = [_pool(name) for name in POOL_SHAPES]

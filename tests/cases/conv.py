"""Conv (ops/conv.py, shaders/conv2d.wgsl): input -> 1x1 Conv (so the tested conv's input
gradient is computed) -> Conv -> Flatten -> Gemm -> LogSoftmax, one training step."""

import numpy as np

from cases import case, window1d
from conftest import f32, head, node, rng_for

SHAPES = {
    # id: (C, K, H, W, (kh, kw), pads, strides, dilations, group)
    "3x3_s1_nopad": (3, 5, 8, 8, (3, 3), [0, 0, 0, 0], [1, 1], [1, 1], 1),
    "5x5_s2_pad2": (2, 4, 9, 9, (5, 5), [2, 2, 2, 2], [2, 2], [1, 1], 1),
    "3x3_asym_pads": (3, 6, 7, 6, (3, 3), [1, 0, 2, 1], [1, 1], [1, 1], 1),
    "3x3_dil2": (2, 3, 9, 9, (3, 3), [1, 1, 1, 1], [1, 1], [2, 2], 1),
    "group2": (4, 6, 6, 6, (3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 2),
    "depthwise_s2": (5, 5, 7, 7, (3, 3), [1, 1, 1, 1], [2, 2], [1, 1], 5),
    "one_channel": (1, 1, 5, 7, (3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1),
    "seven": (7, 7, 5, 7, (3, 3), [0, 0, 0, 0], [1, 1], [1, 1], 1),
    "width33_k9": (2, 9, 3, 33, (1, 3), [0, 1, 0, 1], [1, 1], [1, 1], 1),
    "c33_k33": (33, 33, 3, 3, (3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1),
    "k17_rect_mixed": (3, 17, 7, 9, (2, 3), [0, 1, 1, 0], [2, 1], [1, 2], 1),
    "group3_k12": (6, 12, 5, 5, (3, 3), [1, 1, 1, 1], [1, 2], [1, 1], 3),
    "1x1": (5, 7, 4, 5, (1, 1), [0, 0, 0, 0], [1, 1], [1, 1], 1),
}


def _conv(name):
    c, k, h, w, (kh, kw), pads, strides, dil, group = SHAPES[name]
    batch, classes = 2, 5
    rng = rng_for("conv", name)
    pre_w = f32(rng.standard_normal((c, c, 1, 1)) / np.sqrt(c))
    pre_b = f32(rng.standard_normal(c) * 0.1)
    cw = f32(rng.standard_normal((k, c // group, kh, kw)) / np.sqrt(c // group * kh * kw))
    cb = f32(rng.standard_normal(k) * 0.1)
    x = f32(rng.standard_normal((batch, c, h, w)))
    labels = rng.integers(0, classes, batch)
    attrs = dict(kernel_shape=[kh, kw], pads=pads, strides=strides, dilations=dil, group=group)
    nodes = [node("Conv", ["input", "pre.w", "pre.b"], ["pre_out"], kernel_shape=[1, 1],
                  pads=[0, 0, 0, 0], strides=[1, 1], dilations=[1, 1], group=1),
             node("Conv", ["pre_out", "conv.w", "conv.b"], ["conv_out"], **attrs),
             node("Flatten", ["conv_out"], ["flat"], axis=1)]
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    hn, ht = head("flat", k * oh * ow, classes, rng)
    tensors = [("pre.w", pre_w, "param"), ("pre.b", pre_b, "param"),
               ("conv.w", cw, "param"), ("conv.b", cb, "param")] + ht
    return case(f"conv/{name}", nodes + hn, tensors, x, labels, tag="Conv",
                acts=("pre_out", "conv_out"), dacts=("pre_out", "conv_out"))


CASES = [_conv(name) for name in SHAPES] + window1d.CONV  # 1-D: cases/window1d.py

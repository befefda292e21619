"""Conv and ConvTranspose (ops/conv.py, shaders/conv2d.wgsl): input -> 1x1 Conv (so the tested
op's input gradient is computed) -> Conv / ConvTranspose -> Flatten -> Gemm -> LogSoftmax, one
training step; ConvTranspose also between two in-place ReLUs the plan fuses into it."""

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
    # depthwise (ops/conv_depthwise.py): width 9 (a 1-column block), a rectangular dilated
    # window with asymmetric pads and mixed strides, and 32 rows of 40 at batch 2: the weight
    # gradient in 5 parts added by reduce.wgsl
    "depthwise_s1_w9": (8, 8, 6, 9, (3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 8),
    "depthwise_rect_dil": (3, 3, 7, 10, (2, 3), [0, 2, 1, 1], [1, 2], [2, 1], 3),
    "depthwise_parts": (4, 4, 16, 40, (3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 4),
    "one_channel": (1, 1, 5, 7, (3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1),
    "seven": (7, 7, 5, 7, (3, 3), [0, 0, 0, 0], [1, 1], [1, 1], 1),
    "width33_k9": (2, 9, 3, 33, (1, 3), [0, 1, 0, 1], [1, 1], [1, 1], 1),
    "c33_k33": (33, 33, 3, 3, (3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1),
    "k17_rect_mixed": (3, 17, 7, 9, (2, 3), [0, 1, 1, 0], [2, 1], [1, 2], 1),
    "group3_k12": (6, 12, 5, 5, (3, 3), [1, 1, 1, 1], [1, 2], [1, 1], 3),
    "1x1": (5, 7, 4, 5, (1, 1), [0, 0, 0, 0], [1, 1], [1, 1], 1),
    # CPU adapters (conv2d_wide.wgsl): 15 columns, 16 a forward_wide thread (WQ 4) with 3 in
    # its last quad; 10 channels, two of a second block of 8; the padded weight_wide's last
    # 4-column chunk holds 3
    "3x3_w15_k10": (3, 10, 4, 15, (3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1),
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
                acts=("pre_out", "conv_out"), dacts=("pre_out", "conv_out"),
                checks=(_on_depthwise_kernels,) if 1 < group == c == k else ())


def _kernels(plan) -> list:
    """The shader:entry of every dispatch of the plan's training step."""
    return [":".join(d[0][2].split(":")[:2]) for d in plan.fwd_train + plan.bwd]


def _on_depthwise_kernels(res, want):
    """A depthwise Conv runs on conv_depthwise.wgsl's three kernels (the weight gradient
    ``backward_weight`` on CPU adapters, ``backward_weight_wg`` on GPU ones); the other conv
    kernels serve only the 1x1 Conv before it: one forward and one weight gradient (its input needs
    no gradient), by whichever path the adapter takes (direct, pixel-parallel weight gradient
    on GPU adapters, or the implicit GEMM)."""
    got = _kernels(res["plan"])
    wgrad = "backward_weight_wg" if res["plan"].builder.tiled else "backward_weight"
    assert {"conv_depthwise:forward", "conv_depthwise:backward_input",
            f"conv_depthwise:{wgrad}"} <= set(got), got
    others = [k for k in got if k.split(":")[0] in ("conv2d", "conv2d_wgrad", "conv_gemm")
              and k != "conv2d:pack_forward"]
    assert len(others) == 2 and not any("backward_input" in k for k in others), got


def _depthwise_relu_around():
    """Conv -> Relu -> depthwise Conv (stride 2) -> Relu: the plan fuses both in-place ReLUs
    into the depthwise Conv (its forward applies the second, its dx masks by the first)."""
    rng = rng_for("conv", "relu_depthwise")
    c, h, w = 6, 7, 9
    x = f32(rng.standard_normal((2, c, h, w)))
    attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], dilations=[1, 1],
                 group=c)
    nodes = [node("Conv", ["input", "pre.w", "pre.b"], ["pre_out"], kernel_shape=[1, 1]),
             node("Relu", ["pre_out"], ["pre_relu"]),
             node("Conv", ["pre_relu", "conv.w", "conv.b"], ["conv_out"], **attrs),
             node("Relu", ["conv_out"], ["conv_relu"]),
             node("Flatten", ["conv_relu"], ["flat"], axis=1)]
    hn, ht = head("flat", c * 4 * 5, 5, rng)
    tensors = [("pre.w", f32(rng.standard_normal((c, c, 1, 1)) / np.sqrt(c)), "param"),
               ("pre.b", f32(rng.standard_normal(c) * 0.1), "param"),
               ("conv.w", f32(rng.standard_normal((c, 1, 3, 3)) / 3), "param"),
               ("conv.b", f32(rng.standard_normal(c) * 0.1), "param")] + ht
    return case("conv/relu_depthwise", nodes + hn, tensors, x, rng.integers(0, 5, 2),
                tag="Conv", acts=("pre_relu", "conv_relu"), dacts=("pre_out", "conv_out"),
                checks=(_on_depthwise_kernels, _depthwise_fused))


def _depthwise_fused(res, want):
    plan = res["plan"]
    assert "/Conv_conv_out" in plan.fused_relu
    assert "/Conv_conv_out" in plan.relu_grad_fused


T_SHAPES = {
    # id: (Ci, Co, H, W, (kh, kw), pads, strides, dilations, group, output_padding, bias)
    "t_3x3_s1": (3, 5, 5, 6, (3, 3), [0, 0, 0, 0], [1, 1], [1, 1], 1, [0, 0], True),
    "t_3x3_s1_pad1": (4, 3, 6, 5, (3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1, [0, 0], True),
    "t_4x4_s2_pad1": (3, 4, 4, 5, (4, 4), [1, 1, 1, 1], [2, 2], [1, 1], 1, [0, 0], True),
    "t_3x3_s2_outpad1": (2, 3, 4, 4, (3, 3), [1, 1, 1, 1], [2, 2], [1, 1], 1, [1, 1], True),
    "t_2x2_s2_nobias": (4, 9, 3, 4, (2, 2), [0, 0, 0, 0], [2, 2], [1, 1], 1, [0, 0], False),
    "t_rect_mixed": (3, 4, 4, 5, (2, 3), [0, 1, 1, 0], [3, 2], [2, 1], 1, [2, 1], True),
    "t_dil2_s1": (2, 3, 5, 5, (3, 3), [1, 2, 1, 2], [1, 1], [2, 2], 1, [0, 0], True),
    "t_group2_s2": (4, 6, 4, 4, (3, 3), [1, 1, 1, 1], [2, 2], [1, 1], 2, [1, 1], True),
    "t_depthwise": (5, 5, 5, 5, (3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 5, [0, 0], True),
    "t_wide_pads": (3, 10, 5, 6, (3, 3), [3, 3, 2, 3], [1, 1], [1, 1], 1, [0, 0], True),
}


def _conv_transpose(name):
    ci, co, h, w, (kh, kw), pads, strides, dil, group, opad, bias = T_SHAPES[name]
    batch, classes = 2, 5
    rng = rng_for("conv", name)
    pre_w = f32(rng.standard_normal((ci, ci, 1, 1)) / np.sqrt(ci))
    pre_b = f32(rng.standard_normal(ci) * 0.1)
    tw = f32(rng.standard_normal((ci, co // group, kh, kw)) / np.sqrt(ci // group * kh * kw))
    tb = f32(rng.standard_normal(co) * 0.1)
    x = f32(rng.standard_normal((batch, ci, h, w)))
    labels = rng.integers(0, classes, batch)
    attrs = dict(kernel_shape=[kh, kw], pads=pads, strides=strides, dilations=dil, group=group,
                 output_padding=opad)
    nodes = [node("Conv", ["input", "pre.w", "pre.b"], ["pre_out"], kernel_shape=[1, 1],
                  pads=[0, 0, 0, 0], strides=[1, 1], dilations=[1, 1], group=1),
             node("ConvTranspose", ["pre_out", "convt.w"] + (["convt.b"] if bias else []),
                  ["convt_out"], **attrs),
             node("Flatten", ["convt_out"], ["flat"], axis=1)]
    oh, ow = (strides[i] * ((h, w)[i] - 1) + opad[i] + dil[i] * ((kh, kw)[i] - 1) + 1
              - pads[i] - pads[i + 2] for i in range(2))
    hn, ht = head("flat", co * oh * ow, classes, rng)
    tensors = [("pre.w", pre_w, "param"), ("pre.b", pre_b, "param"),
               ("convt.w", tw, "param")] + ([("convt.b", tb, "param")] if bias else []) + ht
    return case(f"conv/{name}", nodes + hn, tensors, x, labels, tag="ConvTranspose",
                acts=("pre_out", "convt_out"), dacts=("pre_out", "convt_out"))


def _relu_around(name):
    """Conv -> Relu -> ConvTranspose -> Relu: the plan fuses both in-place ReLUs into the
    ConvTranspose (its forward applies the second, its dx masks by the first)."""
    c = T_SHAPES[name]
    rng = rng_for("conv", "relu_" + name)
    ci, co, h, w, (kh, kw), pads, strides, dil, group, opad, _ = c
    x = f32(rng.standard_normal((2, ci, h, w)))
    attrs = dict(kernel_shape=[kh, kw], pads=pads, strides=strides, dilations=dil, group=group,
                 output_padding=opad)
    nodes = [node("Conv", ["input", "pre.w", "pre.b"], ["pre_out"], kernel_shape=[1, 1]),
             node("Relu", ["pre_out"], ["pre_relu"]),
             node("ConvTranspose", ["pre_relu", "convt.w", "convt.b"], ["convt_out"], **attrs),
             node("Relu", ["convt_out"], ["convt_relu"]),
             node("Flatten", ["convt_relu"], ["flat"], axis=1)]
    oh, ow = (strides[i] * ((h, w)[i] - 1) + opad[i] + dil[i] * ((kh, kw)[i] - 1) + 1
              - pads[i] - pads[i + 2] for i in range(2))
    hn, ht = head("flat", co * oh * ow, 5, rng)
    tensors = [("pre.w", f32(rng.standard_normal((ci, ci, 1, 1))), "param"),
               ("pre.b", f32(rng.standard_normal(ci) * 0.1), "param"),
               ("convt.w", f32(rng.standard_normal((ci, co // group, kh, kw)) * 0.3), "param"),
               ("convt.b", f32(rng.standard_normal(co) * 0.1), "param")] + ht
    return case(f"conv/relu_{name}", nodes + hn, tensors, x, rng.integers(0, 5, 2),
                tag="ConvTranspose", acts=("pre_relu", "convt_relu"),
                dacts=("pre_out", "convt_out"), checks=(_fused,))


def _fused(res, want):
    """Both ReLUs are fused into the ConvTranspose (else the case tests nothing new)."""
    plan = res["plan"]
    assert "/ConvTranspose_convt_out" in plan.fused_relu
    assert "/ConvTranspose_convt_out" in plan.relu_grad_fused


CASES = [_conv(name) for name in SHAPES] + [_conv_transpose(name) for name in T_SHAPES] + \
    [_relu_around("t_3x3_s1_pad1"), _relu_around("t_4x4_s2_pad1"), _depthwise_relu_around()] + \
    window1d.CONV  # 1-D: cases/window1d.py

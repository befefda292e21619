"""BatchNormalization (ops/batchnorm.py, shaders/batchnorm.wgsl): 2-D (after a Conv) and 1-D
(after a Gemm), training (batch statistics, running statistics updated) and eval (running
statistics, unchanged), eps / momentum, a batch larger than one reduction part, SeedNet's
Conv -> ReLU -> BatchNorm with per-channel variances around eps, and a Conv -> BatchNorm ->
ReLU -> Dropout block after PyTorch's default init on the GPU; BatchNorm -> Clip (ReLU6), which
the plan fuses (fusion.clips_after), 2-D and 1-D, train and eval, one and several reduction
parts, with channels whose output is exactly a bound."""

import numpy as np

from cases import case
from conftest import f32, head, node, rng_for


def bn_tensors(rng, ch, prefix="bn"):
    return [(f"{prefix}.gamma", f32(1 + 0.3 * rng.standard_normal(ch)), "param"),
            (f"{prefix}.beta", f32(0.3 * rng.standard_normal(ch)), "param"),
            (f"{prefix}.mean", f32(0.2 * rng.standard_normal(ch)), "buffer"),
            (f"{prefix}.var", f32(0.5 + rng.random(ch)), "buffer")]


def bn_node(inp, out, prefix="bn", **attrs):
    return node("BatchNormalization", [inp] + [f"{prefix}.{n}" for n in
                                               ("gamma", "beta", "mean", "var")], [out],
                **attrs)


def _bn2d_model(rng, relu, eps=1e-5, momentum=0.9):
    c, k, h, w, classes = 2, 5, 5, 4, 3
    pre_w = f32(rng.standard_normal((k, c, 3, 3)) / 3)
    # no bias before BatchNorm: its gradient is zero in exact arithmetic (only rounding noise)
    nodes = [node("Conv", ["input", "pre.w"], ["pre_out"], kernel_shape=[3, 3],
                  pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1),
             bn_node("pre_out", "bn_out", epsilon=eps, momentum=momentum)]
    last = "bn_out"
    if relu:
        nodes.append(node("Relu", ["bn_out"], ["relu_out"]))
        last = "relu_out"
    nodes.append(node("Flatten", [last], ["flat"], axis=1))
    hn, ht = head("flat", k * h * w, classes, rng)
    tensors = [("pre.w", pre_w, "param")] + bn_tensors(rng, k) + ht
    return nodes + hn, tensors, (c, h, w), classes


def _bn2d_train(relu, eps, momentum):
    batch = 3
    rng = rng_for("bn2d", relu)
    nodes, tensors, (c, h, w), classes = _bn2d_model(rng, relu, eps, momentum)
    x = f32(rng.standard_normal((batch, c, h, w)) * 2 + 0.5)
    labels = rng.integers(0, classes, batch)
    if relu:  # ReLU runs in place on the BatchNorm output
        acts, dacts = ("relu_out",), ("pre_out",)
    else:
        acts, dacts = ("bn_out",), ("pre_out", "bn_out")
    return case(f"batchnorm/bn2d_train_{'relu' if relu else 'plain'}", nodes, tensors, x,
                labels, tag="BatchNormalization", acts=acts, dacts=dacts)


def _bn1d_train():
    batch, features, hidden, classes = 4, 7, 9, 5
    rng = rng_for("bn1d")
    nodes = [node("Gemm", ["input", "pre.w"], ["h"], transB=1),
             bn_node("h", "bn_out"),
             node("Relu", ["bn_out"], ["relu_out"])]
    hn, ht = head("relu_out", hidden, classes, rng)
    tensors = [("pre.w", f32(rng.standard_normal((hidden, features))), "param")] + \
        bn_tensors(rng, hidden) + ht
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)
    return case("batchnorm/bn1d_train", nodes + hn, tensors, x, labels,
                tag="BatchNormalization", acts=("relu_out",), dacts=("h",))


def _eval(dims):
    """Eval forward normalises with the running statistics and leaves them unchanged."""
    batch, classes = 3, 3
    rng = rng_for("bn_eval", dims)
    if dims == 2:
        nodes, tensors, (c, h, w), classes = _bn2d_model(rng, relu=False)
        shape = [c, h, w]
    else:
        nodes = [node("Gemm", ["input", "pre.w", "pre.b"], ["h"], transB=1),
                 bn_node("h", "bn_out")]
        hn, ht = head("bn_out", 6, classes, rng)
        nodes += hn
        tensors = [("pre.w", f32(rng.standard_normal((6, 5))), "param"),
                   ("pre.b", f32(rng.standard_normal(6)), "param")] + bn_tensors(rng, 6) + ht
        shape = [5]
    x = f32(rng.standard_normal([batch] + shape))
    labels = rng.integers(0, classes, batch)
    return case(f"batchnorm/bn{dims}d_eval", nodes, tensors, x, labels,
                tag="BatchNormalization", train=False, acts=("bn_out",))


def _two_level_sums():
    """A batch larger than one reduction part (4096 elements per channel and workgroup, as on
    GPUs), so the statistics and the gradient sums add several partial sums per channel."""
    batch, features, hidden, classes = 9000, 3, 5, 3
    rng = rng_for("bn_parts")
    nodes = [node("Gemm", ["input", "pre.w"], ["h"], transB=1), bn_node("h", "bn_out"),
             node("Relu", ["bn_out"], ["relu_out"])]
    hn, ht = head("relu_out", hidden, classes, rng)
    tensors = [("pre.w", f32(rng.standard_normal((hidden, features))), "param")] + \
        bn_tensors(rng, hidden) + ht
    x = f32(rng.standard_normal((batch, features)) * 3 + 1)
    labels = rng.integers(0, classes, batch)
    return case("batchnorm/two_level_sums", nodes + hn, tensors, x, labels,
                tag="BatchNormalization", acts=("relu_out",), dacts=("h",),
                patch={"REDUCE_CHUNK": 4096}, browser=False)


def _blocked_sums(name, shape, offsets, scales, patch=None):
    """BatchNorm2d after a per-channel Add (its output's gradient is BatchNorm's dx) on an input
    of ``shape`` = channels ``offsets`` + N(0, 1) x ``scales``, the first element of every
    channel 40 standard deviations out (the shift of the CPU adapters' sums,
    shaders/lib/bn_blocks.wgsl: an outlier there must not cost digits). Shapes and ``patch``
    (BN_BLOCK) make several blocks per channel, partial ones and vec4 tails. A mean 100
    standard deviations from zero leaves the forward's 1e-5 a mean good to 1e-7 relative (half
    an ulp of float32 is 6e-8); the Add's bias, multiples of 1/8, adds exactly there."""
    rng = rng_for("bn_blocks", name)
    batch, c, h, w = shape
    offsets, scales = np.array(offsets), np.array(scales)
    x = rng.standard_normal(shape) * scales[:, None, None] + offsets[:, None, None]
    x[0, :, 0, 0] = offsets + 40 * scales
    classes = 3
    nodes = [node("Add", ["input", "pre.b"], ["h"]), bn_node("h", "bn_out"),
             node("Relu", ["bn_out"], ["relu_out"]), node("Flatten", ["relu_out"], ["flat"],
                                                          axis=1)]
    hn, ht = head("flat", c * h * w, classes, rng)
    tensors = [("pre.b", f32(np.round(rng.standard_normal((1, c, 1, 1))) / 8), "param")] + \
        bn_tensors(rng, c) + ht
    return case(f"batchnorm/{name}", nodes + hn, tensors, x, rng.integers(0, classes, batch),
                tag="BatchNormalization", acts=("h", "relu_out"), dacts=("h",),
                zero_grads=("pre.b",), patch=patch or {}, browser=patch is None)


def _conv_relu_bn_small_var():
    """SeedNet's conv3 -> ReLU -> norm1 (ReLU fused into the Conv, its mask into BatchNorm's
    backward) at the scale of its default init: per-channel variances of the ReLU output from
    ~1e-8 to ~1e-4 around eps = 1e-5 (where the input gradient depends most on eps), one channel
    positive at a few positions only. ``SMALL_VAR`` (test_ops_batchnorm.py) checks the range and
    the oracle against torch."""
    rng = rng_for("conv_relu_bn_small_var")
    batch, c, k, classes = 4, 2, 4, 3
    scale = np.array([3e-4, 1e-3, 3e-3, 1e-2])[:, None, None, None]
    x = f32(rng.standard_normal((batch, c, 6, 6)))
    nodes = [node("Conv", ["input", "cw", "cb"], ["c1"], kernel_shape=[3, 3], pads=[0, 0, 0, 0],
                  strides=[1, 1], dilations=[1, 1], group=1),
             node("Relu", ["c1"], ["r1"]),
             node("BatchNormalization", ["r1", "g", "bt", "rm", "rv"], ["b1"], epsilon=1e-5,
                  momentum=0.9),
             node("Flatten", ["b1"], ["flat"], axis=1)]
    hn, ht = head("flat", k * 4 * 4, classes, rng)
    tensors = [("cw", f32(rng.standard_normal((k, c, 3, 3)) * scale), "param"),
               ("cb", f32(np.array([-2.0, 0.0, 0.2, 0.5]) * scale.ravel() * 4), "param"),
               ("g", f32(1 + 0.1 * rng.standard_normal(k)), "param"),
               ("bt", f32(0.1 * rng.standard_normal(k)), "param"),
               ("rm", np.zeros(k, np.float32), "buffer"),
               ("rv", np.ones(k, np.float32), "buffer")] + ht
    return case("batchnorm/conv_relu_bn_small_var", nodes + hn, tensors, x,
                np.arange(batch) % classes, tag="BatchNormalization", acts=("r1", "b1"),
                dacts=("c1",))


def _conv_bn_relu_dropout(train):
    """SeedNet's block: Conv(pads [1, 0, 1, 1], strides [2, 1]) -> BatchNorm -> ReLU ->
    Dropout(0.25) -> Flatten -> Gemm -> LogSoftmax, after Plan.init_weights(11)."""
    rng = rng_for("conv_bn_relu_dropout", train)
    batch, c, k, classes = 4, 2, 6, 5
    x = rng.standard_normal((batch, c, 7, 7))
    nodes = [node("Conv", ["input", "cw", "cb"], ["c1"], kernel_shape=[3, 3], pads=[1, 0, 1, 1],
                  strides=[2, 1], dilations=[1, 1], group=1),
             node("BatchNormalization", ["c1", "g", "bt", "rm", "rv"], ["b1"], epsilon=1e-5,
                  momentum=0.9),
             node("Relu", ["b1"], ["r1"]),
             node("Dropout", ["r1"], ["d1"], ratio=0.25),
             node("Flatten", ["d1"], ["flat"], axis=1)]
    hn, ht = head("flat", k * 4 * 6, classes, rng)
    tensors = [("cw", f32(rng.standard_normal((k, c, 3, 3)) / 4), "param"),
               ("cb", f32(rng.standard_normal(k) * 0.1), "param"),
               ("g", f32(1 + 0.1 * rng.standard_normal(k)), "param"),
               ("bt", f32(0.1 * rng.standard_normal(k)), "param"),
               ("rm", f32(0.1 * rng.standard_normal(k)), "buffer"),
               ("rv", f32(1 + 0.1 * rng.random(k)), "buffer")] + ht
    return case(f"batchnorm/conv_bn_relu_dropout_{'train' if train else 'eval'}", nodes + hn,
                tensors, x, np.arange(batch) % classes, tag="BatchNormalization", train=train,
                seed=3, init_seed=11, acts=("r1", "d1"), dacts=("c1",) if train else (),
                zero_grads=("cb",), selfcheck=True)


def _scalar(v):
    return {"dtype": "float32", "shape": [], "values": [v]}


def _bn_clip(dims, train=True, batch=3, patch=None, lo=0.0, hi=6.0, attrs=False):
    """Conv (2-D) or Gemm (1-D) -> BatchNorm -> Clip(lo, hi) -> head. gamma / beta put some
    values past each bound; channel 1 is exactly beta = hi for every element (gamma 0) and
    channel 2 exactly lo: torch.clamp's gradient passes at the bounds (lo <= y <= hi), so
    their dgamma / dbeta are the plain sums; channel 3 lies above hi (no gradient)."""
    rng = rng_for("bn_clip", dims, train, batch, lo, hi, attrs)
    k, classes = 5, 3
    if dims == 2:
        c, h, w = 2, 4, 4
        nodes = [node("Conv", ["input", "pre.w"], ["pre_out"], kernel_shape=[3, 3],
                      pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1)]
        tensors = [("pre.w", f32(rng.standard_normal((k, c, 3, 3)) / 3), "param")]
        x, flat = rng.standard_normal((batch, c, h, w)), k * h * w
    else:
        nodes = [node("Gemm", ["input", "pre.w"], ["pre_out"], transB=1)]
        tensors = [("pre.w", f32(rng.standard_normal((k, 7))), "param")]
        x, flat = rng.standard_normal((batch, 7)), k
    gamma = f32([3.0, 0.0, 0.0, 0.5, 4.0])
    beta = f32([2.0, hi, lo, hi + 1.0, 0.5])
    tensors += [("bn.gamma", gamma, "param"), ("bn.beta", beta, "param"),
                ("bn.mean", f32(0.2 * rng.standard_normal(k)), "buffer"),
                ("bn.var", f32(0.5 + rng.random(k)), "buffer")]
    nodes.append(bn_node("pre_out", "bn_out"))
    if attrs:  # opset 6-10: the bounds as attributes
        nodes.append(node("Clip", ["bn_out"], ["clip_out"], min=lo, max=hi))
        consts = None
    else:
        nodes.append(node("Clip", ["bn_out", "lo", "hi"], ["clip_out"]))
        consts = {"lo": _scalar(lo), "hi": _scalar(hi)}
    last = "clip_out"
    if dims == 2:
        nodes.append(node("Flatten", ["clip_out"], ["flat"], axis=1))
        last = "flat"
    hn, ht = head(last, flat, classes, rng)
    name = f"bn{dims}d_clip" + ("" if train else "_eval") + (f"_n{batch}" if batch != 3 else "") \
        + ("_attrs" if attrs else "") + ("" if (lo, hi) == (0.0, 6.0) else f"_{lo:g}_{hi:g}")
    return case(f"batchnorm/{name}", nodes + hn, tensors + ht, f32(x * 2),
                rng.integers(0, classes, batch), constants=consts, opset=10 if attrs else 17,
                tag="BatchNormalization", train=train, acts=("clip_out",),
                dacts=("pre_out",) if train else (), patch=patch or {},
                browser=patch is None)


CLIP_CASES = [_bn_clip(2), _bn_clip(1), _bn_clip(2, train=False), _bn_clip(1, attrs=True),
              _bn_clip(2, lo=-1.0, hi=1.5),
              # several reduction parts a channel: sum_dy / backward_input (REDUCE_CHUNK)
              _bn_clip(1, batch=9000, patch={"REDUCE_CHUNK": 4096})]

CASES = [_bn2d_train(False, 1e-5, 0.9), _bn2d_train(True, 1e-3, 0.8), _bn1d_train(),
         _eval(2), _eval(1), _two_level_sums(), _conv_relu_bn_small_var(),
         _conv_bn_relu_dropout(True),
         _conv_bn_relu_dropout(False),
         # 9 x 10 planes: 2 blocks of 45 a plane (11 vec4 + 1); 5 x 5: 2 planes a block, the
         # last one alone; BN_BLOCK 5: blocks of 5 (1 vec4 + 1) and 1 x 7 planes
         _blocked_sums("blocks_offset", (5, 3, 9, 10), [100.0, -30.0, 0.5], [1.0, 0.3, 2.0]),
         _blocked_sums("blocks_planes", (7, 2, 5, 5), [2.0, -300.0], [0.5, 3.0]),
         _blocked_sums("blocks_tiny", (3, 2, 1, 7), [1.0, 10.0], [1.0, 0.1],
                       patch={"BN_BLOCK": 5})] + CLIP_CASES

"""The GPU adapters' kernel paths (``plan.Builder.TILED``: workgroup-memory GEMM tiles, the
pixel-parallel conv weight gradient, 4-channel forward threads, grid-stride elementwise passes,
one-dispatch BatchNorm) forced on the test adapters (lavapipe, llvmpipe), against the float64
numpy engine. CPU adapters run the other kernels (tests/test_ops_<family>.py); this keeps both
paths tested: every case of the families with a GPU path, cases sized for the GPU paths' own
branches (several pixel chunks and tiles, tap blocks that idle, long BatchNorm parts), the
fused ReLU gradient on both paths, a whole SeedNet step, the GEMM kernel alone, and the GPU
paths' pipelines in Chromium (Tint)."""

import copy
import pathlib

import numpy as np
import pytest

from cases import case, family
from cases.matmul import matmul_case
from conftest import FWD_RTOL, f32, head, node, rel_err, rng_for, run
from harness import builder_patch, check_case
from webgpu_trainer.engine.plan import Builder

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend

GPU = {"TILED": True}
FAMILIES = ("activation", "batchnorm", "conv", "gemm", "layernorm", "losses", "matmul", "plan",
            "rnn", "softmax")
FAMILY_CASES = [c for f in FAMILIES for c in family(f).CASES
                if c.optimizer is None and c.steps == 1]


@pytest.mark.parametrize("case", FAMILY_CASES, ids=[c.id for c in FAMILY_CASES])
def test_family_case_gpu_paths(device, case):
    with builder_patch(GPU):
        check_case(device, case)


# Every matmul case with each batched product that fits matmul_wg's tile on it (MATMUL_WG 0:
# any number of blocks; the operands' layouts take both staging orders of A and of B).
# (The chunked k: tiled/heads_qk_65 and tiled/long_k_chunks.)
MATMUL_CASES = [c for c in family("matmul").CASES if c.optimizer is None and c.steps == 1]


@pytest.mark.parametrize("case", MATMUL_CASES, ids=[c.id for c in MATMUL_CASES])
def test_matmul_case_workgroup_kernel(device, case):
    with builder_patch({**GPU, "MATMUL_WG": 0}):
        check_case(device, case)


# Every conv case with the implicit GEMM (ops/conv_gemm.py) taken by every layer it can take
# (CONV_GEMM_MIN 1 and CONV_GEMM_STRIDED_MIN 1: group 1; groups > 1 and dilated strided input
# gradients keep the direct kernels).
CONV_CASES = [c for c in family("conv").CASES if c.optimizer is None and c.steps == 1]


@pytest.mark.parametrize("case", CONV_CASES, ids=[c.id for c in CONV_CASES])
def test_conv_case_implicit_gemm(device, case):
    with builder_patch({**GPU, "CONV_GEMM_MIN": 1, "CONV_GEMM_STRIDED_MIN": 1}):
        check_case(device, case)


def _conv_relu(name, c, k, hw, batch):
    """1x1 Conv -> 3x3 Conv -> Relu -> Flatten -> head, batch ``batch``."""
    rng = rng_for("tiled_conv", name)
    pre_w = f32(rng.standard_normal((c, c, 1, 1)) / np.sqrt(c))
    cw = f32(rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c))
    cb = f32(rng.standard_normal(k) * 0.1)
    x = f32(rng.standard_normal((batch, c, hw, hw)))
    labels = rng.integers(0, 5, batch)
    conv = dict(pads=[0, 0, 0, 0], strides=[1, 1], dilations=[1, 1], group=1)
    nodes = [node("Conv", ["input", "pre.w"], ["pre_out"], kernel_shape=[1, 1], **conv),
             node("Conv", ["pre_out", "cw", "cb"], ["conv_out"], kernel_shape=[3, 3], **conv),
             node("Relu", ["conv_out"], ["relu_out"]),
             node("Flatten", ["relu_out"], ["flat"], axis=1)]
    hn, ht = head("flat", k * (hw - 2) ** 2, 5, rng)
    tensors = [("pre.w", pre_w, "param"), ("cw", cw, "param"), ("cb", cb, "param")] + ht
    return case(f"tiled/{name}", nodes + hn, tensors, x, labels, tag="Conv (GPU path)",
                acts=("pre_out", "relu_out"), dacts=("pre_out",))


def _conv_bn(name, batch, chunk):
    """Conv (no bias: BatchNorm cancels it) -> BatchNorm2d -> Relu -> head; REDUCE_CHUNK
    ``chunk`` (None: the adapter's)."""
    c, k, hw = 3, 6, 6
    rng = rng_for("tiled_bn", name)
    cw = f32(rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c))
    gamma, beta = f32(1 + 0.1 * rng.standard_normal(k)), f32(0.1 * rng.standard_normal(k))
    x = f32(rng.standard_normal((batch, c, hw, hw)))
    labels = rng.integers(0, 4, batch)
    nodes = [node("Conv", ["input", "cw"], ["conv_out"], kernel_shape=[3, 3],
                  pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1),
             node("BatchNormalization", ["conv_out", "g", "b", "rm", "rv"], ["bn_out"],
                  epsilon=1e-5, momentum=0.9, training_mode=1),
             node("Relu", ["bn_out"], ["relu_out"]),
             node("Flatten", ["relu_out"], ["flat"], axis=1)]
    hn, ht = head("flat", k * hw * hw, 4, rng)
    tensors = [("cw", cw, "param"), ("g", gamma, "param"), ("b", beta, "param"),
               ("rm", f32(np.zeros(k)), "buffer"), ("rv", f32(np.ones(k)), "buffer")] + ht
    return case(f"tiled/{name}", nodes + hn, tensors, x, labels, tag="BatchNorm (GPU path)",
                acts=("conv_out", "relu_out"), dacts=("conv_out",),
                patch={"REDUCE_CHUNK": chunk})


def _relu_fused(name, stride):
    """Conv -> ReLU -> Conv (stride) -> ReLU -> BatchNorm: both ReLUs' backward fused into
    their consumers (plan._fusable_relu_grads), no relu_backward dispatch left."""
    c, k, hw, batch = 3, 5, 7, 3
    rng = rng_for("tiled_relu", name)
    w1 = f32(rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c))
    b1 = f32(rng.standard_normal(k) * 0.1)
    w2 = f32(rng.standard_normal((k, k, 3, 3)) / np.sqrt(9 * k))
    b2 = f32(rng.standard_normal(k) * 0.1)
    gamma, beta = f32(1 + 0.1 * rng.standard_normal(k)), f32(0.1 * rng.standard_normal(k))
    x = f32(rng.standard_normal((batch, c, hw, hw)))
    labels = rng.integers(0, 4, batch)
    conv = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], dilations=[1, 1], group=1)
    nodes = [node("Conv", ["input", "w1", "b1"], ["c1"], strides=[1, 1], **conv),
             node("Relu", ["c1"], ["r1"]),
             node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[stride, stride], **conv),
             node("Relu", ["c2"], ["r2"]),
             node("BatchNormalization", ["r2", "g", "b", "rm", "rv"], ["bn"], epsilon=1e-5,
                  momentum=0.9, training_mode=1),
             node("Flatten", ["bn"], ["flat"], axis=1)]
    o = (hw - 1) // stride + 1
    hn, ht = head("flat", k * o * o, 4, rng)
    tensors = [("w1", w1, "param"), ("b1", b1, "param"), ("w2", w2, "param"),
               ("b2", b2, "param"), ("g", gamma, "param"), ("b", beta, "param"),
               ("rm", f32(np.zeros(k)), "buffer"), ("rv", f32(np.ones(k)), "buffer")] + ht

    def fused(res, want):
        plan = res["plan"]
        assert plan.relu_grad_fused == {"/Conv_c2": "/Relu_r1",
                                        "/BatchNormalization_bn": "/Relu_r2"}
        assert not any("relu_backward" in d[0][2] for d in plan.bwd)
    return case(f"tiled/{name}", nodes + hn, tensors, x, labels, tag="ReLU grad fused",
                acts=("r1", "r2"), dacts=("c1", "c2"), checks=(fused,))


def _conv_wide(name, batch):
    """Conv 37 -> 130 (3x3, pad 1, bias) -> Relu -> Conv 130 -> 33 (3x3, dilation 2, pads
    1 1 2 0) -> head on the implicit GEMM (CONV_GEMM_MIN 1): 128 x 128 tiles with edges in
    rows (130 channels), columns (batch x 81 pixels) and the sum (333 taps: not a multiple of
    BK), split-K weight gradients, a 64 x 64 tile for the 33-channel layer, the fused ReLU in
    the forward and its gradient masked in the second layer's input gradient."""
    c, k1, k2, hw = 37, 130, 33, 9
    rng = rng_for("tiled_wide", name)
    w1 = f32(rng.standard_normal((k1, c, 3, 3)) / np.sqrt(9 * c))
    b1 = f32(rng.standard_normal(k1) * 0.1)
    w2 = f32(rng.standard_normal((k2, k1, 3, 3)) / np.sqrt(9 * k1))
    x = f32(rng.standard_normal((batch, c, hw, hw)))
    labels = rng.integers(0, 4, batch)
    nodes = [node("Conv", ["input", "w1", "b1"], ["c1"], kernel_shape=[3, 3],
                  pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1),
             node("Relu", ["c1"], ["r1"]),
             node("Conv", ["r1", "w2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 2, 0],
                  strides=[1, 1], dilations=[2, 2], group=1),
             node("Flatten", ["c2"], ["flat"], axis=1)]
    hn, ht = head("flat", k2 * 8 * 6, 4, rng)
    tensors = [("w1", w1, "param"), ("b1", b1, "param"), ("w2", w2, "param")] + ht

    def on_gemm(res, want):
        keys = [str(d[0]) for d in res["plan"].fwd_train + res["plan"].bwd]
        assert sum("conv_gemm" in k and "TW=16" in k for k in keys) >= 3, keys
        assert any("conv_gemm" in k and "TW=8" in k for k in keys), keys
        assert not any("conv2d" in k for k in keys), keys
    return case(f"tiled/{name}", nodes + hn, tensors, x, labels, tag="Conv (implicit GEMM)",
                acts=("r1", "c2"), dacts=("c1", "c2"), checks=(on_gemm,),
                patch={"CONV_GEMM_MIN": 1})


def _conv_strided(name, batch):
    """Strided input gradients by stride classes (conv_gemm.strided_input_grad): 3x3 stride 2
    on an even plane, a 3x2 window with strides (2, 3) and pads (0, 1, 1, 2) (a class that
    no tap reaches: zeros), 1x1 stride 2 (three of four classes zero); the ReLUs' gradients
    masked in the products' epilogues."""
    rng = rng_for("tiled_strided", name)
    shapes = [(10, 6, 1, 1), (12, 10, 3, 3), (9, 12, 3, 2), (7, 9, 1, 1)]
    ws = [f32(rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))) for s in shapes]
    x = f32(rng.standard_normal((batch, 6, 11, 11)))
    labels = rng.integers(0, 4, batch)
    conv = dict(dilations=[1, 1], group=1)
    nodes = [node("Conv", ["input", "w0"], ["c0"], kernel_shape=[1, 1], pads=[0, 0, 0, 0],
                  strides=[1, 1], **conv),
             node("Relu", ["c0"], ["r0"]),
             node("Conv", ["r0", "w1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                  strides=[2, 2], **conv),
             node("Relu", ["c1"], ["r1"]),
             node("Conv", ["r1", "w2"], ["c2"], kernel_shape=[3, 2], pads=[0, 1, 1, 2],
                  strides=[2, 3], **conv),
             node("Conv", ["c2", "w3"], ["c3"], kernel_shape=[1, 1], pads=[0, 0, 0, 0],
                  strides=[2, 2], **conv),
             node("Flatten", ["c3"], ["flat"], axis=1)]
    hn, ht = head("flat", 7 * 2 * 2, 4, rng)
    tensors = [(f"w{i}", w, "param") for i, w in enumerate(ws)] + ht

    def on_classes(res, want):
        keys = [str(d[0]) for d in res["plan"].fwd_train + res["plan"].bwd]
        assert sum("conv_gemm" in k and "MODE=3" in k for k in keys) == 3, keys
        assert not any("backward_input" in k for k in keys), keys
    return case(f"tiled/{name}", nodes + hn, tensors, x, labels, tag="Conv (stride classes)",
                acts=("r0", "r1", "c2", "c3"), dacts=("c0", "c1", "c2", "c3"),
                checks=(on_classes,), patch={"CONV_GEMM_STRIDED_MIN": 1})


def _conv_split_fused(name, batch):
    """Split-K products whose epilogue runs in reduce_splits (conv_gemm._run): a forward with
    bias and fused ReLU, a stride-1 input gradient masked by the ReLU before it, and a stride-2
    input gradient by stride classes (MODE 3, every class in several z slices) masked
    likewise; sums of 160-216 terms, few tiles (CONV_GEMM_MIN 1)."""
    rng = rng_for("tiled_split_fused", name)
    shapes = [(20, 6, 1, 1), (40, 20, 3, 3), (24, 40, 3, 3)]
    ws = [f32(rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))) for s in shapes]
    bs = [f32(rng.standard_normal(s[0]) * 0.1) for s in shapes]
    x = f32(rng.standard_normal((batch, 6, 9, 9)))
    labels = rng.integers(0, 4, batch)
    conv = dict(dilations=[1, 1], group=1)
    nodes = [node("Conv", ["input", "w0", "b0"], ["c0"], kernel_shape=[1, 1],
                  pads=[0, 0, 0, 0], strides=[1, 1], **conv),
             node("Relu", ["c0"], ["r0"]),
             node("Conv", ["r0", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                  strides=[2, 2], **conv),
             node("Relu", ["c1"], ["r1"]),
             node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                  strides=[1, 1], **conv),
             node("Flatten", ["c2"], ["flat"], axis=1)]
    hn, ht = head("flat", 24 * 5 * 5, 4, rng)
    tensors = [(f"{p}{i}", t, "param") for i, (w, bb) in enumerate(zip(ws, bs))
               for p, t in (("w", w), ("b", bb))] + ht

    def split_with_epilogue(res, want):
        keys = [(str(d[0]), d[-1]) for d in res["plan"].fwd_train + res["plan"].bwd]
        gemms = [(k, g) for k, g in keys if "conv_gemm" in k]
        assert any("MODE=3" in k and g[2] > 4 for k, g in gemms), gemms
        assert any("MODE=1" in k and g[2] > 1 for k, g in gemms), gemms
        assert any("MODE=0" in k and g[2] > 1 for k, g in gemms), gemms
    return case(f"tiled/{name}", nodes + hn, tensors, x, labels, tag="Conv (split-K epilogue)",
                acts=("r0", "r1", "c2"), dacts=("c0", "c1", "c2"),
                checks=(split_with_epilogue,),
                patch={"CONV_GEMM_MIN": 1, "CONV_GEMM_STRIDED_MIN": 1})


def _conv_mid(name, batch):
    """Conv 5 -> 70 (3x3, pad 1) -> Relu -> Conv 70 -> 64 (stride 2) -> Relu -> Conv 64 -> 100
    -> head on 16 x 16 planes (CONV_GEMM_MIN 1): the 64 x 128 tiles (TM 8) of layers with 64 to
    127 channels in every mode (forward, stride-1 input gradient with the ReLU's mask, weight
    gradient, stride classes), rows at a tile's edge (70, 100), sums not a multiple of BK
    (630), split-K parts, and the second row of B loads each thread makes on these tiles."""
    rng = rng_for("tiled_mid", name)
    shapes = [(70, 5, 3, 3), (64, 70, 3, 3), (100, 64, 3, 3)]
    ws = [f32(rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))) for s in shapes]
    bs = [f32(rng.standard_normal(s[0]) * 0.1) for s in shapes]
    x = f32(rng.standard_normal((batch, 5, 16, 16)))
    labels = rng.integers(0, 4, batch)
    conv = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], dilations=[1, 1], group=1)
    nodes = [node("Conv", ["input", "w0", "b0"], ["c0"], strides=[1, 1], **conv),
             node("Relu", ["c0"], ["r0"]),
             node("Conv", ["r0", "w1", "b1"], ["c1"], strides=[2, 2], **conv),
             node("Relu", ["c1"], ["r1"]),
             node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[1, 1], **conv),
             node("Flatten", ["c2"], ["flat"], axis=1)]
    hn, ht = head("flat", 100 * 8 * 8, 4, rng)
    tensors = [(f"{p}{i}", t, "param") for i, (w, bb) in enumerate(zip(ws, bs))
               for p, t in (("w", w), ("b", bb))] + ht

    def on_mid_tiles(res, want):
        keys = [str(d[0]) for d in res["plan"].fwd_train + res["plan"].bwd]
        mid = [k for k in keys if "conv_gemm" in k and "TM=8" in k and "TW=16" in k]
        for mode in range(4):
            assert any(f"MODE={mode}" in k for k in mid), (mode, keys)
    return case(f"tiled/{name}", nodes + hn, tensors, x, labels, tag="Conv (64 x 128 tiles)",
                acts=("r0", "r1", "c2"), dacts=("c0", "c1", "c2"), checks=(on_mid_tiles,),
                patch={"CONV_GEMM_MIN": 1, "CONV_GEMM_STRIDED_MIN": 1})


def _mlp_masked(name, batch):
    """Gemm 64 -> 512 -> Relu -> Gemm 512 -> 512 -> Relu -> head: each Relu's gradient masked
    in the next Gemm's dA (TAKES_RELU_GRAD): the second Gemm's dA [512, 512] (k 512) on the
    tiled kernel split over k (the mask in reduce_splits), the head's (k 4) on the untiled one;
    no ReLU backward dispatch."""
    rng = rng_for("tiled_mlp_masked", name)
    w1 = f32(rng.standard_normal((512, 64)) / 8)
    w2 = f32(rng.standard_normal((512, 512)) / np.sqrt(512))
    b1, b2 = f32(rng.standard_normal(512) * 0.1), f32(rng.standard_normal(512) * 0.1)
    x = f32(rng.standard_normal((batch, 64)))
    labels = rng.integers(0, 4, batch)
    nodes = [node("Gemm", ["input", "w1", "b1"], ["h1"], transB=1), node("Relu", ["h1"], ["r1"]),
             node("Gemm", ["r1", "w2", "b2"], ["h2"], transB=1), node("Relu", ["h2"], ["r2"])]
    hn, ht = head("r2", 512, 4, rng)
    tensors = [("w1", w1, "param"), ("b1", b1, "param"), ("w2", w2, "param"),
               ("b2", b2, "param")] + ht

    def masked(res, want):
        plan = res["plan"]
        assert sorted(plan.relu_grad_fused.values()) == ["/Relu_r1", "/Relu_r2"]
        keys = [(str(d[0]), d[-1]) for d in plan.bwd]
        assert not any("relu" in k for k, _ in keys), keys
        assert any("matmul_tiled" in k and g[2] > 1 for k, g in keys), keys
    return case(f"tiled/{name}", nodes + hn, tensors, x, labels, tag="Gemm (ReLU grad fused)",
                acts=("r1", "r2"), dacts=("h1", "h2"), checks=(masked,))


def _depthwise(name, batch, hw, window, stride, want_entry, want_parts):
    """1x1 Conv -> depthwise Conv (4 channels, ``window`` x ``window``, pads window // 2,
    ``stride``) -> head: the weight gradient's GPU kernel (conv_depthwise ``backward_weight_wg``,
    ``want_parts`` parts of the batch added by reduce_splits), or for windows beyond its
    MAX_WINDOW (7 x 8) the thread-per-tap kernel."""
    c, pad = 4, window // 2
    rng = rng_for("tiled_depthwise", name)
    pre_w = f32(rng.standard_normal((c, c, 1, 1)) / np.sqrt(c))
    cw = f32(rng.standard_normal((c, 1, window, window)) / window)
    cb = f32(rng.standard_normal(c) * 0.1)
    x = f32(rng.standard_normal((batch, c, hw, hw)))
    labels = rng.integers(0, 4, batch)
    nodes = [node("Conv", ["input", "pre.w"], ["pre_out"], kernel_shape=[1, 1],
                  pads=[0, 0, 0, 0], strides=[1, 1], dilations=[1, 1], group=1),
             node("Conv", ["pre_out", "cw", "cb"], ["conv_out"], kernel_shape=[window] * 2,
                  pads=[pad] * 4, strides=[stride] * 2, dilations=[1, 1], group=c),
             node("Flatten", ["conv_out"], ["flat"], axis=1)]
    o = (hw - 1) // stride + 1
    hn, ht = head("flat", c * o * o, 4, rng)
    tensors = [("pre.w", pre_w, "param"), ("cw", cw, "param"), ("cb", cb, "param")] + ht

    def on_kernel(res, want):
        got = [(str(d[0]), d[-1]) for d in res["plan"].bwd if "conv_depthwise:backward_w"
               in str(d[0])]
        assert len(got) == 1 and f":{want_entry}:" in got[0][0], got
        if want_entry == "backward_weight_wg":
            assert got[0][1][:2] == (c, want_parts), got
    return case(f"tiled/{name}", nodes + hn, tensors, x, labels, tag="Conv (depthwise)",
                acts=("conv_out",), dacts=("pre_out", "conv_out"), checks=(on_kernel,))


def _seednet():
    """models/seednet.onnx at batch 6, Dropout ratio 0; fc2.bias feeds a train-mode BatchNorm
    (its gradient is zero in exact arithmetic)."""
    from webgpu_trainer import onnx_io
    from cases import Case
    path = pathlib.Path(__file__).resolve().parents[1] / "models" / "seednet.onnx"
    graph, blob = onnx_io.load_bundle(path)
    graph = copy.deepcopy(graph)
    graph["constants"]["__ratio0"] = {"dtype": "float32", "shape": [], "values": [0.0]}
    for n in graph["nodes"]:
        if n["op_type"] == "Dropout":
            n["inputs"] = [n["inputs"][0], "__ratio0"] + n["inputs"][2:]
            n["attrs"]["ratio"] = 0.0
    rng = rng_for("tiled_seednet")
    return Case("tiled/seednet", graph, blob, f32(rng.standard_normal((6, 1, 28, 28))),
                rng.integers(0, 10, 6), tag="SeedNet (GPU path)", zero_grads=("fc2.bias",))


# several pixel chunks and dy tiles with a tail (b40), tap blocks that idle and a 1-pixel
# plane (b64); one-part and many-part BatchNorm sums, short and long parts
OWN_CASES = [_conv_relu("conv3_like_b40", 16, 24, 12, 40),
             _conv_relu("tiny_plane_b64", 8, 16, 3, 64),
             _conv_bn("bn_b3_chunk64", 3, 64), _conv_bn("bn_b300_chunk64", 300, 64),
             _conv_bn("bn_b300_one_part", 300, None),
             _relu_fused("relu_fused_s1", 1), _relu_fused("relu_fused_s2", 2),
             _conv_wide("conv_gemm_b2", 2), _conv_strided("strided_b3", 3),
             _conv_split_fused("split_fused_b2", 2),
             _conv_mid("conv_gemm_mid_b2", 2),
             _mlp_masked("mlp_masked_b512", 512),
             _depthwise("depthwise_3x3_parts", 6, 24, 3, 1, "backward_weight_wg", 3),
             _depthwise("depthwise_5x5_s2", 9, 25, 5, 2, "backward_weight_wg", 1),
             _depthwise("depthwise_7x7", 2, 9, 7, 1, "backward_weight_wg", 1),
             _depthwise("depthwise_9x9_thread_per_tap", 3, 11, 9, 1, "backward_weight", 0),
             # a batched activation times a weight large enough for the Gemm's tiles (ops/
             # matmul.py hands the plain product to gemm.matmul; dA reads W^T)
             matmul_case("tiled_3d_x_2d", ("act", [16, 64, 256]), ("param", [256, 256]), 16),
             # attention's per-head products at 65 tokens: the scores q k^T (289 blocks, the
             # whole of k) and their K-65 gradients (68 blocks, few batch indices: k in chunks
             # of 49 and 16, matmul_wg_chunks); then k 200 in chunks of 63, 63, 63 and 11
             matmul_case("heads_qk_65", ("act", [2, 3, 65, 16]), ("act", [2, 3, 16, 65]), 2),
             matmul_case("long_k_chunks", ("act", [2, 3, 40, 200]), ("act", [2, 3, 200, 24]),
                         2)]


@pytest.mark.parametrize("case", OWN_CASES, ids=[c.name for c in OWN_CASES])
def test_gpu_path_case(device, case):
    with builder_patch(GPU):
        check_case(device, case)


def test_bias_gradients_by_column_parts_in_a_step(device):
    """A whole training step (the 512-row MLP) with its bias gradients summed by column_parts
    (Builder.COLUMN_SUMS 64: 512 rows in 32 parts) and channel_sum, against float64 numpy."""
    with builder_patch({**GPU, "COLUMN_SUMS": 64}):
        check_case(device, next(c for c in OWN_CASES if c.name == "mlp_masked_b512"))


@pytest.mark.parametrize("name", ["relu_fused_s1", "relu_fused_s2"])
def test_relu_gradient_fused_cpu_path(device, name):
    """The fused ReLU gradient on the CPU adapters' kernels (backward_input, forward on dy)."""
    with builder_patch({"TILED": False}):
        check_case(device, next(c for c in OWN_CASES if c.name == name))


# Padded layers (asymmetric pads, stride 2, dilation, groups, a 1x3 window): the GPU weight
# gradient with the per-tap bounds tests that its zero-padded copy of the input replaces
# (Builder.PADDED_WEIGHT_GRAD, on by default: every other GPU-path case runs the copy).
PADDED = ("conv/5x5_s2_pad2", "conv/3x3_asym_pads", "conv/3x3_dil2", "conv/group3_k12",
          "conv/k17_rect_mixed", "conv/width33_k9")
PADDED_CASES = [c for c in family("conv").CASES if c.id in PADDED]


@pytest.mark.parametrize("case", PADDED_CASES, ids=[c.id for c in PADDED_CASES])
def test_conv_weight_grad_bounds_tests(device, case):
    with builder_patch({**GPU, "PADDED_WEIGHT_GRAD": False}):
        check_case(device, case)


def test_seednet_step_gpu_paths(device):
    with builder_patch(GPU):
        check_case(device, _seednet())


# (m, n, k): 128 x 128 tiles where m, n >= 128 and m*n >= 2^20, or >= 2^18 with k >= 256
# (edges, split-K; tiles and k steps wholly inside, the unchecked loads: (1024, 1152, 24)),
# else the untiled kernel (thin outputs, short k: (600, 520, 70))
GEMM_CASES = [(1030, 1025, 37), (1024, 1100, 300), (200, 5300, 50), (1000, 32, 600),
              (32, 300, 1000), (130, 129, 77), (600, 520, 70), (600, 520, 300),
              (1024, 1152, 24), (4100, 64, 130), (4097, 40, 9), (64, 4100, 33),
              (50, 100, 4099), (64, 64, 4104)]


@pytest.mark.parametrize("m,n,k", GEMM_CASES)
@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm_kernel_tiled(device, m, n, k, ta, tb):
    """ops/gemm.matmul alone (alpha, a row bias) against float64, every transpose; the short-k
    rule off (GEMM_SPLIT_MIN_K), so that the short sums above stay on the tiles they cover."""
    with builder_patch({"GEMM_SPLIT_MIN_K": None}):
        _check_gemm(device, m, n, k, ta, tb)


# Which products tile (ops/gemm.tile_shape): a wide output too few tiles for the GPU, which
# split-K would follow, stays untiled when k is short (GEMM_SPLIT_MIN_K: the MLP's weight
# gradient at batch 64); with enough tiles, or k long enough, or the rule off, it tiles.
@pytest.mark.parametrize("m,n,k,floor,tiled", [
    (1024, 1024, 64, 128, False), (1024, 1024, 127, 128, False), (1024, 1024, 128, 128, True),
    (1024, 1024, 64, None, True), (4096, 4096, 64, 128, True), (1000, 1024, 1024, 128, True),
    (64, 1024, 1024, 128, False)])
def test_gemm_tiles_short_k(m, n, k, floor, tiled):
    import types
    from webgpu_trainer.engine.ops import gemm
    b = types.SimpleNamespace(tiled=True, GEMM_TILE_TARGET=256, GEMM_SPLIT_MIN_K=floor,
                              GEMM_NARROW=True)
    assert (gemm.tile_shape(b, m, n, k) == (16, 16)) is tiled


# Every workgroup shape of matmul_tiled (threads along m x along n) on outputs with partial
# tiles at both edges, k not a multiple of the step (8), unsplit (k 37) and split (k 900).
@pytest.mark.parametrize("shape", [(16, 16), (16, 8), (8, 16), (8, 8)])
@pytest.mark.parametrize("m,n,k", [(70, 45, 37), (300, 130, 900)])
@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 1), (0, 1)])
def test_gemm_tile_shapes(device, monkeypatch, shape, m, n, k, ta, tb):
    from webgpu_trainer.engine.ops import gemm
    monkeypatch.setattr(gemm, "tile_shape", lambda *_: shape)
    _check_gemm(device, m, n, k, ta, tb)


# Aligned operands load as vec4 (gemm._vec_bits): the same values summed in the same order as
# four scalar loads, so the result is bit-identical with Builder.GEMM_VEC4 off; each operand's
# layout (k contiguous or rows/columns contiguous) takes its vec4 path here.
@pytest.mark.parametrize("m,n,k", [(1024, 1152, 24), (300, 260, 900)])
@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 1), (0, 1), (1, 0)])
def test_gemm_vec4_loads_bit_identical(device, monkeypatch, m, n, k, ta, tb):
    from webgpu_trainer.engine.ops import gemm
    monkeypatch.setattr(gemm, "tile_shape", lambda *_: (16, 16))
    on = _check_gemm(device, m, n, k, ta, tb, want_vec=3)
    with builder_patch({"GEMM_VEC4": False}):
        off = _check_gemm(device, m, n, k, ta, tb, want_vec=0)
    assert np.array_equal(on, off)


# Tiles at the edge of out load with rows / columns past it clamped to the last
# (Builder.GEMM_EDGE_CLAMP, gemm.wgsl EDGE_CLAMP): only outputs past the edge, never stored,
# see other values, so the result is bit-identical with every edge load tested instead; edges
# in m and n, vec4 and scalar loads, each layout, k ragged (37) and split (900).
@pytest.mark.parametrize("m,n,k", [(300, 260, 900), (70, 45, 37), (1000, 1030, 64)])
@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 1), (0, 1), (1, 0)])
def test_gemm_edge_tiles_clamped_bit_identical(device, monkeypatch, m, n, k, ta, tb):
    from webgpu_trainer.engine.ops import gemm
    monkeypatch.setattr(gemm, "tile_shape", lambda *_: (16, 16))
    on = _check_gemm(device, m, n, k, ta, tb)
    with builder_patch({"GEMM_EDGE_CLAMP": False}):
        off = _check_gemm(device, m, n, k, ta, tb)
    assert np.array_equal(on, off)


# conv_gemm's weight gradient (mode 2) alone: the sum over (image, pixel) carried from step to
# step (pix_add: planes of 1 and 4 pixels wrap several times a step of 8, planes of 49 and 81
# cut the four-k loads of dy), every tile shape (64 x 128 loads two B rows a thread), split-K;
# against float64 numpy.
@pytest.mark.parametrize("n,c,h,k,kh,s,pad,tile", [
    (5, 3, 3, 64, 3, 1, 0, (8, 16)), (3, 4, 4, 64, 3, 1, 0, (8, 16)),
    (2, 3, 9, 64, 3, 1, 1, (8, 16)), (4, 5, 7, 130, 3, 2, 1, (16, 16)),
    (2, 3, 7, 20, 3, 1, 1, (8, 8)), (40, 2, 5, 64, 3, 1, 1, (8, 16))])
def test_conv_gemm_weight_grad(device, n, c, h, k, kh, s, pad, tile):
    import types
    from webgpu_trainer.engine.ops import conv_gemm
    rng = rng_for("conv_gemm_wgrad", n, c, h, k, kh, s, pad)
    oh = (h + 2 * pad - kh) // s + 1
    x = f32(rng.standard_normal((n, c, h, h)))
    dy = f32(rng.standard_normal((n, k, oh, oh)))
    b = Builder(types.SimpleNamespace(dev=device, P=None, G=None, step=None))
    b.TILED = True
    bx, bdy = device.buffer(x.nbytes), device.buffer(dy.nbytes)
    device.write(bx, x.tobytes())
    device.write(bdy, dy.tobytes())
    dw = device.buffer(4 * k * c * kh * kh)
    win = {"KH": kh, "KW": kh, "sh": s, "sw": s, "ph": pad, "pw": pad, "dh": 1, "dw": 1}

    async def go():
        await conv_gemm.weight_grad(b, (n, c, h, h, k, oh, oh, 1), win, tile, bx, bdy, dw)
        device.submit([device.program(b.current)])
        return np.frombuffer(await device.read(dw), np.float32)[:k * c * kh * kh]
    got = run(go()).reshape(k, c, kh, kh)
    assert rel_err(got, _weight_grad_ref(x, dy, kh, s, pad)) <= FWD_RTOL


def _weight_grad_ref(x, dy, kh, s, pad, grp=1):
    """float64 dw [K, C/grp, kh, kh] of a square convolution (stride s, padding pad, grp
    groups) for input x [N, C, H, H] and output gradient dy [N, K, OH, OH]."""
    k, oh, cg = dy.shape[1], dy.shape[2], x.shape[1] // grp
    kg = k // grp
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    want = np.zeros((k, cg, kh, kh))
    for i in range(kh):
        for j in range(kh):
            patch = xp[:, :, i:i + s * (oh - 1) + 1:s, j:j + s * (oh - 1) + 1:s]
            for gi in range(grp):
                want[gi * kg:(gi + 1) * kg, :, i, j] = np.einsum(
                    "nkpq,ncpq->kc", dy[:, gi * kg:(gi + 1) * kg], patch[:, gi * cg:(gi + 1) * cg])
    return want


# conv2d_wgrad.wgsl weight_grad alone (ops/conv.weight_grad on GPU adapters): output channels
# that fill a thread's 8 and that do not (20, 10, 12: the last block partly past the group's
# channels), groups (a group's channels end mid-block), padding (the zero-padded copy), a
# stride and a 1x1 window; pixels in several split chunks and tiles (T = 64 * WRB) with a
# partial last one, and in one chunk. Against float64 numpy.
@pytest.mark.parametrize("n,c,h,k,kh,s,pad,grp", [
    (3, 16, 12, 24, 3, 1, 0, 1), (2, 8, 13, 16, 3, 1, 1, 1), (2, 5, 9, 20, 3, 2, 1, 1),
    (3, 6, 10, 10, 1, 1, 0, 1), (2, 12, 9, 24, 3, 1, 1, 2), (40, 3, 6, 12, 3, 1, 0, 3),
    (1, 4, 4, 16, 3, 1, 0, 1)])
def test_conv_weight_grad_direct(device, n, c, h, k, kh, s, pad, grp):
    import types
    from webgpu_trainer.engine.ops import conv
    rng = rng_for("conv_wgrad_direct", n, c, h, k, kh, s, pad, grp)
    oh = (h + 2 * pad - kh) // s + 1
    x = f32(rng.standard_normal((n, c, h, h)))
    dy = f32(rng.standard_normal((n, k, oh, oh)))
    b = Builder(types.SimpleNamespace(dev=device, P=None, G=None, step=None))
    b.TILED = True
    b.CONV_GEMM_MIN = None
    bx, bdy = device.buffer(x.nbytes), device.buffer(dy.nbytes)
    device.write(bx, x.tobytes())
    device.write(bdy, dy.tobytes())
    cg = c // grp
    dw = device.buffer(4 * k * cg * kh * kh)
    win = {"KH": kh, "KW": kh, "sh": s, "sw": s, "ph": pad, "pw": pad, "dh": 1, "dw": 1}

    async def go():
        await conv.weight_grad(b, (n, c, h, h, k, oh, oh, grp), win, bx, bdy, dw)
        device.submit([device.program(b.current)])
        return np.frombuffer(await device.read(dw), np.float32)[:k * cg * kh * kh]
    got = run(go()).reshape(k, cg, kh, kh)
    assert rel_err(got, _weight_grad_ref(x, dy, kh, s, pad, grp)) <= FWD_RTOL


# The untiled kernel's vec4 loads (gemm.wgsl matmul_vec: GPU adapters, both operands aligned):
# operands stored with rows padded to a multiple of 4, so any m, n, k (edges, a k tail of
# scalars, split-K parts rounded to 4) takes it; every layout branch (ta, tb); float64 reference.
@pytest.mark.parametrize("m,n,k", [(37, 29, 13), (300, 36, 1001), (4097, 40, 9),
                                   (64, 64, 4104), (5, 3, 2)])
@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 1), (0, 1), (1, 0)])
def test_gemm_untiled_vec4_loads(device, monkeypatch, m, n, k, ta, tb):
    from webgpu_trainer.engine.ops import gemm
    monkeypatch.setattr(gemm, "tile_shape", lambda *_: None)
    monkeypatch.setattr(Builder, "GEMM_KPAR", None)  # small outputs: matmul_kpar otherwise
    rng = rng_for("gemm_vec", m, n, k, ta, tb)

    def padded(rows, cols):  # [rows, cols] inside a [rows, cols rounded up to 4, + 4] buffer
        full = f32(rng.standard_normal((rows, (cols + 3) // 4 * 4 + 4)))
        return full, full[:, :cols], (full.shape[1], 1)
    a_full, a, sa = padded(k, m) if ta else padded(m, k)
    b_full, bm, sb = padded(n, k) if tb else padded(k, n)
    sa = sa[::-1] if ta else sa
    sb = sb[::-1] if tb else sb
    bias = f32(rng.standard_normal(n))
    got, b = _gemm_on_gpu(device, a_full, sa, b_full, sb, m, n, k, 0.5, bias)
    assert b.current[0][0][2].split(":")[1] == "matmul_vec"  # (pipeline, layout, key)
    want = 0.5 * ((a.T if ta else a).astype(np.float64) @ (bm.T if tb else bm)) + bias
    assert rel_err(got, want) <= FWD_RTOL


# Small outputs over long sums (gemm.wgsl matmul_kpar, a classifier's head): KL lanes a 4x4
# block, partial blocks added in workgroup memory. Every layout (k contiguous in both, X W^T:
# lanes_nt; the others only over k <= GEMM_KPAR_STRIDED_K: lanes_other), edges (m,
# n not multiples of 4), a last workgroup with idle blocks, KL 8 to 64 (more outputs a
# workgroup than threads at KL 8), alpha and a row bias, against float64; one dispatch.
@pytest.mark.parametrize("m,n,k,lanes_nt,lanes_other", [
    (64, 10, 64, 16, 16), (1000, 10, 1024, 64, 64), (37, 29, 100, 16, 16), (5, 3, 33, 8, 8),
    (130, 7, 40, 8, 8), (64, 64, 4096, 64, 64), (64, 1024, 784, 64, 0), (9, 250, 16, 0, 0),
    (64, 64, 4104, 0, 64), (64, 64, 8200, 0, 0), (300, 260, 500, 0, 0), (64, 64, 200, 32, 32),
    (36, 128, 256, 64, 64)])
@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 1), (0, 1), (1, 0)])
def test_gemm_kpar(device, m, n, k, lanes_nt, lanes_other, ta, tb):
    from webgpu_trainer.engine.ops import gemm
    got, b, want, operands = _random_gemm(device, "gemm_kpar", m, n, k, ta, tb)
    keys = [d[0][2] for d in b.current]
    lanes = lanes_nt if (ta, tb) == (0, 1) else lanes_other
    assert gemm.kpar_lanes(b, m, n, k, (ta, tb) == (0, 1)) == lanes
    if lanes:  # k strided: the blocks as neighbouring threads (matmul_kpar_t), then vec4 loads
        # of op(A)'s rows (m contiguous) / op(B)'s columns (n contiguous): KVEC
        vec = int(ta == 1 and m % 4 == 0) | 2 * int(tb == 0 and n % 4 == 0)
        assert gemm._kpar_vec_bits(b, *operands, m, n, k) == vec
        entry = "matmul_kpar" if (ta, tb) == (0, 1) else "matmul_kpar_t"
        tail = f",KVEC={vec}" if vec and entry == "matmul_kpar_t" else ""
        assert keys == [f"gemm:{entry}:KL={lanes}{tail}"], keys
    else:
        assert not any("matmul_kpar" in key for key in keys), keys
    assert rel_err(got, want) <= FWD_RTOL


# Weight gradients over long strided sums (dY^T X over a batch of tokens) on matmul_kpar when
# the Builder lets them (GEMM_KPAR_STRIDED_K, up to GEMM_KPAR_STRIDED_LANES lanes): kpar_t,
# KL up to 256 (one block a workgroup, the sums through the whole tile), edges, against float64.
@pytest.mark.parametrize("m,n,k,most,lanes", [(64, 64, 16640, 256, 256), (60, 36, 1792, 128, 128),
                                              (37, 29, 5000, 64, 64), (8, 8, 100, 256, 16)])
@pytest.mark.parametrize("ta,tb", [(1, 0), (0, 0), (1, 1)])
def test_gemm_kpar_long_strided(device, monkeypatch, m, n, k, most, lanes, ta, tb):
    monkeypatch.setattr(Builder, "GEMM_KPAR_STRIDED_K", 1 << 20)
    monkeypatch.setattr(Builder, "GEMM_KPAR_STRIDED_LANES", most)
    got, b, want, _ = _random_gemm(device, "gemm_kpar_long", m, n, k, ta, tb)
    keys = [d[0][2] for d in b.current]
    assert len(keys) == 1 and keys[0].startswith(f"gemm:matmul_kpar_t:KL={lanes}"), keys
    assert rel_err(got, want) <= FWD_RTOL


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("bsum_of", [0, 1, 2])
def test_gemm_kpar_t_vec4_needs_whole_blocks_bound(device, exact, bsum_of):
    """matmul_kpar_t's vec4 loads (KVEC) read a block's four rows / columns at one k as one
    vec4, past the edge when m or n is not a multiple of 4: dY^T [6, k] and X [k, 5] stored in
    rows of 8 floats whose padding is NaN. Bound with the padding (k * 8 floats) it takes KVEC
    3, and the NaN reach no stored value; bound to the last logical element it takes scalar
    loads (``_covers_blocks``). The product and BSUM's sums against float64."""
    m, n, k = 6, 5, 300
    rng = rng_for("gemm_kpar_t_extent", exact, bsum_of)
    a_full = np.full((k, 8), np.nan, np.float32)
    b_full = np.full((k, 8), np.nan, np.float32)
    a_full[:, :m] = rng.standard_normal((k, m))
    b_full[:, :n] = rng.standard_normal((k, n))
    a_flat = a_full.reshape(-1)[:(k - 1) * 8 + m] if exact else a_full.reshape(-1)
    b_flat = b_full.reshape(-1)[:(k - 1) * 8 + n] if exact else b_full.reshape(-1)
    res = _gemm_on_gpu(device, a_flat, (1, 8), b_flat, (8, 1), m, n, k, bsum_of=bsum_of)
    got, b = res[0], res[-1]
    key = b.current[0][0][2]
    assert key.split(":")[1] == "matmul_kpar_t", key
    assert ("KVEC" not in key) if exact else ("KVEC=3" in key), key
    op_a, op_b = a_full[:, :m].T.astype(np.float64), b_full[:, :n].astype(np.float64)
    assert rel_err(got, op_a @ op_b) <= FWD_RTOL
    if bsum_of:
        want = op_a.sum(axis=1) if bsum_of == 1 else op_b.sum(axis=0)
        assert rel_err(res[1], want) <= FWD_RTOL


# matmul_kpar's stores go through act(): the fused ReLU of the forward (relu), and the mask of
# a ReLU's gradient (mask_src <= 0 -> 0), against float64.
@pytest.mark.parametrize("fused", ["relu", "mask"])
def test_gemm_kpar_fused_relu_and_mask(device, fused):
    import types
    from webgpu_trainer.engine.ops import gemm
    m, n, k = 50, 10, 300
    rng = rng_for("gemm_kpar_fused", fused)
    a, bm = f32(rng.standard_normal((m, k))), f32(rng.standard_normal((n, k)))
    src = f32(rng.standard_normal((m, n)))
    b = Builder(types.SimpleNamespace(dev=device, P=None, G=None, step=None))
    b.TILED = True
    bufs = []
    for arr in (a, bm, src):
        bufs.append(device.buffer(arr.nbytes))
        device.write(bufs[-1], arr.tobytes())
    out = device.buffer(4 * m * n)

    async def go():
        await gemm.matmul(b, bufs[0], (k, 1), bufs[1], (1, k), out, m, n, k,
                          relu=int(fused == "relu"),
                          mask_src=bufs[2] if fused == "mask" else None)
        device.submit([device.program(b.current)])
        return np.frombuffer(await device.read(out), np.float32)[:m * n].reshape(m, n)
    got = run(go())
    assert [d[0][2].split(":")[1] for d in b.current] == ["matmul_kpar"]
    want = a.astype(np.float64) @ bm.T.astype(np.float64)
    want = np.maximum(want, 0) if fused == "relu" else np.where(src <= 0, 0, want)
    assert np.all(got[want == 0] == 0)
    assert rel_err(got, want) <= FWD_RTOL


# Which products take matmul_kpar (ops/gemm.kpar_lanes): GPU adapters, at most GEMM_KPAR
# outputs (none empty), 32 <= k <= 4096, k contiguous in both operands or at most
# GEMM_KPAR_STRIDED_K; lanes leave each at least 4 of the k, 8 to 64.
@pytest.mark.parametrize("m,n,k,contiguous,tiled,limit,want", [
    (64, 10, 64, True, True, 16384, 16), (64, 10, 31, True, True, 16384, 0),
    (64, 10, 32, True, True, 16384, 8), (64, 10, 4096, True, True, 16384, 64),
    (64, 10, 4097, True, True, 16384, 0), (128, 128, 512, True, True, 16384, 64),
    (128, 129, 512, True, True, 16384, 0), (64, 10, 64, True, False, 16384, 0),
    (64, 10, 64, True, True, None, 0), (64, 64, 256, False, True, 16384, 64),
    (64, 64, 257, False, True, 16384, 0), (10, 1024, 1000, False, True, 16384, 0),
    (0, 10, 64, True, True, 16384, 0)])
def test_gemm_kpar_rule(m, n, k, contiguous, tiled, limit, want):
    import types
    from webgpu_trainer.engine.ops import gemm
    b = types.SimpleNamespace(tiled=tiled, GEMM_KPAR=limit, GEMM_KPAR_STRIDED_K=256)
    assert gemm.kpar_lanes(b, m, n, k, contiguous) == want


@pytest.mark.parametrize("m,n,k,contiguous,want", [
    (64, 256, 1792, False, 64), (64, 257, 1792, False, 0), (64, 1024, 1024, True, 64),
    (64, 64, 2048, False, 64), (64, 64, 8192, False, 64), (64, 64, 8193, False, 0)])
def test_gemm_kpar_strided_bounds(m, n, k, contiguous, want):
    """k strided: at most GEMM_KPAR_STRIDED_OUT outputs (the MLP's [64, 1024] input gradient
    stays on split-K) over at most GEMM_KPAR_STRIDED_K (the Builder's defaults)."""
    from webgpu_trainer.engine.ops import gemm
    b = Builder.__new__(Builder)
    b.TILED = True
    assert gemm.kpar_lanes(b, m, n, k, contiguous) == want


def test_gemm_untiled_vec4_only_when_both_align(device, monkeypatch):
    """An operand whose rows are not a multiple of 4 floats, or the flag off: matmul."""
    import types
    from webgpu_trainer.engine.ops import gemm
    monkeypatch.setattr(gemm, "tile_shape", lambda *_: None)
    entries = []
    for sa, flag in (((8, 1), True), ((7, 1), True), ((8, 1), False)):
        b = Builder(types.SimpleNamespace(dev=device, P=None, G=None, step=None))
        b.TILED = True
        b.GEMM_VEC_UNTILED = flag
        a, bm, out = device.buffer(4 * 64), device.buffer(4 * 64), device.buffer(4 * 64)
        run(gemm.matmul(b, a, sa, bm, (8, 1), out, 4, 8, 4))
        entries.append(b.current[0][0][2].split(":")[1])
    assert entries == ["matmul_vec", "matmul", "matmul"]


@pytest.mark.parametrize("exact", [True, False])
def test_gemm_untiled_vec4_needs_whole_blocks_bound(device, monkeypatch, exact):
    """B [k 8, n 3] with rows of 8 floats: matmul_vec reads the last row's columns 0-3 as one
    vec4, so a binding that ends at the last logical element (59 floats) keeps matmul; with
    the row's padding bound (64 floats) it takes matmul_vec. Both against float64."""
    from webgpu_trainer.engine.ops import gemm
    monkeypatch.setattr(gemm, "tile_shape", lambda *_: None)
    m, n, k = 6, 3, 8
    rng = rng_for("gemm_vec_extent", exact)
    a = f32(rng.standard_normal((m, k)))
    b_full = f32(rng.standard_normal((k, 8)))
    floats = (k - 1) * 8 + n if exact else k * 8
    got, b = _gemm_on_gpu(device, a, (k, 1), b_full.reshape(-1)[:floats], (8, 1), m, n, k)
    assert b.current[0][0][2].split(":")[1] == ("matmul" if exact else "matmul_vec")
    want = a.astype(np.float64) @ b_full[:, :n]
    assert rel_err(got, want) <= FWD_RTOL


# Bias gradients over many rows (gemm.channel_sum, inner 1) on GPU adapters: column_parts sums
# parts of the rows (a last part shorter, parts capped by rows / 16 or by the thread target),
# channel_sum folds them; against float64 numpy. Planes (inner > 1) keep channel_sum alone.
@pytest.mark.parametrize("outer,channels,inner,threads,want_parts", [
    (4999, 7, 1, 1 << 18, 312), (6000, 192, 1, 1 << 18, 375), (6000, 33, 1, 1024, 32),
    (5000, 3, 8, 1 << 18, 0)])
def test_column_parts_bias_gradient(device, outer, channels, inner, threads, want_parts):
    import types
    from webgpu_trainer.engine.ops import gemm
    rng = rng_for("column_parts", outer, channels, inner)
    x = f32(rng.standard_normal((outer, channels, inner)) + 0.5)
    b = Builder(types.SimpleNamespace(dev=device, P=None, G=None, step=None))
    b.TILED = True
    b.COLUMN_SUM_THREADS = threads
    tail = f32(np.full(64 * channels * inner, 1e6))  # past the rows (a pooled buffer's rest)
    xb, out = device.buffer(x.nbytes + tail.nbytes), device.buffer(4 * channels)
    device.write(xb, x.tobytes() + tail.tobytes())

    async def go():
        await gemm.channel_sum(b, xb, out, outer, channels, inner)
        device.submit([device.program(b.current)])
        return np.frombuffer(await device.read(out), np.float32)[:channels]
    got = run(go())
    from webgpu_trainer.engine.backends.base import groups_1d
    groups = [d[2] for d in b.current if "column_parts" in d[0][2]]
    assert groups == ([groups_1d(want_parts * channels)] if want_parts else [])
    want = x.astype(np.float64).sum(axis=(0, 2))
    assert rel_err(got, want) <= FWD_RTOL


# Split-K sums of few outputs on GPU adapters (gemm.split_lanes: reduce_splits_lanes, LANES
# threads an output, from 32 parts) against float64 numpy: lanes with unequal part counts (splits
# not a multiple of 4 * LANES), a half-empty last workgroup, every bias mode, the fused ReLU and the
# ReLU-gradient mask; 1e6 garbage past the parts (a pooled buffer's rest) must not be read.
@pytest.mark.parametrize("count,splits,n,want_lanes", [
    (37, 33, 37, 16), (1000, 70, 100, 16), (4096, 256, 64, 16), (20000, 40, 100, 4),
    (40000, 40, 200, 2), (70000, 64, 100, 1), (5000, 31, 50, 1), (5001, 31, 41, 1)])
@pytest.mark.parametrize("bias_mode,relu,mask", [(0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 0, 0),
                                                 (4, 1, 1), (5, 0, 0)])
def test_reduce_splits_lanes(device, count, splits, n, want_lanes, bias_mode, relu, mask):
    import types
    from webgpu_trainer.engine.ops import gemm
    rng = rng_for("reduce_splits_lanes", count, splits, bias_mode)
    parts = f32(rng.standard_normal((splits, count)))
    channels, inner = 3, 7  # bias_mode 5: an NCHW output's channel of element e
    blen = {1: n, 2: count // n + 1, 3: count, 4: 1, 5: channels}.get(bias_mode, 1)
    bias, src = f32(rng.standard_normal(blen)), f32(rng.standard_normal(count))
    b = Builder(types.SimpleNamespace(dev=device, P=None, G=None, step=None))
    b.TILED = True
    assert gemm.split_lanes(b, count, splits) == want_lanes
    tail = f32(np.full(1024, 1e6))
    xb, out = device.buffer(parts.nbytes + tail.nbytes), device.buffer(4 * count)
    device.write(xb, parts.tobytes() + tail.tobytes())
    bb, sb = device.buffer(bias.nbytes), device.buffer(src.nbytes)
    device.write(bb, bias.tobytes())
    device.write(sb, src.tobytes())

    async def go():
        await gemm.reduce_splits(b, xb, out, splits, count, n=n,
                                 bias=bb if bias_mode else None, bias_mode=bias_mode, beta=0.5,
                                 relu=relu, mask_src=sb if mask else None, channels=channels,
                                 inner=inner)
        device.submit([device.program(b.current)])
        return np.frombuffer(await device.read(out), np.float32)[:count]
    got = run(go())
    entry = "reduce_splits_lanes" if want_lanes > 1 else "reduce_splits"
    assert [d[0][2].split(":")[1] for d in b.current] == [entry]
    e = np.arange(count)
    want = parts.astype(np.float64).sum(axis=0)
    if bias_mode:
        at = {1: e % n, 2: e // n, 3: e, 4: 0 * e, 5: (e // inner) % channels}[bias_mode]
        want = want + 0.5 * bias.astype(np.float64)[at]
    if relu:
        want = np.maximum(want, 0.0)
    if mask:
        want = np.where(src > 0, want, 0.0)
    assert rel_err(got, want) <= FWD_RTOL


# reduce_splits with part 0 in the output itself (part0: gemm.wgsl matmul_tiled's split-K) adds
# the same values in the same order as with every part in x: the same bits, lanes or not, with
# a bias, the fused ReLU and the ReLU-gradient mask.
@pytest.mark.parametrize("count,splits,n", [(37, 33, 37), (20000, 40, 100), (5000, 31, 50),
                                             (1000, 4, 100)])
@pytest.mark.parametrize("bias_mode,relu,mask", [(0, 0, 0), (1, 1, 0), (2, 0, 1)])
def test_reduce_splits_part0_same_bits(device, count, splits, n, bias_mode, relu, mask):
    import types
    from webgpu_trainer.engine.ops import gemm
    rng = rng_for("reduce_splits_part0", count, splits, bias_mode)
    parts = f32(rng.standard_normal((splits, count)))
    bias = f32(rng.standard_normal({1: n, 2: count // n + 1}.get(bias_mode, 1)))
    src = f32(rng.standard_normal(count))
    b = Builder(types.SimpleNamespace(dev=device, P=None, G=None, step=None))
    b.TILED = True
    bb, sb = device.buffer(bias.nbytes), device.buffer(src.nbytes)
    device.write(bb, bias.tobytes())
    device.write(sb, src.tobytes())
    got = {}
    for part0 in (0, 1):
        xb, out = device.buffer(parts.nbytes), device.buffer(4 * count)
        device.write(xb, parts[part0:].tobytes())
        device.write(out, parts[0].tobytes() if part0 else bytes(4 * count))

        async def go(xb, out, part0):
            b.current = []
            await gemm.reduce_splits(b, xb, out, splits, count, n=n,
                                     bias=bb if bias_mode else None, bias_mode=bias_mode,
                                     beta=0.5, relu=relu, mask_src=sb if mask else None,
                                     part0=part0)
            device.submit([device.program(b.current)])
            return np.frombuffer(await device.read(out), np.float32)[:count]
        got[part0] = run(go(xb, out, part0))
    assert np.array_equal(got[0], got[1])
    want = parts.astype(np.float64).sum(axis=0)
    if bias_mode:
        want = want + 0.5 * bias.astype(np.float64)[{1: np.arange(count) % n,
                                                     2: np.arange(count) // n}[bias_mode]]
    want = np.maximum(want, 0.0) if relu else want
    want = np.where(src > 0, want, 0.0) if mask else want
    assert rel_err(got[1], want) <= FWD_RTOL


# An edge tile's vec4 loads across rows (op(A) with sam 1) or columns (op(B) with sbn 1) when
# the row stride is a multiple of 4 but M (N) is not, the binding ending at the last element:
# the group of four holding the last row runs past the binding, so those rows load one by one
# (clamped) and the last row keeps its own value; against float64. (A load past a binding is
# the implementation's choice in WGSL: lavapipe keeps the in-bounds components of such a vec4,
# so a whole-group load passed here too; an index clamp would give the last row another's. A
# review imitated that clamp in the shader (a4 / b4 indices min'd with arrayLength - 1): with
# either guard removed, a case whose last k step is whole, (1001, 300, 64), (300, 1029, 64) or
# (133, 1001, 896), then fails.)
@pytest.mark.parametrize("m,n,k", [(1001, 300, 64), (300, 1029, 37), (133, 1001, 900),
                                   (300, 1029, 64), (133, 1001, 896)])
def test_gemm_edge_tiles_vec4_past_the_binding(device, monkeypatch, m, n, k):
    from webgpu_trainer.engine.ops import gemm
    monkeypatch.setattr(gemm, "tile_shape", lambda *_: (16, 16))
    rng = rng_for("gemm_edge_binding", m, n, k)
    sak, sbk = (m + 3) // 4 * 4, (n + 3) // 4 * 4
    a_full = f32(rng.standard_normal((k, sak)))  # op(A)[i, kk] at kk * sak + i (sam 1)
    b_full = f32(rng.standard_normal((k, sbk)))  # op(B)[kk, j] at kk * sbk + j (sbn 1)
    a_flat = a_full.reshape(-1)[:(k - 1) * sak + m]  # the binding ends at the last element
    b_flat = b_full.reshape(-1)[:(k - 1) * sbk + n]
    got, b = _gemm_on_gpu(device, a_flat, (1, sak), b_flat, (sbk, 1), m, n, k)
    assert gemm._vec_bits(b, a_flat, (1, sak), b_flat, (sbk, 1)) == 3
    want = a_full[:, :m].T.astype(np.float64) @ b_full[:, :n].astype(np.float64)
    assert rel_err(got, want) <= FWD_RTOL
    assert np.abs(got[-1] - want[-1]).max() <= 1e-4 * np.abs(want).max()
    assert np.abs(got[:, -1] - want[:, -1]).max() <= 1e-4 * np.abs(want).max()


# reduce_splits4 (four outputs a thread from vec4 loads: GPU adapters, count a multiple of 4,
# no tail) adds each output's parts in reduce_splits' order: the same bits as Builder.REDUCE_VEC4
# off, for 1 to 9 parts (none, some and all in the four running sums), part 0 in x or in out,
# every bias mode, the fused ReLU, the ReLU-gradient mask and the Gelu slope; against float64.
@pytest.mark.parametrize("count,splits,n", [(4, 1, 4), (1000, 4, 100), (4096, 7, 64),
                                             (20000, 9, 100)])
@pytest.mark.parametrize("bias_mode,relu,mask,gelu,part0", [
    (0, 0, 0, 0, 0), (1, 1, 0, 0, 1), (2, 0, 1, 0, 0), (3, 0, 1, 1, 1), (4, 1, 0, 0, 0),
    (5, 0, 0, 0, 1)])
def test_reduce_splits4_same_bits(device, count, splits, n, bias_mode, relu, mask, gelu, part0):
    import types
    from webgpu_trainer.engine.ops import gemm
    rng = rng_for("reduce_splits4", count, splits, bias_mode)
    parts = f32(rng.standard_normal((splits, count)))
    channels, inner = 3, 7  # bias_mode 5: an NCHW output's channel of element e
    blen = {1: n, 2: count // n + 1, 3: count, 4: 1, 5: channels}.get(bias_mode, 1)
    bias, src = f32(rng.standard_normal(blen)), f32(rng.standard_normal(count))
    bb, sb = device.buffer(bias.nbytes), device.buffer(src.nbytes)
    device.write(bb, bias.tobytes())
    device.write(sb, src.tobytes())
    got = {}
    for vec in (True, False):
        b = Builder(types.SimpleNamespace(dev=device, P=None, G=None, step=None))
        b.TILED = True
        b.REDUCE_VEC4 = vec
        b.SPLIT_THREADS = 1  # reduce_splits4 from 4 outputs (else from 4 * 65536)
        rest = f32(np.full(1024, 1e6))  # past the parts (a pooled buffer's rest)
        xb, out = device.buffer(parts.nbytes + rest.nbytes), device.buffer(4 * count)
        device.write(xb, parts[part0:].tobytes() + rest.tobytes())
        device.write(out, parts[0].tobytes() if part0 else bytes(4 * count))

        async def go(b, xb, out):
            await gemm.reduce_splits(b, xb, out, splits, count, n=n,
                                     bias=bb if bias_mode else None, bias_mode=bias_mode,
                                     beta=0.5, relu=relu, mask_src=sb if mask else None,
                                     channels=channels, inner=inner, part0=part0,
                                     gelu_grad=bool(gelu))
            device.submit([device.program(b.current)])
            return np.frombuffer(await device.read(out), np.float32)[:count]
        got[vec] = run(go(b, xb, out))
        entry = "reduce_splits4" if vec else "reduce_splits"
        assert [d[0][2].split(":")[1] for d in b.current] == [entry]
    assert np.array_equal(got[True], got[False])
    e = np.arange(count)
    want = parts.astype(np.float64).sum(axis=0)
    if bias_mode:
        at = {1: e % n, 2: e // n, 3: e, 4: 0 * e, 5: (e // inner) % channels}[bias_mode]
        want = want + 0.5 * bias.astype(np.float64)[at]
    want = np.maximum(want, 0.0) if relu else want
    if mask:
        want = want * src if gelu else np.where(src > 0, want, 0.0)
    assert rel_err(got[True], want) <= FWD_RTOL


# Which split-K sum takes vec4 loads (ops/gemm.reduce_splits): GPU adapters, at least
# 4 * SPLIT_THREADS outputs (a quarter of the threads of reduce_splits: fewer outputs lost 2-5% on
# the batch-64 steps), a multiple of 4, no tail; the sum itself checked against float64.
@pytest.mark.parametrize("count,tail,tiled,want", [
    (1 << 18, 0, True, "reduce_splits4"), ((1 << 18) - 4, 0, True, "reduce_splits"),
    ((1 << 18) + 2, 0, True, "reduce_splits"), (1 << 18, 8, True, "reduce_splits"),
    (1 << 18, 0, False, "reduce_splits")])
def test_reduce_splits4_rule(device, count, tail, tiled, want):
    import types
    from webgpu_trainer.engine.ops import gemm
    splits = 3
    parts = f32(rng_for("reduce_splits4_rule", count).standard_normal(splits * (count + tail)))
    b = Builder(types.SimpleNamespace(dev=device, P=None, G=None, step=None))
    b.TILED = tiled
    xb, out, out2 = device.buffer(parts.nbytes), device.buffer(4 * count), device.buffer(64)
    device.write(xb, parts.tobytes())

    async def go():
        await gemm.reduce_splits(b, xb, out, splits, count, tail=tail,
                                 out2=out2 if tail else None)
        device.submit([device.program(b.current)])
        return np.frombuffer(await device.read(out), np.float32)[:count]
    got = run(go())
    assert [d[0][2].split(":")[1] for d in b.current] == [want]
    want_sum = parts[:splits * count].astype(np.float64).reshape(splits, count).sum(axis=0)
    assert rel_err(got, want_sum) <= FWD_RTOL


# A tiled GEMM's split-K part 0 straight into its output (Builder.GEMM_PART0_IN_OUT): the same
# bits as every part in scratch; edges and whole tiles, 2 to 64 parts (the last through
# reduce_splits_lanes), transposed operands; against float64 too (_check_gemm).
@pytest.mark.parametrize("m,n,k", [(1030, 1025, 37), (1024, 1100, 300), (300, 130, 900),
                                   (130, 129, 4000)])
@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 1)])
def test_gemm_part0_in_out_same_bits(device, monkeypatch, m, n, k, ta, tb):
    from webgpu_trainer.engine.ops import gemm
    monkeypatch.setattr(gemm, "tile_shape", lambda *_: (16, 16))
    seen, reduce = [], gemm.reduce_splits

    async def spy(*args, **kw):
        seen.append((args[3], kw["part0"]))
        await reduce(*args, **kw)
    monkeypatch.setattr(gemm, "reduce_splits", spy)
    got = {}
    for on in (True, False):
        with builder_patch({"GEMM_PART0_IN_OUT": on}):
            got[on] = _check_gemm(device, m, n, k, ta, tb)
    (splits, part0), (splits2, off) = seen
    assert splits == splits2 > 1 and (part0, off) == (1, 0), seen
    assert np.array_equal(got[True], got[False])


def _gemm_on_gpu(device, a, sa, bm, sb, m, n, k, alpha=1.0, bias=None, bsum_of=0):
    """ops/gemm.matmul on the GPU paths (Builder.TILED) of float32 arrays ``a`` and ``bm``
    (uploaded flat, read through strides ``sa`` / ``sb``), optionally alpha and a row bias:
    (out [m, n], the Builder with its dispatches); with ``bsum_of`` 1 or 2 also its BSUM sums
    ([m] or [n]): (out, sums, Builder)."""
    import types
    from webgpu_trainer.engine.ops import gemm
    b = Builder(types.SimpleNamespace(dev=device, P=None, G=None, step=None))
    b.TILED = True
    bufs = []
    for arr in (a, bm) + ((bias,) if bias is not None else ()):
        buf = device.buffer(arr.nbytes)
        device.write(buf, np.ascontiguousarray(arr).tobytes())
        bufs.append(buf)
    out = device.buffer(4 * m * n)
    count = m if bsum_of == 1 else n
    sums = device.buffer(4 * count) if bsum_of else None

    async def go():
        done = await gemm.matmul(b, bufs[0], sa, bufs[1], sb, out, m, n, k, alpha,
                                 bufs[2] if bias is not None else None,
                                 1 if bias is not None else 0, bsum=sums, bsum_of=bsum_of or 1)
        device.submit([device.program(b.current)])
        got = np.frombuffer(await device.read(out), np.float32)[:m * n].reshape(m, n)
        if not bsum_of:
            return got
        assert done
        return got, np.frombuffer(await device.read(sums), np.float32)[:count]
    if bsum_of:
        got, sums_got = run(go())
        return got, sums_got, b
    return run(go()), b


def _random_gemm(device, key, m, n, k, ta, tb):
    """ops/gemm.matmul on the GPU paths of random A and B stored for transA ``ta`` / transB
    ``tb``, alpha 0.5 and a row bias: (out [m, n], the Builder, the float64 reference, the
    operands as gemm.matmul took them: (a, sa, bm, sb))."""
    rng = rng_for(key, m, n, k, ta, tb)
    a = f32(rng.standard_normal((k, m) if ta else (m, k)))
    bm = f32(rng.standard_normal((n, k) if tb else (k, n)))
    bias = f32(rng.standard_normal(n))
    sa = (1, m) if ta else (k, 1)
    sb = (1, k) if tb else (n, 1)
    got, b = _gemm_on_gpu(device, a, sa, bm, sb, m, n, k, 0.5, bias)
    want = 0.5 * ((a.T if ta else a).astype(np.float64) @ (bm.T if tb else bm)) + bias
    return got, b, want, (a, sa, bm, sb)


def _check_gemm(device, m, n, k, ta, tb, want_vec=None):
    from webgpu_trainer.engine.ops import gemm
    got, b, want, operands = _random_gemm(device, "gemm_tiled", m, n, k, ta, tb)
    sa, sb = operands[1], operands[3]
    tiled = gemm.tile_shape(b, m, n, k, sb, sa) is not None
    assert any("matmul_tiled" in d[0][2] for d in b.current) == tiled
    for d in b.current:  # split-K parts as the kernel sizes them (whole k steps): none empty
        if "matmul_tiled" in d[0][2]:
            parts = d[2][2]
            per = ((k + parts - 1) // parts + 7) // 8 * 8
            assert per * (parts - 1) < k or parts == 1, (parts, k)
    if want_vec is not None:
        assert gemm._vec_bits(b, *operands) == want_vec
    assert rel_err(got, want) <= FWD_RTOL
    return got


# The GPU paths' pipelines (shader, entry, constants) as SeedNet and a padded, strided conv
# build them: a real GPU in Chromium takes these paths (SwiftShader, the CI's, does not).
_WIN = {"KH": 3, "KW": 3, "sh": 1, "sw": 1, "ph": 0, "pw": 0, "dh": 1, "dw": 1}
GPU_PIPELINES = [
    ("gemm", "matmul_tiled", {"WM": 16, "WN": 16}),
    ("gemm", "matmul_tiled", {"WM": 16, "WN": 8}),
    ("gemm", "matmul_tiled", {"WM": 8, "WN": 16}),
    ("gemm", "matmul_tiled", {"WM": 8, "WN": 8}),
    ("gemm", "matmul_vec", {"WX": 8}),
    ("gemm", "matmul_vec", {"WX": 8, "BSUM": 1}),
    ("gemm", "matmul_vec", {"WX": 8, "GELU_GRAD": 1}),
    ("gemm", "matmul_kpar", {"KL": 16}),
    ("gemm", "matmul_kpar", {"KL": 64, "GELU_GRAD": 1}),
    ("gemm", "matmul_kpar", {"KL": 16, "BSUM": 1}),
    ("gemm", "matmul_kpar_t", {"KL": 256, "BSUM": 2, "KVEC": 3}),
    ("gemm", "matmul_kpar_t", {"KL": 8, "BSUM": 1}),
    ("gemm", "matmul_kpar", {"KL": 8, "BSUM": 2}),
    ("gemm", "matmul_tiled", {"WM": 16, "WN": 16, "GELU_GRAD": 1}),
    ("reduce", "reduce_splits_lanes", {"LANES": 16, "GELU_GRAD": 1}),
    ("reduce_vec4", "reduce_splits4", {}),
    ("reduce_vec4", "reduce_splits4", {"GELU_GRAD": 1}),
    ("gelu_slope", "gelu_forward_slope", {}),
    ("adam_vec4", "adam4", {}),
    ("gemm", "matmul", {"WX": 4, "BSUM": 2}),
    ("conv2d", "forward", {**_WIN, "FCT": 4}),
    ("conv2d_wgrad", "weight_grad", {**_WIN, "WRB": 4}),
    ("conv2d_wgrad", "weight_grad", {**_WIN, "WRB": 2, "BIAS_TAP": 1}),
    ("conv2d_wgrad", "weight_grad", {**_WIN, "KH": 5, "sh": 2, "ph": 2, "pw": 1, "dw": 2,
                                     "WRB": 2}),
    ("conv2d_wgrad", "weight_grad", {**_WIN, "KH": 1, "KW": 1, "WRB": 1}),
    ("conv2d_wgrad", "pad_input", {**_WIN, "ph": 1, "pw": 2}),
    ("conv_gemm", "conv_gemm", {**_WIN, "MODE": 0, "TW": 16}),
    ("conv_gemm", "conv_gemm", {**_WIN, "ph": 2, "pw": 2, "MODE": 1, "TW": 16}),
    ("conv_gemm", "conv_gemm", {**_WIN, "sh": 2, "sw": 2, "ph": 1, "MODE": 2, "TW": 8}),
    ("conv_gemm", "conv_gemm", {**_WIN, "sh": 2, "sw": 2, "ph": 1, "MODE": 3, "TW": 16}),
    ("conv_gemm", "conv_gemm", {**_WIN, "KW": 2, "sh": 2, "sw": 3, "pw": 1, "MODE": 3, "TW": 8}),
    ("batchnorm", "forward_fused", {}),
    ("batchnorm", "stats_parts", {}),
    ("batchnorm", "stats_finish", {}),
    ("batchnorm", "backward_fused", {}),
    ("rnn", "forward_seq_wide", {}),
    ("rnn", "backward_seq_wide", {}),
    ("rnn", "forward_seq_wide", {"RV": 16}),
    ("rnn", "backward_seq_wide", {"RV": 2}),
    ("conv_depthwise", "backward_weight_wg", {**_WIN, "KH": 5, "KW": 5, "sh": 2, "sw": 2}),
    ("reduce", "reduce_splits", {}),
    ("reduce", "reduce_splits_lanes", {"LANES": 16}),
    ("reduce", "reduce_splits_lanes", {"LANES": 2}),
    ("layout", "sum_expanded_lanes", {"LANES": 16}),
    ("layout", "sum_expanded_lanes", {"LANES": 64}),
    ("dropout", "apply4", {}),
    ("reduce", "column_parts", {}),
    ("matmul", "matmul_wg", {"TILE": 2240}),
    ("matmul", "matmul_wg_chunks", {"TILE": 4032}),
    ("layernorm", "forward_seg", {"SEG": 16}),
    ("layernorm", "backward_seg", {"SEG": 16}),
    # on every adapter, but a browser test's models never fuse an attention (rewrites/attention)
    ("attention", "attention_forward", {"DQ4": 4, "DV4": 4}),
    ("attention", "attention_dq", {"DQ4": 16, "DV4": 1}),
    ("attention", "attention_dkv", {"DQ4": 2, "DV4": 3}),
    ("attention", "attention_forward", {"DQ4": 16, "DV4": 5, "LANES": 8}),
    ("attention", "attention_dq", {"DQ4": 4, "DV4": 4, "LANES": 4, "U": 1}),
    ("attention", "attention_dkv", {"DQ4": 9, "DV4": 16, "LANES": 2}),
]

# 64 x 128 tiles (TM < TW: two B rows a thread): SwiftShader compiles each of these in 90-110 s
# (Chromium or Node alike; 3.5 s with TM == TW), so they take Tint's front end on Dawn's null
# backend (test_wide_tile_pipelines_pass_tints_front_end) instead of a whole compile.
SLOW_ON_SWIFTSHADER = [
    ("conv_gemm", "conv_gemm", {**_WIN, "ph": 1, "pw": 1, "MODE": 0, "TW": 16, "TM": 8}),
    ("conv_gemm", "conv_gemm", {**_WIN, "sh": 2, "sw": 2, "ph": 1, "MODE": 3, "TW": 16, "TM": 8}),
]

PIPELINES_JS = """async (items) => {
  const adapter = await navigator.gpu.requestAdapter();
  const device = await adapter.requestDevice({  // as the engine asks (backends/webgpu_js.py)
    requiredLimits: { maxStorageBuffersPerShaderStage:
                      Math.min(10, adapter.limits.maxStorageBuffersPerShaderStage) } });
  // all at once: Chromium compiles asynchronous pipelines on its worker threads in parallel
  const modules = new Map();
  const out = await Promise.all(items.map(([name, code, entryPoint, constants]) => {
    if (!modules.has(name)) modules.set(name, device.createShaderModule({ code, label: name }));
    const module = modules.get(name);
    return device.createComputePipelineAsync({ layout: "auto",
                                               compute: { module, entryPoint, constants } })
      .then(() => "", (err) => `${name}:${entryPoint}: ${err.message}`);
  }));
  device.destroy();
  return out.filter((m) => m);
}"""


@pytest.mark.e2e
def test_gpu_pipelines_build_in_chromium(chromium, server):
    """Tint (Chromium) accepts the GPU paths' pipelines with their override constants (but
    SLOW_ON_SWIFTSHADER's: the test above)."""
    from webgpu_trainer.engine.backends import shaders
    ctx = chromium.new_context()
    try:
        page = ctx.new_page()
        page.goto(server + "/dev/parity.html")
        items = [[name, shaders.source(name), entry, consts]
                 for name, entry, consts in GPU_PIPELINES]
        assert page.evaluate(PIPELINES_JS, items) == []
    finally:
        ctx.close()


def test_wide_tile_pipelines_pass_tints_front_end(tmp_path):
    """SLOW_ON_SWIFTSHADER through Dawn's null backend in Node (benchmarks/dawn/pipelines.mjs:
    Tint parses and validates the WGSL, substitutes the override constants and checks the
    workgroup size and memory; no GPU compile). Needs Node and ``npm ci --prefix benchmarks``,
    as tests/test_dawn_node.py; a missing one fails. The check can fail: a WGSL error is
    named (the last assertion's mutation, an unknown override, is refused)."""
    import json
    import shutil
    import subprocess
    from webgpu_trainer.engine.backends import shaders
    node = shutil.which("node")
    assert node, "Node.js is required (apt-get install nodejs)"
    bench = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
    if not (bench / "node_modules" / "webgpu" / "index.js").is_file():
        subprocess.run(["npm", "ci", "--prefix", str(bench), "--no-audit", "--no-fund"],
                       check=True, capture_output=True, timeout=300)

    def refused(items):
        path = tmp_path / "items.json"
        path.write_text(json.dumps([[f"{n}:{e}:{c}", shaders.source(n), e, c]
                                    for n, e, c in items]))
        proc = subprocess.run([node, str(bench / "dawn" / "pipelines.mjs"), str(path),
                               "--flags", "backend=null"], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])
    assert refused(SLOW_ON_SWIFTSHADER) == []
    bad = [("conv_gemm", "conv_gemm", {**SLOW_ON_SWIFTSHADER[0][2], "NO_SUCH": 1})]
    assert len(refused(bad)) == 1


def test_gemm_tiles_beyond_one_row_of_workgroups_take_the_untiled_kernel(monkeypatch):
    """The tiled kernel's tiles are one row of workgroups (at most 65,535): a product of more
    tiles takes the untiled kernel (2-D groups) instead of a dispatch WebGPU refuses; a tile
    shape other than 8 / 16 threads a side is refused naming it. Counting device: nothing
    allocated."""
    import types
    from webgpu_trainer.engine.ops import gemm
    from webgpu_trainer.engine.train.memory import CountingDevice
    dev = CountingDevice()
    b = Builder(types.SimpleNamespace(dev=dev, P=None, G=None, step=None))
    b.TILED = True
    a, bm, out = dev.buffer(4), dev.buffer(4), dev.buffer(4)
    monkeypatch.setattr(gemm, "tile_shape", lambda *_: (8, 8))
    run(gemm.matmul(b, a, (14080, 1), bm, (14080, 1), out, 19200, 14080, 64))  # 66,000 tiles
    run(gemm.matmul(b, a, (14080, 1), bm, (14080, 1), out, 19200, 12800, 64))  # 60,000
    entries = [d[0][1] for d in b.current]  # (shader, entry, _)
    assert entries[0] in ("matmul", "matmul_vec") and entries[1:] == ["matmul_tiled"], entries
    monkeypatch.setattr(gemm, "tile_shape", lambda *_: (32, 8))
    with pytest.raises(ValueError, match="32 x 8 threads; each must be 8 or 16"):
        run(gemm.matmul(b, a, (64, 1), bm, (64, 1), out, 640, 640, 64))


@pytest.mark.parametrize("m,n,k,b_strides,want", [
    (28000, 64, 192, (1, 192), (16, 8)),   # Y = X W^T: B = W^T read across W's rows
    (28000, 64, 192, (64, 1), None),       # dX = dY W: B's rows contiguous, the untiled kernel
    (65000, 64, 128, (64, 1), None),
    (65000, 64, 128, None, (16, 8)),       # no strides given: the shape alone decides
    (65000, 64, 64, (1, 64), (16, 16)),    # k <= GEMM_SHORT_K, B across rows: 128 x 128
    (16256, 64, 64, (1, 64), None),        # ... not when too few tiles (split-K)
    (16257, 64, 64, (1, 64), (16, 16)),
    (65000, 64, 96, (1, 96), None),        # 64 < k < 128
    (2000, 64, 192, (1, 192), None),       # fewer than 4096 rows
    (4096, 128, 4096, (128, 1), (16, 16)),
    (28000, 256, 64, (256, 1), None),      # k <= GEMM_SHORT_K, B's rows contiguous: untiled
    (28000, 256, 64, (1, 64), (16, 16)),
    (28000, 256, 65, (256, 1), (16, 16)),
    (256, 64, 28000, (64, 1), None),       # weight gradients over many tokens: untiled
])
def test_gemm_tile_shape_rule(m, n, k, b_strides, want):
    """ops/gemm.tile_shape on a GPU adapter: 128 x 64 tiles for tall outputs 33-64 wide over
    k >= 128 only when op(B) is read across rows (H200 2026-12-04: the input gradient dY @ W
    0.077 ms untiled against 0.108 tiled at [28000, 64] x k 192), 128 x 128 over k <= 64
    (``GEMM_SHORT_K``); 128 x 128 for large ones, except over k <= 64 with B's rows
    contiguous. The rules off (``GEMM_NARROW`` False, ``GEMM_SHORT_K`` None): 128 x 128
    tiles for large outputs only."""
    import types
    from webgpu_trainer.engine.ops import gemm
    from webgpu_trainer.engine.train.memory import CountingDevice
    b = Builder(types.SimpleNamespace(dev=CountingDevice(), P=None, G=None, step=None))
    b.TILED = True
    assert gemm.tile_shape(b, m, n, k, b_strides) == want
    b.GEMM_NARROW, b.GEMM_SHORT_K = False, None
    large = min(m, n) >= 128 and m * n >= (1 << 18) and (m * n >= (1 << 20) or k >= 256)
    assert gemm.tile_shape(b, m, n, k, b_strides) == ((16, 16) if large else None)


def _odd_dropout():
    from cases import dropout
    return dropout._model("ratio03_odd_n", rng_for("dropout_odd"), 0.3, hidden=33, batch=3,
                          step=5, seed=7, acts=("d",), dacts=("h",))


# Dropout on GPU adapters (ops/dropout.py): apply4 (16-byte loads and stores) when n is a
# multiple of 4 gives the floats of apply's four scalar accesses, forward and backward, and
# with the fused ReLU gradient (batchnorm/conv_bn_relu_dropout_train); n = 99 keeps apply.
DROPOUT_CASES = [c for c in family("dropout").CASES + family("batchnorm").CASES
                 if "dropout" in c.id and c.optimizer is None and c.steps == 1] + [_odd_dropout()]


@pytest.mark.parametrize("case", DROPOUT_CASES, ids=[c.id for c in DROPOUT_CASES])
def test_dropout_vec4_bit_identical(device, monkeypatch, case):
    seen, plain = [], Builder.kernel

    async def spy(self, shader, entry, groups, **kw):
        if shader == "dropout":
            seen.append(entry)
        return await plain(self, shader, entry, groups, **kw)
    monkeypatch.setattr(Builder, "kernel", spy)
    # the kernels themselves: ratio 0 runs them too (else an Identity view, test_dropout_fold)
    monkeypatch.setattr(Builder, "FOLD_DROPOUTS", False)
    with builder_patch({**GPU, "DROPOUT_VEC4": True}):
        on, _ = check_case(device, case)
    vec = set(seen)
    seen.clear()
    with builder_patch({**GPU, "DROPOUT_VEC4": False}):
        off, _ = check_case(device, case)
    assert set(seen) == {"apply"}
    assert vec == ({"apply"} if case.id.endswith("odd_n") else {"apply4"})
    for part in ("acts", "dacts"):
        for k in on[part]:
            assert np.array_equal(on[part][k], off[part][k]), (part, k)


# A Linear's bias gradient from its weight gradient's loads (gemm.wgsl BSUM, GPU adapters):
# the sums over k of op(A)'s rows (1) or op(B)'s columns (2) on the untiled kernels (matmul: a
# row stride not a multiple of 4; matmul_vec), unsplit and split (the sums added as
# reduce_splits' tail, with lanes from 32 parts), and on matmul_kpar (one dispatch: the lanes'
# sums added through workgroup memory), every layout, edges (m, n not multiples of 4), against
# float64. The product must be unchanged. matmul_tiled leaves them to the caller.
@pytest.mark.parametrize("kernel,m,n,k,want_split", [
    ("matmul", 37, 29, 13, False), ("matmul", 30, 22, 3001, True),
    ("matmul_vec", 37, 29, 13, False), ("matmul_vec", 64, 64, 4104, True),
    ("matmul_vec", 6, 5, 70000, True), ("matmul_kpar", 30, 22, 256, False),
    ("matmul_kpar", 37, 29, 100, False), ("matmul_kpar", 6, 5, 33, False),
    ("matmul_kpar", 64, 36, 200, False)])
@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 1), (0, 1), (1, 0)])
@pytest.mark.parametrize("bsum_of", [1, 2])
def test_gemm_bias_sums(device, monkeypatch, kernel, m, n, k, want_split, ta, tb, bsum_of):
    from webgpu_trainer.engine.ops import gemm
    monkeypatch.setattr(gemm, "tile_shape", lambda *_: None)
    if kernel != "matmul_kpar":
        monkeypatch.setattr(Builder, "GEMM_KPAR", None)
    rng = rng_for("gemm_bsum", kernel, m, n, k, ta, tb, bsum_of)
    pad = 3 if kernel == "matmul" else 4  # matmul: rows of odd floats (no vec4 loads)

    def stored(rows, cols):  # [rows, cols] inside rows of cols + pad floats
        full = f32(rng.standard_normal((rows, (cols + 3) // 4 * 4 + pad)))
        return full, full[:, :cols], (full.shape[1], 1)
    a_full, a, sa = stored(k, m) if ta else stored(m, k)
    b_full, bm, sb = stored(n, k) if tb else stored(k, n)
    sa = sa[::-1] if ta else sa
    sb = sb[::-1] if tb else sb
    got, sums, b = _gemm_on_gpu(device, a_full, sa, b_full, sb, m, n, k, 0.5, bsum_of=bsum_of)
    keys = [d[0][2] for d in b.current]
    if kernel == "matmul_kpar" and (ta, tb) != (0, 1):  # k strided
        kernel = "matmul_kpar_t"
    assert keys[0].split(":")[1] == kernel and f"BSUM={bsum_of}" in keys[0], keys
    assert (len(keys) == 2) == want_split, keys  # split: one reduce_splits adds both
    op_a = (a.T if ta else a).astype(np.float64)
    op_b = (bm.T if tb else bm).astype(np.float64)
    assert rel_err(got, 0.5 * op_a @ op_b) <= FWD_RTOL
    want = op_a.sum(axis=1) if bsum_of == 1 else op_b.sum(axis=0)
    assert rel_err(sums, want) <= FWD_RTOL


def test_gemm_bias_sums_not_on_tiles(device, monkeypatch):
    """A product on matmul_tiled computes no BSUM sums: gemm.matmul returns False (the caller
    then runs channel_sum), binds no bsum and leaves the product right."""
    import types
    from webgpu_trainer.engine.ops import gemm
    monkeypatch.setattr(gemm, "tile_shape", lambda *_: (16, 16))
    rng = rng_for("gemm_bsum_tiled")
    m, n, k = 300, 260, 40
    a, bm = f32(rng.standard_normal((m, k))), f32(rng.standard_normal((k, n)))
    b = Builder(types.SimpleNamespace(dev=device, P=None, G=None, step=None))
    b.TILED = True
    bufs = [device.buffer(a.nbytes), device.buffer(bm.nbytes)]
    device.write(bufs[0], a.tobytes())
    device.write(bufs[1], bm.tobytes())
    out, sums = device.buffer(4 * m * n), device.buffer(4 * m)

    async def go():
        done = await gemm.matmul(b, bufs[0], (k, 1), bufs[1], (n, 1), out, m, n, k,
                                 bsum=sums, bsum_of=1)
        device.submit([device.program(b.current)])
        return done, np.frombuffer(await device.read(out), np.float32)[:m * n].reshape(m, n)
    done, got = run(go())
    assert not done
    assert all("BSUM" not in d[0][2] for d in b.current) and "matmul_tiled" in b.current[0][0][2]
    assert rel_err(got, a.astype(np.float64) @ bm) <= FWD_RTOL


def test_matmul_wg_chunks_step_of_zero_ends(device):
    """matmul.wgsl matmul_wg_chunks given a chunk of 0 (p.kc; ops/matmul never passes it) steps
    one k at a time instead of looping forever (natively no loop counter stops it: the shader
    modules run without naga's), and the product is right against float64."""
    import types
    from webgpu_trainer.engine.ops import matmul
    rng = rng_for("wg_chunks_zero")
    z, m, n, k = 3, 5, 6, 7
    a, bm = f32(rng.standard_normal((z, m, k))), f32(rng.standard_normal((z, k, n)))
    b = Builder(types.SimpleNamespace(dev=device, P=None, G=None, step=None))
    bufs = [device.buffer(a.nbytes), device.buffer(bm.nbytes), device.buffer(4 * z * m * n)]
    device.write(bufs[0], a.tobytes())
    device.write(bufs[1], bm.tobytes())
    params = dict(M=m, N=n, K=k, splits=1, sam=k, sak=1, sbk=n, sbn=1, kept=z, reduced=1,
                  kc=0, ks=matmul._vec([(z, m * k, k * n)], 0),
                  ksa=matmul._vec([(z, m * k, k * n)], 1),
                  ksb=matmul._vec([(z, m * k, k * n)], 2), rs=matmul._vec([], 0),
                  rsa=matmul._vec([], 1), rsb=matmul._vec([], 2), kso=[0] * 4, som=0, son=0,
                  strided=0, alpha=1.0)

    async def go():
        await b.kernel("matmul", "matmul_wg_chunks", (z, 1, 1), params=params,
                       constants={"TILE": 64 * 4}, a=bufs[0], bm=bufs[1], out=bufs[2])
        device.submit([device.program(b.current)])
        return np.frombuffer(await device.read(bufs[2]), np.float32)[:z * m * n]
    got = run(go()).reshape(z, m, n)
    assert rel_err(got, a.astype(np.float64) @ bm) <= FWD_RTOL


def test_unbound_writable_slots_get_a_sink_per_dispatch(device):
    """GPU adapters: each unbound read_write slot of the shaders SINK_PER_DISPATCH names (True:
    all) a 16-byte sink of its own (no two dispatches write one buffer they do not otherwise
    share: no barrier between them for it); other shaders, CPU adapters and False: one per
    binding index, distinct across indices."""
    import types
    for tiled, per, shader, own in ((True, True, "conv2d", True), (False, True, "gemm", False),
                                    (True, False, "gemm", False), (True, ("gemm",), "gemm", True),
                                    (True, ("gemm",), "reduce", False)):
        b = Builder(types.SimpleNamespace(dev=device, P=None, G=None, step=None))
        b.TILED = tiled
        b.SINK_PER_DISPATCH = per
        first, again, other = b._sink(8, shader), b._sink(8, shader), b._sink(5, shader)
        assert (first is not again) == own
        assert first is not other and again is not other


def test_gemm_short_k_rule_spares_weight_gradients():
    """GEMM_SHORT_K's untiled rule is for input gradients dY W (op(A)'s k contiguous): a weight
    gradient X^T dY of the same size over k 64 (op(A) = X^T, k strided) keeps its tiles."""
    import types
    from webgpu_trainer.engine.ops import gemm
    from webgpu_trainer.engine.train.memory import CountingDevice
    b = Builder(types.SimpleNamespace(dev=CountingDevice(), P=None, G=None, step=None))
    b.TILED = True
    assert gemm.tile_shape(b, 28000, 256, 64, (256, 1), (64, 1)) is None  # dY W
    assert gemm.tile_shape(b, 2048, 1024, 64, (1024, 1), (1, 2048)) == (16, 16)  # X^T dY

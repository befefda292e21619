"""The GPU adapters' kernels (workgroup-memory GEMM tiles, pixel-parallel conv weight gradient,
``Builder.TILED``) forced on the test adapter (lavapipe), against the float64 numpy engine.
CPU adapters run the other kernels (tests/test_ops.py); this keeps both paths tested."""

import numpy as np
import pytest

import reference as ref
from conftest import (FWD_RTOL, compare, f32, head, make_graph, node, one_step, params_of,
                      rel_err, rng_for, run)

from webgpu_trainer.engine.plan import Builder

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend

# id: (C, K, H, W, (kh, kw), pads, strides, dilations, group, batch)
CONV_CASES = {
    "3x3_s1_nopad": (3, 5, 8, 8, (3, 3), [0, 0, 0, 0], [1, 1], [1, 1], 1, 2),
    "5x5_s2_pad2": (2, 4, 9, 9, (5, 5), [2, 2, 2, 2], [2, 2], [1, 1], 1, 3),
    "3x3_asym_pads": (3, 6, 7, 6, (3, 3), [1, 0, 2, 1], [1, 1], [1, 1], 1, 2),
    "3x3_dil2": (2, 3, 9, 9, (3, 3), [1, 1, 1, 1], [1, 1], [2, 2], 1, 2),
    "group2": (4, 6, 6, 6, (3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 2, 2),
    "depthwise_s2": (5, 5, 7, 7, (3, 3), [1, 1, 1, 1], [2, 2], [1, 1], 5, 2),
    "k17_rect_mixed": (3, 17, 7, 9, (2, 3), [0, 1, 1, 0], [2, 1], [1, 2], 1, 2),
    "group3_k12": (6, 12, 5, 5, (3, 3), [1, 1, 1, 1], [1, 2], [1, 1], 3, 2),
    "1x1": (5, 7, 4, 5, (1, 1), [0, 0, 0, 0], [1, 1], [1, 1], 1, 2),
    "seednet_conv3_b40": (16, 24, 12, 12, (3, 3), [0, 0, 0, 0], [1, 1], [1, 1], 1, 40),
    "tiny_plane_b64": (8, 16, 3, 3, (3, 3), [0, 0, 0, 0], [1, 1], [1, 1], 1, 64),
}


@pytest.fixture
def tiled(monkeypatch):
    monkeypatch.setattr(Builder, "TILED", True)


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv_tiled(device, tiled, case):
    c, k, h, w, (kh, kw), pads, strides, dil, group, batch = CONV_CASES[case]
    classes = 5
    rng = rng_for("conv_tiled", case)
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
             node("Relu", ["conv_out"], ["relu_out"]),
             node("Flatten", ["relu_out"], ["flat"], axis=1)]
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    hn, ht = head("flat", k * oh * ow, classes, rng)
    tensors = [("pre.w", pre_w, "param"), ("pre.b", pre_b, "param"),
               ("conv.w", cw, "param"), ("conv.b", cb, "param")] + ht
    graph, blob = make_graph(nodes + hn, tensors, [("input", ["N", c, h, w])],
                             [("output", ["N", classes])])
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes + hn, params_of(tensors), x, labels)
    compare("Conv (tiled)", res, want, acts=["pre_out", "relu_out"], dacts=["pre_out"])


# (m, n, k): 128 x 128 tiles where m, n >= 128 and m*n >= 2^20 (edges, split-K), else the
# untiled kernel (thin outputs)
GEMM_CASES = [(1030, 1025, 37), (1024, 1100, 300), (200, 5300, 50), (1000, 32, 600),
              (32, 300, 1000), (130, 129, 77)]


@pytest.mark.parametrize("m,n,k", GEMM_CASES)
@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm_kernel_tiled(device, tiled, m, n, k, ta, tb):
    """ops/gemm.matmul alone (alpha, a row bias) against float64, every transpose."""
    import types
    from webgpu_trainer.engine.ops import gemm
    rng = rng_for("gemm_tiled", m, n, k, ta, tb)
    a = f32(rng.standard_normal((k, m) if ta else (m, k)))
    bm = f32(rng.standard_normal((n, k) if tb else (k, n)))
    bias = f32(rng.standard_normal(n))
    b = Builder(types.SimpleNamespace(dev=device, P=None, G=None, step=None))
    bufs = []
    for arr in (a, bm, bias):
        buf = device.buffer(arr.nbytes)
        device.write(buf, arr.tobytes())
        bufs.append(buf)
    out = device.buffer(4 * m * n)
    sa = (1, m) if ta else (k, 1)
    sb = (1, k) if tb else (n, 1)

    async def go():
        await gemm.matmul(b, bufs[0], sa, bufs[1], sb, out, m, n, k, 0.5, bufs[2], 1)
        device.submit([device.program(b.current)])
        return np.frombuffer(await device.read(out), np.float32)[:m * n].reshape(m, n)
    got = run(go())
    assert any("matmul_tiled" in d[0][2] for d in b.current) == (gemm.tile_width(b, m, n) > 0)
    want = 0.5 * ((a.T if ta else a).astype(np.float64) @ (bm.T if tb else bm)) + bias
    assert rel_err(got, want) <= FWD_RTOL


@pytest.mark.parametrize("batch,chunk", [(3, 64), (300, 64), (300, None)])
def test_conv_bn_relu_tiled(device, tiled, monkeypatch, batch, chunk):
    """Conv -> BatchNorm2d -> Relu -> head on the GPU paths: 4-channel forward threads (small
    batch), grid-stride elementwise kernels, two-level BatchNorm sums (short and long parts)."""
    monkeypatch.setattr(Builder, "REDUCE_CHUNK", chunk)
    c, k, hw, classes = 3, 6, 6, 4
    rng = rng_for("conv_bn_tiled", batch, chunk)
    cw = f32(rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c))
    gamma, beta = f32(1 + 0.1 * rng.standard_normal(k)), f32(0.1 * rng.standard_normal(k))
    rm, rv = f32(np.zeros(k)), f32(np.ones(k))
    x = f32(rng.standard_normal((batch, c, hw, hw)))
    labels = rng.integers(0, classes, batch)
    # no conv bias: BatchNorm cancels it (its gradient is ~0, all rounding)
    nodes = [node("Conv", ["input", "cw"], ["conv_out"], kernel_shape=[3, 3],
                  pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1),
             node("BatchNormalization", ["conv_out", "g", "b", "rm", "rv"], ["bn_out"],
                  epsilon=1e-5, momentum=0.9, training_mode=1),
             node("Relu", ["bn_out"], ["relu_out"]),
             node("Flatten", ["relu_out"], ["flat"], axis=1)]
    hn, ht = head("flat", k * hw * hw, classes, rng)
    tensors = [("cw", cw, "param"), ("g", gamma, "param"),
               ("b", beta, "param"), ("rm", rm, "buffer"), ("rv", rv, "buffer")] + ht
    graph, blob = make_graph(nodes + hn, tensors, [("input", ["N", c, hw, hw])],
                             [("output", ["N", classes])])
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes + hn, params_of(tensors), x, labels)
    compare("Conv+BN (tiled)", res, want, acts=["conv_out", "relu_out"], dacts=["conv_out"])


@pytest.mark.parametrize("path", ["gpu", "cpu"])
@pytest.mark.parametrize("stride", [1, 2])
def test_relu_gradient_fused(device, monkeypatch, path, stride):
    """Conv -> ReLU -> Conv -> ReLU -> BatchNorm: each in-place ReLU's backward is fused into
    its consumer's input gradient (Conv: forward on dy or backward_input; BatchNorm), on both
    kernel paths; no relu_backward dispatch is left."""
    monkeypatch.setattr(Builder, "TILED", path == "gpu")
    c, k, hw, classes, batch = 3, 5, 7, 4, 3
    rng = rng_for("relu_fused", path, stride)
    w1 = f32(rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c))
    b1 = f32(rng.standard_normal(k) * 0.1)
    w2 = f32(rng.standard_normal((k, k, 3, 3)) / np.sqrt(9 * k))
    b2 = f32(rng.standard_normal(k) * 0.1)
    gamma, beta = f32(1 + 0.1 * rng.standard_normal(k)), f32(0.1 * rng.standard_normal(k))
    x = f32(rng.standard_normal((batch, c, hw, hw)))
    labels = rng.integers(0, classes, batch)
    conv = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], dilations=[1, 1], group=1)
    nodes = [node("Conv", ["input", "w1", "b1"], ["c1"], strides=[1, 1], **conv),
             node("Relu", ["c1"], ["r1"]),
             node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[stride, stride], **conv),
             node("Relu", ["c2"], ["r2"]),
             node("BatchNormalization", ["r2", "g", "b", "rm", "rv"], ["bn"], epsilon=1e-5,
                  momentum=0.9, training_mode=1),
             node("Flatten", ["bn"], ["flat"], axis=1)]
    o = (hw - 1) // stride + 1
    hn, ht = head("flat", k * o * o, classes, rng)
    tensors = [("w1", w1, "param"), ("b1", b1, "param"), ("w2", w2, "param"),
               ("b2", b2, "param"), ("g", gamma, "param"), ("b", beta, "param"),
               ("rm", f32(np.zeros(k)), "buffer"), ("rv", f32(np.ones(k)), "buffer")] + ht
    graph, blob = make_graph(nodes + hn, tensors, [("input", ["N", c, hw, hw])],
                             [("output", ["N", classes])])
    res = run(one_step(device, graph, blob, x, labels))
    assert res["plan"].relu_grad_fused == {"/Conv_c2": "/Relu_r1",
                                           "/BatchNormalization_bn": "/Relu_r2"}
    assert not any("relu_backward" in d[0][2] for d in res["plan"].bwd)
    want = ref.chain_step(nodes + hn, params_of(tensors), x, labels)
    compare("ReLU grad fused", res, want, acts=["r1", "r2"], dacts=["c1", "c2"])


def test_seednet_step_tiled(device, tiled):
    """One SeedNet training step (models/seednet.onnx, Dropout ratio 0) on the GPU paths against
    the float64 numpy engine: loss, every parameter gradient, the running statistics. fc2.bias
    feeds a train-mode BatchNorm (its gradient is ~0 by construction, float32 rounding noise):
    gradients are measured against the largest parameter gradient of the model."""
    import copy
    import pathlib
    from webgpu_trainer import onnx_io
    path = pathlib.Path(__file__).resolve().parents[1] / "models" / "seednet.onnx"
    graph, blob = onnx_io.load_bundle(path)
    graph = copy.deepcopy(graph)
    graph["constants"]["__ratio0"] = {"dtype": "float32", "shape": [], "values": [0.0]}
    for n in graph["nodes"]:
        if n["op_type"] == "Dropout":
            n["inputs"] = [n["inputs"][0], "__ratio0"] + n["inputs"][2:]
            n["attrs"]["ratio"] = 0.0
    rng = rng_for("seednet_tiled")
    batch = 6
    x = f32(rng.standard_normal((batch, 1, 28, 28)))
    labels = rng.integers(0, 10, batch)
    res = run(one_step(device, graph, blob, x, labels))
    params = {t["name"]: np.frombuffer(blob, np.float32, t["nbytes"] // 4, t["offset"])
              .reshape(t["shape"]) for t in graph["tensors"]}
    trainable = {t["name"] for t in graph["tensors"] if t["role"] == "param"}
    want = ref.graph_step(graph, params, x, labels, trainable=trainable)
    assert rel_err(res["loss"], want["loss"]) <= FWD_RTOL
    scale = max(float(np.abs(g).max()) for g in want["grads"].values())
    for name, g in want["grads"].items():
        err = float(np.abs(res["grads"][name] - g).max()) / scale
        assert err <= 1e-4, f"gradient of {name}: {err:.3g}"
    for name, v in want["buffers"].items():
        assert rel_err(res["P"][name], v) <= FWD_RTOL, name


# The GPU paths' pipelines (shader, entry, constants) as SeedNet and a padded, strided conv
# build them: a real GPU in Chromium takes these paths (SwiftShader, the CI's, does not).
GPU_PIPELINES = [
    ("gemm", "matmul_tiled", {"TW": 16}),
    ("conv2d", "forward", {"KH": 3, "KW": 3, "sh": 1, "sw": 1, "ph": 0, "pw": 0, "dh": 1,
                           "dw": 1, "FCT": 4}),
    ("conv2d", "weight_grad", {"KH": 3, "KW": 3, "sh": 1, "sw": 1, "ph": 0, "pw": 0, "dh": 1,
                               "dw": 1, "WRB": 4}),
    ("conv2d", "weight_grad", {"KH": 5, "KW": 3, "sh": 2, "sw": 1, "ph": 2, "pw": 1, "dh": 1,
                               "dw": 2, "WRB": 2}),
    ("conv2d", "weight_grad", {"KH": 1, "KW": 1, "sh": 1, "sw": 1, "ph": 0, "pw": 0, "dh": 1,
                               "dw": 1, "WRB": 1}),
    ("batchnorm", "forward_fused", {}),
    ("batchnorm", "backward_fused", {}),
]

PIPELINES_JS = """async (items) => {
  const adapter = await navigator.gpu.requestAdapter();
  const device = await adapter.requestDevice();
  const out = [];
  for (const [name, code, entryPoint, constants] of items) {
    device.pushErrorScope("validation");
    const module = device.createShaderModule({ code, label: name });
    device.createComputePipeline({ layout: "auto", compute: { module, entryPoint, constants } });
    const err = await device.popErrorScope();
    out.push(err ? `${name}:${entryPoint}: ${err.message}` : "");
  }
  device.destroy();
  return out.filter((m) => m);
}"""


@pytest.mark.e2e
def test_gpu_pipelines_build_in_chromium(chromium, server):
    """Tint (Chromium) accepts the GPU paths' pipelines with their override constants."""
    from webgpu_trainer.engine import shaders
    ctx = chromium.new_context()
    try:
        page = ctx.new_page()
        page.goto(server + "/parity.html")
        items = [[name, shaders.source(name), entry, consts]
                 for name, entry, consts in GPU_PIPELINES]
        assert page.evaluate(PIPELINES_JS, items) == []
    finally:
        ctx.close()

"""Per-op forward and backward of the engine (native wgpu) against the float64 numpy reference.

Each test builds a tiny chain ending in LogSoftmax (the plan's NLL loss), runs one training
step (or the eval forward) and compares the loss, metrics, output, chosen intermediate
activations / activation gradients, every parameter gradient and the running statistics.
"""


import numpy as np
import pytest

import reference as ref
from conftest import (GRAD_RTOL, assert_close, build, check, compare, f32, head, make_graph,
                      node, params_of,
                      one_step, rng_for, run, step_bytes)

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend

# ---- Conv ---------------------------------------------------------------------------------

CONV_CASES = {
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


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv(device, case):
    c, k, h, w, (kh, kw), pads, strides, dil, group = CONV_CASES[case]
    batch, classes = 2, 5
    rng = rng_for("conv", case)
    # pre: a 1x1 conv so the tested conv's input needs a gradient (backward_input runs).
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
    graph, blob = make_graph(nodes + hn, tensors, [("input", ["N", c, h, w])],
                             [("output", ["N", classes])])
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes + hn, params_of(tensors), x, labels)
    compare("Conv", res, want, acts=["pre_out", "conv_out"], dacts=["pre_out", "conv_out"])


# ---- Gemm ---------------------------------------------------------------------------------

@pytest.mark.parametrize("features,out", [(1, 7), (7, 33), (33, 70), (70, 7), (33, 1),
                                          (260, 5)])
@pytest.mark.parametrize("trans_b", [1, 0])
def test_gemm_linear(device, features, out, trans_b):
    """input -> Gemm(pre, Linear) -> Gemm(tested) -> LogSoftmax: dA, dB, dC of the tested one."""
    batch = 4
    rng = rng_for("gemm", features, out, trans_b)
    pre_w = f32(rng.standard_normal((features, features)) / np.sqrt(features))
    pre_b = f32(rng.standard_normal(features) * 0.1)
    wshape = (out, features) if trans_b else (features, out)
    w = f32(rng.standard_normal(wshape) / np.sqrt(features))
    b = f32(rng.standard_normal(out) * 0.1)
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, out, batch)
    nodes = [node("Gemm", ["input", "pre.w", "pre.b"], ["h"], transB=1),
             node("Gemm", ["h", "w", "b"], ["logits"], transB=trans_b),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("pre.w", pre_w, "param"), ("pre.b", pre_b, "param"), ("w", w, "param"),
               ("b", b, "param")]
    graph, blob = make_graph(nodes, tensors, [("input", ["N", features])],
                             [("output", ["N", out])])
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes, params_of(tensors), x, labels)
    compare("Gemm", res, want, acts=["h", "logits"], dacts=["h", "logits"])


def test_gemm_trans_a(device):
    """Gemm(A = parameter, B = activation) -> [H, N]; then Gemm(transA=1) consumes [H, N]."""
    batch, features, hidden, classes = 4, 7, 33, 10
    rng = rng_for("gemm_ta")
    w1 = f32(rng.standard_normal((hidden, features)) / np.sqrt(features))
    c1 = f32(rng.standard_normal((hidden, 1)) * 0.1)   # C of shape [M, 1]: bias per row
    w2 = f32(rng.standard_normal((hidden, classes)) / np.sqrt(hidden))
    b2 = f32(rng.standard_normal(classes) * 0.1)
    x = f32(rng.standard_normal((features, batch)))     # input laid out [F, N]
    labels = rng.integers(0, classes, batch)
    nodes = [node("Gemm", ["w1", "input", "c1"], ["h"]),
             node("Gemm", ["h", "w2", "b2"], ["logits"], transA=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("w1", w1, "param"), ("c1", c1, "param"), ("w2", w2, "param"),
               ("b2", b2, "param")]
    graph, blob = make_graph(nodes, tensors, [("input", [features, "N"])],
                             [("output", ["N", classes])])
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes, params_of(tensors), x, labels)
    compare("Gemm", res, want, acts=["h"], dacts=["h", "logits"])


@pytest.mark.parametrize("c_shape", ["row", "full", "none"])
def test_gemm_alpha(device, c_shape):
    """alpha = 0.5, beta = 1, C as [N] (row), [M, N] (full) or absent."""
    batch, features, classes = 4, 33, 7
    rng = rng_for("gemm_alpha", c_shape)
    pre_w = f32(rng.standard_normal((features, features)) / np.sqrt(features))
    w = f32(rng.standard_normal((classes, features)) / np.sqrt(features))
    c = {"row": (classes,), "full": (batch, classes), "none": None}[c_shape]
    tensors = [("pre.w", pre_w, "param"), ("w", w, "param")]
    if c is not None:
        tensors.append(("c", f32(rng.standard_normal(c)), "param"))
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)
    nodes = [node("Gemm", ["input", "pre.w"], ["h"], transB=1),
             node("Gemm", ["h", "w"] + (["c"] if c else []), ["logits"], transB=1, alpha=0.5,
                  beta=1.0),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    graph, blob = make_graph(nodes, tensors, [("input", ["N", features])],
                             [("output", ["N", classes])])
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes, params_of(tensors), x, labels)
    compare("Gemm", res, want, acts=["h", "logits"], dacts=["h"])


def test_gemm_beta_frozen_c(device):
    """beta != 1 with a frozen C (role buffer): forward and the other gradients."""
    batch, features, classes = 4, 7, 5
    rng = rng_for("gemm_beta")
    w = f32(rng.standard_normal((classes, features)))
    cb = f32(rng.standard_normal(classes))
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)
    nodes = [node("Gemm", ["input", "w", "c"], ["logits"], transB=1, alpha=0.25, beta=0.5),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("w", w, "param"), ("c", cb, "buffer")]
    graph, blob = make_graph(nodes, tensors, [("input", ["N", features])],
                             [("output", ["N", classes])])
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes, params_of(tensors), x, labels)
    want["grads"].pop("c")
    compare("Gemm", res, want, acts=["logits"])


# ---- BatchNormalization -------------------------------------------------------------------

def _bn_tensors(rng, ch, prefix="bn"):
    return [(f"{prefix}.gamma", f32(1 + 0.3 * rng.standard_normal(ch)), "param"),
            (f"{prefix}.beta", f32(0.3 * rng.standard_normal(ch)), "param"),
            (f"{prefix}.mean", f32(0.2 * rng.standard_normal(ch)), "buffer"),
            (f"{prefix}.var", f32(0.5 + rng.random(ch)), "buffer")]


def _bn_node(inp, out, prefix="bn", **attrs):
    return node("BatchNormalization", [inp] + [f"{prefix}.{n}" for n in
                                               ("gamma", "beta", "mean", "var")], [out],
                **attrs)


def _bn2d_model(rng, relu, eps=1e-5, momentum=0.9):
    c, k, h, w, classes = 2, 5, 5, 4, 3
    pre_w = f32(rng.standard_normal((k, c, 3, 3)) / 3)
    # no bias before BatchNorm: its gradient is zero in exact arithmetic (only rounding noise)
    nodes = [node("Conv", ["input", "pre.w"], ["pre_out"], kernel_shape=[3, 3],
                  pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1),
             _bn_node("pre_out", "bn_out", epsilon=eps, momentum=momentum)]
    last = "bn_out"
    if relu:
        nodes.append(node("Relu", ["bn_out"], ["relu_out"]))
        last = "relu_out"
    nodes.append(node("Flatten", [last], ["flat"], axis=1))
    hn, ht = head("flat", k * h * w, classes, rng)
    tensors = [("pre.w", pre_w, "param")] + _bn_tensors(rng, k) + ht
    return nodes + hn, tensors, (c, h, w), classes


@pytest.mark.parametrize("relu,eps,momentum", [(False, 1e-5, 0.9), (True, 1e-3, 0.8)])
def test_batchnorm2d_train(device, relu, eps, momentum):
    batch = 3
    rng = rng_for("bn2d", relu)
    nodes, tensors, (c, h, w), classes = _bn2d_model(rng, relu, eps, momentum)
    graph, blob = make_graph(nodes, tensors, [("input", ["N", c, h, w])],
                             [("output", ["N", classes])])
    x = f32(rng.standard_normal((batch, c, h, w)) * 2 + 0.5)
    labels = rng.integers(0, classes, batch)
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes, params_of(tensors), x, labels)
    if relu:  # ReLU runs in place on the BatchNorm output
        compare("BatchNormalization", res, want, acts=["relu_out"], dacts=["pre_out"])
    else:
        compare("BatchNormalization", res, want, acts=["bn_out"], dacts=["pre_out", "bn_out"])
    # A second step on the same plan: the running statistics accumulate.
    res2 = run(one_step(device, graph, blob, x, labels, plan=res["plan"], step=2))
    p2 = params_of(tensors)
    p2.update(want["buffers"])
    want2 = ref.chain_step(nodes, p2, x, labels)
    for name, v in want2["buffers"].items():
        check("BatchNormalization", "fwd", res2["P"][name], v, f"{name} after 2 steps")


def test_batchnorm1d_train(device):
    batch, features, hidden, classes = 4, 7, 9, 5
    rng = rng_for("bn1d")
    nodes = [node("Gemm", ["input", "pre.w"], ["h"], transB=1),
             _bn_node("h", "bn_out"),
             node("Relu", ["bn_out"], ["relu_out"])]
    hn, ht = head("relu_out", hidden, classes, rng)
    tensors = [("pre.w", f32(rng.standard_normal((hidden, features))), "param")] + \
        _bn_tensors(rng, hidden) + ht
    graph, blob = make_graph(nodes + hn, tensors, [("input", ["N", features])],
                             [("output", ["N", classes])])
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes + hn, params_of(tensors), x, labels)
    compare("BatchNormalization", res, want, acts=["relu_out"], dacts=["h"])


@pytest.mark.parametrize("dims", [2, 1])
def test_batchnorm_eval(device, dims):
    """Eval forward normalises with the running statistics and leaves them unchanged."""
    batch, classes = 3, 3
    rng = rng_for("bn_eval", dims)
    if dims == 2:
        nodes, tensors, (c, h, w), classes = _bn2d_model(rng, relu=False)
        shape = [c, h, w]
    else:
        nodes = [node("Gemm", ["input", "pre.w", "pre.b"], ["h"], transB=1),
                 _bn_node("h", "bn_out")]
        hn, ht = head("bn_out", 6, classes, rng)
        nodes += hn
        tensors = [("pre.w", f32(rng.standard_normal((6, 5))), "param"),
                   ("pre.b", f32(rng.standard_normal(6)), "param")] + _bn_tensors(rng, 6) + ht
        shape = [5]
    graph, blob = make_graph(nodes, tensors, [("input", ["N"] + shape)],
                             [("output", ["N", classes])])
    x = f32(rng.standard_normal([batch] + shape))
    labels = rng.integers(0, classes, batch)
    res = run(one_step(device, graph, blob, x, labels, train=False))
    want = ref.chain_step(nodes, params_of(tensors), x, labels, train=False)
    check("BatchNormalization", "fwd", res["acts"]["bn_out"], want["acts"]["bn_out"], "eval")
    check("BatchNormalization", "fwd", res["acts"]["output"], want["acts"]["output"], "eval out")
    for name, arr, role in tensors:
        if role == "buffer":
            assert np.array_equal(res["P"][name], arr), f"eval changed {name}"


# ---- Relu ---------------------------------------------------------------------------------

def test_relu(device):
    """Conv -> Relu (in place) -> Flatten -> Gemm: forward and the masked gradient."""
    batch, c, k, h, w, classes = 2, 3, 4, 5, 5, 4
    rng = rng_for("relu")
    nodes = [node("Conv", ["input", "cw", "cb"], ["conv_out"], kernel_shape=[3, 3],
                  pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1),
             node("Relu", ["conv_out"], ["relu_out"]),
             node("Flatten", ["relu_out"], ["flat"], axis=1)]
    hn, ht = head("flat", k * h * w, classes, rng)
    tensors = [("cw", f32(rng.standard_normal((k, c, 3, 3)) / 5), "param"),
               ("cb", f32(rng.standard_normal(k) * 0.1), "param")] + ht
    graph, blob = make_graph(nodes + hn, tensors, [("input", ["N", c, h, w])],
                             [("output", ["N", classes])])
    x = f32(rng.standard_normal((batch, c, h, w)))
    labels = rng.integers(0, classes, batch)
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes + hn, params_of(tensors), x, labels)
    assert 0.2 < (want["acts"]["relu_out"] == 0).mean() < 0.8
    compare("Relu", res, want, acts=["relu_out"], dacts=["conv_out"])


def test_relu_on_graph_input(device):
    batch, features, classes = 2, 6, 3
    rng = rng_for("relu_input")
    nodes = [node("Relu", ["input"], ["r"])]
    hn, ht = head("r", features, classes, rng)
    graph, blob = make_graph(nodes + hn, ht, [("input", ["N", features])],
                             [("output", ["N", classes])])
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes + hn, params_of(ht), x, labels)
    compare("Relu", res, want, acts=["r"])


# ---- Dropout ------------------------------------------------------------------------------

def _dropout_model(rng, ratio, features=6, hidden=512, classes=4, as_attr=False, mask_out=False):
    consts = {}
    if as_attr:
        dnode = node("Dropout", ["h"], ["d"], ratio=ratio)
    else:
        consts = {"ratio": {"dtype": "float32", "shape": [], "values": [ratio]}}
        dnode = node("Dropout", ["h", "ratio"], ["d"] + (["d_mask"] if mask_out else []))
    nodes = [node("Gemm", ["input", "pre.w", "pre.b"], ["h"], transB=1), dnode]
    hn, ht = head("d", hidden, classes, rng)
    tensors = [("pre.w", f32(rng.standard_normal((hidden, features))), "param"),
               ("pre.b", f32(rng.standard_normal(hidden)), "param")] + ht
    graph, blob = make_graph(nodes + hn, tensors, [("input", ["N", features])],
                             [("output", ["N", classes])], constants=consts)
    return nodes + hn, tensors, graph, blob


def test_dropout_ratio0_is_identity(device):
    batch = 4
    rng = rng_for("dropout0")
    nodes, tensors, graph, blob = _dropout_model(rng, 0.0, hidden=33)
    x = f32(rng.standard_normal((batch, 6)))
    labels = rng.integers(0, 4, batch)
    res = run(one_step(device, graph, blob, x, labels, seed=123))
    assert np.array_equal(res["acts"]["d"], res["acts"]["h"])
    assert np.array_equal(res["dacts"]["h"], res["dacts"]["d"])
    want = ref.graph_step(graph, params_of(tensors), x, labels)
    compare("Dropout", res, want, acts=["h", "d"], dacts=["h"])


@pytest.mark.parametrize("as_attr,mask_out", [(False, False), (True, False), (False, True)])
def test_dropout_ratio03(device, as_attr, mask_out):
    batch, ratio = 4, 0.3
    rng = rng_for("dropout03", as_attr)
    nodes, tensors, graph, blob = _dropout_model(rng, ratio, as_attr=as_attr, mask_out=mask_out)
    x = f32(rng.standard_normal((batch, 6)))
    labels = rng.integers(0, 4, batch)
    res = run(one_step(device, graph, blob, x, labels, step=5, seed=7))
    h, d = res["acts"]["h"], res["acts"]["d"]
    assert np.all(h != 0)
    keep = d != 0
    n = keep.size
    frac = 1 - keep.mean()
    sigma = np.sqrt(ratio * (1 - ratio) / n)
    assert abs(frac - ratio) <= 3 * sigma, f"dropped fraction {frac:.4f}, expected {ratio}"
    scale = np.float32(1.0) / np.float32(1.0 - ratio)
    assert np.array_equal(d[keep], h[keep] * scale), "kept values are x / (1 - ratio)"
    # backward uses the same mask: the gradient of h is zero exactly where dropped
    dh = res["dacts"]["h"]
    assert np.all(dh[~keep] == 0)
    want = ref.graph_step(graph, params_of(tensors), x, labels, keep={nodes[1]["name"]: keep})
    compare("Dropout", res, want, acts=["d"], dacts=["h"])
    # same (seed, step) -> same mask; another step -> another mask; eval -> identity
    plan = res["plan"]
    again = run(one_step(device, graph, blob, x, labels, step=5, seed=7, plan=plan))
    assert np.array_equal(again["acts"]["d"], d)
    other = run(one_step(device, graph, blob, x, labels, step=6, seed=7, plan=plan))
    assert not np.array_equal(other["acts"]["d"] != 0, keep)
    ev = run(one_step(device, graph, blob, x, labels, train=False, plan=plan))
    assert np.array_equal(ev["acts"]["d"], ev["acts"]["h"])


# ---- LogSoftmax + NLL ---------------------------------------------------------------------

@pytest.mark.parametrize("batch,features,classes,scale", [(4, 5, 10, 1.0), (3, 4, 70, 5.0),
                                                          (300, 3, 7, 3.0), (2, 3, 2, 20.0)])
def test_log_softmax_nll(device, batch, features, classes, scale):
    rng = rng_for("lsm", batch, classes)
    w = f32(rng.standard_normal((classes, features)) * scale)
    b = f32(rng.standard_normal(classes))
    nodes = [node("Gemm", ["input", "w", "b"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("w", w, "param"), ("b", b, "param")]
    graph, blob = make_graph(nodes, tensors, [("input", ["N", features])],
                             [("output", ["N", classes])])
    x = f32(rng.standard_normal((batch, features)))
    # labels: the argmax for about half the samples, so the accuracy is neither 0 nor 1
    logits = x.astype(np.float64) @ w.T + b
    labels = np.where(np.arange(batch) % 2 == 0, logits.argmax(1),
                      rng.integers(0, classes, batch))
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes, params_of(tensors), x, labels)
    assert 0.0 < want["acc"] <= 1.0
    compare("LogSoftmax+NLL", res, want, acts=["logits"], dacts=["logits", "output"])
    logp = res["acts"]["output"].astype(np.float64)
    assert np.allclose(np.exp(logp).sum(1), 1.0, atol=1e-5)


def test_metrics_slot(device):
    """plan.metrics slot s = [mean loss, accuracy] of the step whose uniform has slot s."""
    batch, features, classes = 4, 3, 5
    rng = rng_for("slot")
    nodes, tensors = head("input", features, classes, rng)
    graph, blob = make_graph(nodes, tensors, [("input", ["N", features])],
                             [("output", ["N", classes])])
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)

    async def go():
        plan = await build(device, graph, blob, batch)
        device.write(plan.input.buf, x.tobytes())
        device.write(plan.labels.buf, labels.astype(np.uint32).tobytes())
        device.write(plan.step, step_bytes(4))  # metrics slot 3
        device.submit([device.program(plan.fwd_train + plan.loss)])
        return np.frombuffer(await device.read(plan.metrics, 0, 64), np.float32)

    met = run(go())
    want = ref.chain_step(nodes, params_of(tensors), x, labels)
    assert np.all(met[:6] == 0) and np.all(met[8:] == 0)
    check("LogSoftmax+NLL", "fwd", met[6], want["loss"], "loss in slot 3")
    assert met[7] == pytest.approx(want["acc"], abs=1e-6)


# ---- graph-level cases: views, shared weights, Gemm C broadcast ---------------------------

def test_identity_and_relu_before_log_softmax(device):
    """Gemm -> Identity (a view) -> Gemm -> Relu (in place on the logits) -> LogSoftmax."""
    batch, features, hidden, classes = 4, 5, 7, 6
    rng = rng_for("identity")
    nodes = [node("Gemm", ["input", "w1", "b1"], ["h"], transB=1),
             node("Identity", ["h"], ["hi"]),
             node("Gemm", ["hi", "w2", "b2"], ["logits"], transB=1),
             node("Relu", ["logits"], ["rl"]),
             node("LogSoftmax", ["rl"], ["output"], axis=1)]
    tensors = [("w1", f32(rng.standard_normal((hidden, features))), "param"),
               ("b1", f32(rng.standard_normal(hidden)), "param"),
               ("w2", f32(rng.standard_normal((classes, hidden))), "param"),
               ("b2", f32(rng.standard_normal(classes)), "param")]
    graph, blob = make_graph(nodes, tensors, [("input", ["N", features])],
                             [("output", ["N", classes])])
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes, params_of(tensors), x, labels)
    compare("Relu", res, want, acts=["hi", "rl"], dacts=["hi", "logits"])


def test_shared_weight_gradient_accumulates(device):
    batch, f = 4, 6
    rng = rng_for("tied")
    nodes = [node("Gemm", ["input", "w"], ["h"], transB=1),
             node("Gemm", ["h", "w"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("w", f32(rng.standard_normal((f, f)) / 2), "param")]
    graph, blob = make_graph(nodes, tensors, [("input", ["N", f])], [("output", ["N", f])])
    x = f32(rng.standard_normal((batch, f)))
    labels = rng.integers(0, f, batch)
    res = run(one_step(device, graph, blob, x, labels))
    w = params_of(tensors)["w"].astype(np.float64)
    h = x @ w.T
    logp = ref.log_softmax(h @ w.T)
    _, d, _ = ref.nll(logp, labels)
    dl = ref.log_softmax_backward(logp, d)
    dw = dl.T @ h + (dl @ w).T @ x   # both uses of w
    assert_close(res["grads"]["w"], dw, GRAD_RTOL, "gradient of a shared weight")


@pytest.mark.parametrize("c_shape", [(4, 1), (1,)])
def test_gemm_c_column_square(device, c_shape):
    # A per-row or scalar C right before LogSoftmax has an exactly zero gradient, so a hidden
    # layer (M == N == 4) and a ReLU make C matter.
    batch, features, hidden, classes = 4, 5, 4, 3
    rng = rng_for("gemm_col", c_shape)
    nodes = [node("Gemm", ["input", "w", "c"], ["h"], transB=1),
             node("Relu", ["h"], ["r"]),
             node("Gemm", ["r", "w2"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("w", f32(rng.standard_normal((hidden, features))), "param"),
               ("c", f32(rng.standard_normal(c_shape)), "param"),
               ("w2", f32(rng.standard_normal((classes, hidden))), "param")]
    graph, blob = make_graph(nodes, tensors, [("input", ["N", features])],
                             [("output", ["N", classes])])
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes, params_of(tensors), x, labels)
    compare("Gemm", res, want, acts=["logits"])  # h is overwritten by the in-place ReLU


# ---- the reference itself, against torch (skipped without torch) --------------------------

def test_reference_matches_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    t = lambda a: torch.tensor(a, dtype=torch.float64, requires_grad=True)  # noqa: E731
    # conv: asymmetric pads, strides, dilations, groups
    x, w, b = rng.standard_normal((2, 4, 9, 8)), rng.standard_normal((6, 2, 3, 2)), \
        rng.standard_normal(6)
    pads, strides, dil = [1, 0, 2, 1], [2, 1], [1, 2]
    dy = rng.standard_normal(ref.conv2d(x, w, b, pads, strides, dil, 2).shape)
    xt, wt, bt = t(x), t(w), t(b)
    yt = F.conv2d(F.pad(xt, (pads[1], pads[3], pads[0], pads[2])), wt, bt, strides, 0, dil, 2)
    yt.backward(torch.tensor(dy))
    assert np.allclose(ref.conv2d(x, w, b, pads, strides, dil, 2), yt.detach().numpy())
    for got, want in zip(ref.conv2d_backward(x, w, dy, pads, strides, dil, 2),
                         (xt.grad, wt.grad, bt.grad)):
        assert np.allclose(got, want.numpy())
    # gemm with transA, transB, alpha, beta and a [M, 1] C
    a, bm, c = rng.standard_normal((5, 3)), rng.standard_normal((4, 5)), \
        rng.standard_normal((3, 1))
    dy = rng.standard_normal((3, 4))
    at, bmt, ct = t(a), t(bm), t(c)
    yt = 0.5 * at.T @ bmt.T + 2.0 * ct
    yt.backward(torch.tensor(dy))
    assert np.allclose(ref.gemm(a, bm, c, 0.5, 2.0, 1, 1), yt.detach().numpy())
    for got, want in zip(ref.gemm_backward(a, bm, dy, c, 0.5, 2.0, 1, 1),
                         (at.grad, bmt.grad, ct.grad)):
        assert np.allclose(got, want.numpy())
    # batchnorm train (torch momentum = 1 - ONNX momentum) and backward
    x = rng.standard_normal((3, 4, 2, 5)) * 2 + 1
    g, bb = rng.standard_normal(4), rng.standard_normal(4)
    rm, rv = rng.standard_normal(4), rng.random(4) + 0.5
    dy = rng.standard_normal(x.shape)
    xt, gt, bt = t(x), t(g), t(bb)
    rmt, rvt = torch.tensor(rm), torch.tensor(rv)
    yt = F.batch_norm(xt, rmt, rvt, gt, bt, True, 0.2, 1e-3)
    yt.backward(torch.tensor(dy))
    y, nm, nv, cache = ref.batchnorm_train(x, g, bb, rm, rv, 1e-3, 0.8)
    assert np.allclose(y, yt.detach().numpy())
    assert np.allclose(nm, rmt.numpy()) and np.allclose(nv, rvt.numpy())
    for got, want in zip(ref.batchnorm_backward(dy, cache), (xt.grad, gt.grad, bt.grad)):
        assert np.allclose(got, want.numpy())
    assert np.allclose(ref.batchnorm_eval(x, g, bb, rm, rv, 1e-3),
                       F.batch_norm(torch.tensor(x), torch.tensor(rm), torch.tensor(rv),
                                    torch.tensor(g), torch.tensor(bb), False, 0.1, 1e-3))
    # log_softmax + nll
    z = rng.standard_normal((5, 7)) * 3
    labels = rng.integers(0, 7, 5)
    zt = t(z)
    loss = F.nll_loss(F.log_softmax(zt, 1), torch.tensor(labels))
    loss.backward()
    logp = ref.log_softmax(z)
    val, d, _ = ref.nll(logp, labels)
    assert np.isclose(val, loss.item())
    assert np.allclose(ref.log_softmax_backward(logp, d), zt.grad.numpy())


def test_cross_entropy_on_raw_logits(device):
    """A model without a final LogSoftmax trains with CrossEntropyLoss(mean): the same loss,
    accuracy and gradients as LogSoftmax + NLL (the float64 reference)."""
    batch, features, classes = 7, 33, 10
    rng = rng_for("cross_entropy")
    nodes, tensors = head("input", features, classes, rng)
    graph, blob = make_graph(nodes[:1], tensors, [("input", ["N", features])],
                             [("logits", ["N", classes])])
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes, params_of(tensors), x, labels)
    check("CrossEntropy", "fwd", res["loss"], want["loss"], "loss")
    assert res["acc"] == pytest.approx(want["acc"], abs=1e-6)
    check("CrossEntropy", "fwd", res["acts"]["loss/log_softmax"], want["acts"]["output"],
          "log-probabilities")
    check("CrossEntropy", "grad", res["dacts"]["logits"], want["dacts"]["logits"],
          "gradient of the logits")
    for name, g in want["grads"].items():
        check("CrossEntropy", "grad", res["grads"][name], g, f"gradient of {name}")


def test_batchnorm_two_level_sums(device, monkeypatch):
    """A batch larger than one reduction part (4096 elements per channel and workgroup, as on
    GPUs), so the statistics and the gradient sums add several partial sums per channel."""
    from webgpu_trainer.engine.plan import Builder
    monkeypatch.setattr(Builder, "REDUCE_CHUNK", 4096)
    batch, features, hidden, classes = 9000, 3, 5, 3
    rng = rng_for("bn_parts")
    nodes = [node("Gemm", ["input", "pre.w"], ["h"], transB=1), _bn_node("h", "bn_out"),
             node("Relu", ["bn_out"], ["relu_out"])]
    hn, ht = head("relu_out", hidden, classes, rng)
    tensors = [("pre.w", f32(rng.standard_normal((hidden, features))), "param")] + \
        _bn_tensors(rng, hidden) + ht
    graph, blob = make_graph(nodes + hn, tensors, [("input", ["N", features])],
                             [("output", ["N", classes])])
    x = f32(rng.standard_normal((batch, features)) * 3 + 1)
    labels = rng.integers(0, classes, batch)
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes + hn, params_of(tensors), x, labels)
    compare("BatchNormalization", res, want, acts=["relu_out"], dacts=["h"])


def test_in_place_relu_behind_a_view_keeps_shared_data(device):
    """Tanh -> t; Flatten(t) -> Relu; Add(relu, Flatten(t)): the ReLU must not overwrite t,
    which the Add (through another view) and Tanh's backward still read."""
    batch, f = 4, 6
    rng = rng_for("relu_view")
    nodes = [node("Gemm", ["input", "w", "b"], ["h"], transB=1),
             node("Tanh", ["h"], ["t"]),
             node("Flatten", ["t"], ["ft"], axis=1),
             node("Relu", ["ft"], ["r"]),
             node("Identity", ["t"], ["it"]),
             node("Add", ["r", "it"], ["s"]),
             node("Gemm", ["s", "w2", "b2"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("w", f32(rng.standard_normal((f, f))), "param"),
               ("b", f32(rng.standard_normal(f) * 0.1), "param"),
               ("w2", f32(rng.standard_normal((5, f))), "param"),
               ("b2", f32(rng.standard_normal(5) * 0.1), "param")]
    graph, blob = make_graph(nodes, tensors, [("input", ["N", f])], [("output", ["N", 5])])
    x = f32(rng.standard_normal((batch, f)))
    labels = rng.integers(0, 5, batch)
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.graph_step(graph, params_of(tensors), x, labels)
    compare("Relu", res, want, acts=["t", "s"], dacts=["h"])

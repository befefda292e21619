"""BatchNormalization on the native device against the float64 numpy engine (the cases of
tests/cases/batchnorm.py), the running statistics over two steps, and the numpy engine against
torch (skipped without torch)."""

import numpy as np
import pytest

from cases import batchnorm, by_id, ids
from harness import check, check_case, one_step, oracle
from conftest import rel_err, run
from webgpu_trainer.cpu.batchnorm import batchnorm_backward, batchnorm_eval, batchnorm_train
from webgpu_trainer.cpu.engine import Engine, params_from_blob

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", batchnorm.CASES, ids=ids(batchnorm.CASES))
def test_case(device, case):
    check_case(device, case)


@pytest.mark.parametrize("name", ["bn2d_train_plain", "bn2d_train_relu"])
def test_running_statistics_accumulate(device, name):
    """A second step on the same plan starts from the first step's running statistics."""
    c = by_id(batchnorm.CASES, name)
    res, want = check_case(device, c)
    res2 = run(one_step(device, c.graph, c.blob, c.x, c.labels, plan=res["plan"], step=2))
    params = params_from_blob(c.graph, c.blob)
    params.update(want["buffers"])
    want2 = Engine(c.graph, params, np.float64).step(np.float64(c.x), c.labels)
    assert want2["buffers"]
    for name, v in want2["buffers"].items():
        check("BatchNormalization", "fwd", res2["P"][name], v, f"{name} after 2 steps")


def test_oracle_replays_dropout_masks(device):
    """The Dropout of the SeedNet block drops something (so the mask replay matters)."""
    c = by_id(batchnorm.CASES, "conv_bn_relu_dropout_train")
    res, want = check_case(device, c)
    assert ((res["acts"]["d1"] == 0) & (res["acts"]["r1"] != 0)).any()
    assert oracle(c)["loss"] != pytest.approx(want["loss"], rel=1e-6)


def test_numpy_batchnorm_matches_torch():
    """Training forward (torch momentum = 1 - ONNX momentum), running statistics, backward,
    and the eval forward."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    t = lambda a: torch.tensor(a, dtype=torch.float64, requires_grad=True)  # noqa: E731
    x = rng.standard_normal((3, 4, 2, 5)) * 2 + 1
    g, bb = rng.standard_normal(4), rng.standard_normal(4)
    rm, rv = rng.standard_normal(4), rng.random(4) + 0.5
    dy = rng.standard_normal(x.shape)
    xt, gt, bt = t(x), t(g), t(bb)
    rmt, rvt = torch.tensor(rm), torch.tensor(rv)
    yt = F.batch_norm(xt, rmt, rvt, gt, bt, True, 0.2, 1e-3)
    yt.backward(torch.tensor(dy))
    y, nm, nv, cache = batchnorm_train(x, g, bb, rm, rv, 1e-3, 0.8)
    assert np.allclose(y, yt.detach().numpy())
    assert np.allclose(nm, rmt.numpy()) and np.allclose(nv, rvt.numpy())
    for got, want in zip(batchnorm_backward(dy, cache), (xt.grad, gt.grad, bt.grad)):
        assert np.allclose(got, want.numpy())
    assert np.allclose(batchnorm_eval(x, g, bb, rm, rv, 1e-3),
                       F.batch_norm(torch.tensor(x), torch.tensor(rm), torch.tensor(rv),
                                    torch.tensor(g), torch.tensor(bb), False, 0.1, 1e-3))


def test_small_variance_case_matches_torch():
    """The Conv -> ReLU -> BatchNorm case with variances around eps: its ReLU output's
    per-channel variances span 1e-7 .. 1e-4 (eps 1e-5), and the float64 oracle's step (the
    reference of ``test_case``) equals torch's: loss, the Conv output's gradient, every
    parameter gradient."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    c = by_id(batchnorm.CASES, "conv_relu_bn_small_var")
    want = oracle(c)
    p = {k: torch.tensor(v, requires_grad=True)
         for k, v in params_from_blob(c.graph, c.blob).items()}
    c1 = F.conv2d(torch.tensor(np.float64(c.x)), p["cw"], p["cb"])
    c1.retain_grad()
    r1 = torch.relu(c1)
    var = r1.detach().numpy().var(axis=(0, 2, 3))
    assert var.min() < 1e-6 and var.max() > 1e-4 and np.any((var > 1e-6) & (var < 1e-4))
    eps = c.graph["nodes"][2]["attrs"]["epsilon"]
    b1 = F.batch_norm(r1, p["rm"].detach(), p["rv"].detach(), p["g"], p["bt"], True, 0.1, eps)
    logits = F.linear(torch.flatten(b1, 1), p["fc.w"], p["fc.b"])
    loss = F.nll_loss(torch.log_softmax(logits, 1), torch.tensor(c.labels))
    loss.backward()
    assert want["loss"] == pytest.approx(loss.item(), rel=1e-12)
    assert rel_err(want["dacts"]["c1"], c1.grad.numpy()) <= 1e-10
    for name in ("cw", "cb", "g", "bt", "fc.w", "fc.b"):
        assert rel_err(want["grads"][name], p[name].grad.numpy()) <= 1e-10, name


def test_more_channels_than_one_dispatch_dimension(device):
    """BatchNorm over 70,000 features ([N, C] after a Gemm): its per-channel kernels (sum_x,
    sum_sq, sum_dy or the fused ones) dispatch one workgroup per channel, past
    maxComputeWorkgroupsPerDimension (65,535): the channels fold into z. The statistics and
    gradients of every channel, those past 65,535 included, match the float64 numpy engine."""
    from cases import case
    from conftest import f32, node, rng_for
    from webgpu_trainer.engine.backends.base import MAX_GROUPS
    batch, features, hidden, classes = 4, 8, 70_000, 10
    rng = rng_for("bn_wide")
    nodes = [node("Gemm", ["input", "pre.w"], ["h"], transB=1),
             batchnorm.bn_node("h", "bn_out"),
             node("Relu", ["bn_out"], ["relu_out"]),
             node("Gemm", ["relu_out", "fc.w", "fc.b"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("pre.w", f32(rng.standard_normal((hidden, features))), "param")] + \
        batchnorm.bn_tensors(rng, hidden) + \
        [("fc.w", f32(rng.standard_normal((classes, hidden)) / np.sqrt(hidden)), "param"),
         ("fc.b", f32(rng.standard_normal(classes) * 0.1), "param")]
    c = case("batchnorm/wide_70000", nodes, tensors, f32(rng.standard_normal((batch, features))),
             rng.integers(0, classes, batch), tag="BatchNormalization", acts=("relu_out",),
             dacts=("h",))
    res, want = check_case(device, c)
    for name in ("bn.beta", "bn.gamma"):
        got, ref = res["grads"][name][MAX_GROUPS:], want["grads"][name][MAX_GROUPS:]
        assert np.abs(ref).max() > 0
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


# The batch statistics' kernels alone on a GPU adapter's path: stats_parts -> stats_finish (one
# pass, Builder.BN_STATS_PARTS) and sum_x -> mean_finish -> sum_sq -> var_finish, for values
# far from zero (mean 1000, std 0.5: the squares about a rounded mean), channels of uneven
# parts and a part past the end (M 9 in 4 parts of 3), a constant channel (variance 0 up to
# the f32 mean's rounding), 70,000 channels (past 65,535: folded into the dispatch's z),
# against float64 numpy: mean, invstd and the running statistics (momentum 0.9, the unbiased
# variance).
@pytest.mark.parametrize("outer,c,inner,parts", [(64, 3, 1000, 7), (3, 2, 3, 4), (5, 1, 1, 1),
                                                 (2, 70, 33, 16), (8, 70_000, 1, 2)])
@pytest.mark.parametrize("one_pass", [True, False])
def test_batch_statistics_kernels(device, outer, c, inner, parts, one_pass):
    import types
    from conftest import f32, rel_err, rng_for, run
    from webgpu_trainer.engine.backends.base import groups_1d, groups_per_channel
    from webgpu_trainer.engine.plan import Builder
    rng = rng_for("bn_stats", outer, c, inner, parts)
    x = f32(1000 + 0.5 * rng.standard_normal((outer, c, inner)))
    x[:, -1] = f32(1000.1)  # a constant channel: variance 0 (the last; c 1 keeps none)
    rm, rv = f32(rng.standard_normal(c)), f32(1 + rng.random(c))
    b = Builder(types.SimpleNamespace(dev=device, P=None, G=None, step=None))
    bx, bp = device.buffer(x.nbytes), device.buffer(16 * c)
    save, part = device.buffer(8 * c), device.buffer(16 * c * parts)
    device.write(bx, x.tobytes())
    device.write(bp, np.concatenate([np.ones(c), np.zeros(c), rm, rv]).astype(np.float32).tobytes())
    params = dict(outer=outer, C=c, inner=inner, gamma=0, beta=c, rmean=2 * c, rvar=3 * c,
                  parts=parts, eps=1e-5, momentum=0.9, mask=0, want_dx=0, relu=0, bw=0, bg=0,
                  bpp=0, clip=0, lo=0.0, hi=0.0)
    binds = dict(params=params, x=bx, P=bp, save=save, part=part)
    steps = [("stats_parts", "stats_finish")] if one_pass else \
        [("sum_x", "mean_finish"), ("sum_sq", "var_finish")]

    async def go():
        for sums, finish in steps:
            await b.kernel("batchnorm", sums, groups_per_channel(c, parts), **binds)
            await b.kernel("batchnorm", finish, groups_1d(c), **binds)
        device.submit([device.program(b.current)])
        return (np.frombuffer(await device.read(save), np.float32)[:2 * c],
                np.frombuffer(await device.read(bp), np.float32)[:4 * c])
    got_save, got_p = run(go())
    x64 = x.astype(np.float64)
    mean, var = x64.mean(axis=(0, 2)), x64.var(axis=(0, 2))
    m = outer * inner
    v = slice(0, max(c - 1, 1))  # the varying channels
    assert rel_err(got_save[:c], mean) <= 1e-6
    assert rel_err(got_save[c:][v], 1 / np.sqrt(var[v] + 1e-5)) <= 1e-5
    assert rel_err(got_p[2 * c:3 * c], rm * 0.9 + mean * 0.1) <= 1e-6
    assert rel_err(got_p[3 * c:][v], (rv * 0.9 + var * m / max(m - 1, 1) * 0.1)[v]) <= 1e-5
    if c > 1:  # the constant channel: a variance of at most the f32 mean's rounding
        assert abs(got_p[-1] - f32(rv[-1] * 0.9)) <= 1e-7
        assert got_save[-1] * np.sqrt(1e-5) >= 0.99


# Channels far from zero on the GPU adapters' three paths (one pass, the four part kernels, and
# forward_fused when a channel is one part), 131,072 elements a channel: the f32 sum alone puts
# the mean of a constant 1e6 + 0.3 some 0.19 off (and its normalized outputs at -1, not 0); the
# deviations' sum must correct it. Against float64: the mean within 1 ulp of its f32 value,
# a constant channel normalized to exactly 0 with invstd 1/sqrt(eps), invstd of channels at
# 1e4 with std 0.1, -2e5 with std 0.05 and 1e22 with std 1e16 (the squared deviations' sum
# overflows f32 unless divided first) within 1e-5, the running statistics (momentum 0.9, the
# unbiased variance) within 1e-5. The parts buffer has the size ops/batchnorm._part gives.
@pytest.mark.parametrize("path", ["one_pass", "parts", "fused"])
def test_batch_statistics_far_from_zero(device, path):
    import types
    from conftest import f32, rel_err, rng_for, run
    from webgpu_trainer.engine.backends.base import groups_1d, groups_per_channel
    from webgpu_trainer.engine.plan import Builder
    outer, c, inner = 32, 5, 4096
    parts = 1 if path == "fused" else 16
    rng = rng_for("bn_far", path)
    x = np.empty((outer, c, inner), np.float32)
    x[:, 0] = f32(1e6 + 0.3)
    x[:, 1] = f32(1e4 + 0.1 * rng.standard_normal((outer, inner)))
    x[:, 2] = f32(3e7 + 1)
    x[:, 3] = f32(-2e5 + 0.05 * rng.standard_normal((outer, inner)))
    x[:, 4] = f32(1e22 + 1e16 * rng.standard_normal((outer, inner)))
    b = Builder(types.SimpleNamespace(dev=device, P=None, G=None, step=None))
    bx, bp, bo = device.buffer(x.nbytes), device.buffer(16 * c), device.buffer(x.nbytes)
    save = device.buffer(8 * c)
    part = device.buffer(4 * (4 if path == "one_pass" else 2) * c * parts)
    device.write(bx, x.tobytes())
    device.write(bp, np.concatenate([np.ones(c), np.zeros(c), np.zeros(c), np.ones(c)])
                 .astype(np.float32).tobytes())
    params = dict(outer=outer, C=c, inner=inner, gamma=0, beta=c, rmean=2 * c, rvar=3 * c,
                  parts=parts, eps=1e-5, momentum=0.9, mask=0, want_dx=0, relu=0, bw=0, bg=0,
                  bpp=0, clip=0, lo=0.0, hi=0.0)
    binds = dict(params=params, x=bx, P=bp, save=save, part=part, out=bo)
    steps = {"one_pass": ["stats_parts", "stats_finish"],
             "parts": ["sum_x", "mean_finish", "sum_sq", "var_finish"],
             "fused": ["forward_fused"]}[path]

    async def go():
        for entry in steps:
            per_channel = entry in ("stats_parts", "sum_x", "sum_sq", "forward_fused")
            await b.kernel("batchnorm", entry, groups_per_channel(c, parts) if per_channel
                           else groups_1d(c), **binds)
        if path != "fused":
            await b.kernel("batchnorm", "normalize", b.elementwise_groups(x.size), **binds)
        device.submit([device.program(b.current)])
        return (np.frombuffer(await device.read(save), np.float32)[:2 * c],
                np.frombuffer(await device.read(bo), np.float32).reshape(x.shape),
                np.frombuffer(await device.read(bp), np.float32)[2 * c:4 * c])
    got_save, out, running = run(go())
    x64 = x.astype(np.float64)
    mean, var = x64.mean(axis=(0, 2)), x64.var(axis=(0, 2))
    ulp = np.spacing(np.abs(mean).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(got_save[:c] - mean) <= ulp), (got_save[:c], mean)
    for k in (0, 2):  # the constant channels
        assert np.all(out[:, k] == 0), (k, np.abs(out[:, k]).max())
        assert abs(got_save[c + k] * np.sqrt(1e-5) - 1) <= 1e-3
    for k in (1, 3, 4):
        assert abs(got_save[c + k] * np.sqrt(var[k] + 1e-5) - 1) <= 1e-5, (k, got_save[c + k])
    m = outer * inner
    assert rel_err(running[:c], 0.1 * mean) <= 1e-6
    want_rv = 0.9 + 0.1 * var * m / (m - 1)
    assert np.all(np.abs(running[c:] / want_rv - 1) <= 1e-5), (running[c:], want_rv)

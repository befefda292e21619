"""A Clip of constant bounds after a BatchNormalization runs inside that layer
(``fusion.clips_after``, ``Builder.FUSE_CLIP``; ReLU6 in a MobileNet): the layer writes the
Clip's output, its backward reads the Clip's output gradient kept where lo <= y <= hi. Against
the op-by-op plan on both kernel paths: the same bits (the cases of tests/cases/batchnorm.py,
bounds hit exactly included), one dispatch fewer each way; where the fusion must not happen.
The cases against float64: tests/test_ops_batchnorm.py."""

import numpy as np
import pytest

from cases import batchnorm, ids
from conftest import f32, head, node, run
from cases import case
from harness import builder_patch, one_step
from webgpu_trainer.engine.tools import parity

pytestmark = pytest.mark.every_backend


def _step(device, c, **flags):
    with builder_patch({**c.patch, **flags}):
        return run(one_step(device, c.graph, c.blob, c.x, c.labels, train=c.train,
                            keep=(*c.acts, *c.dacts)))


def _entries(dispatches) -> list:
    return [d[0][2] for d in dispatches]


@pytest.mark.parametrize("tiled", [False, True], ids=["cpu_path", "gpu_path"])
@pytest.mark.parametrize("c", batchnorm.CLIP_CASES, ids=ids(batchnorm.CLIP_CASES))
def test_same_bits_fewer_dispatches(device, c, tiled):
    on = _step(device, c, TILED=tiled)
    off = _step(device, c, TILED=tiled, FUSE_CLIP=False)
    plan_on, plan_off = on["plan"], off["plan"]
    assert [n["op_type"] for n, _, _ in plan_on.clip_fused.values()] == ["Clip"]
    assert plan_off.clip_fused == {}
    for name in c.acts:
        assert np.array_equal(on["acts"][name], off["acts"][name]), name
    for name in c.dacts:
        assert np.array_equal(on["dacts"][name], off["dacts"][name]), name
    assert "bn_out" not in plan_on.grads and "bn_out" in plan_off.grads
    if c.train:
        assert on["loss"] == off["loss"]
        for name, g in off["grads"].items():
            assert np.array_equal(on["grads"][name], g), name
        assert len(plan_on.bwd) == len(plan_off.bwd) - 1
        assert not any("unary" in e for e in _entries(plan_on.bwd))
    phase = "fwd_train" if c.train else "fwd_eval"
    assert len(getattr(plan_on, phase)) == len(getattr(plan_off, phase)) - 1
    assert not any("unary" in e for e in _entries(getattr(plan_on, phase)))


def _model(second_reader=False, bound_weight=False, conv_clip=False, relu_before=False,
           relu_after=False, clip_twice=False):
    """Gemm -> BatchNorm -> Clip(0, 6) -> head, or a variant the fusion must leave alone
    (``second_reader``, ``bound_weight``, ``conv_clip``) or still takes (an in-place ReLU
    before the BatchNorm or after the Clip, the Clip's output read twice)."""
    rng = np.random.default_rng(7)
    k = 4
    nodes = [node("Gemm", ["input", "pre.w"], ["pre_out"], transB=1)]
    tensors = [("pre.w", f32(rng.standard_normal((k, 5))), "param")]
    src = "pre_out"
    if relu_before:
        nodes.append(node("Relu", ["pre_out"], ["r"]))
        src = "r"
    if not conv_clip:
        nodes.append(batchnorm.bn_node(src, "bn_out"))
        tensors += [("bn.gamma", f32(2 + rng.random(k)), "param"),
                    ("bn.beta", f32(rng.standard_normal(k)), "param"),
                    ("bn.mean", f32(np.zeros(k)), "buffer"), ("bn.var", f32(np.ones(k)), "buffer")]
        src = "bn_out"
    consts = {"lo": {"dtype": "float32", "shape": [], "values": [0.0]}}
    if bound_weight:
        tensors.append(("hi", f32(np.array(6.0)), "param"))
    else:
        consts["hi"] = {"dtype": "float32", "shape": [], "values": [6.0]}
    nodes.append(node("Clip", [src, "lo", "hi"], ["clip_out"]))
    last = "clip_out"
    if second_reader:
        nodes.append(node("Add", ["clip_out", src], ["sum"]))
        last = "sum"
    if relu_after:
        nodes.append(node("Relu", ["clip_out"], ["ra"]))
        last = "ra"
    if clip_twice:
        nodes += [node("Mul", ["clip_out", "clip_out"], ["sq"]),
                  node("Add", ["sq", "clip_out"], ["sum"])]
        last = "sum"
    hn, ht = head(last, k, 3, rng)
    return case("clip/variant", nodes + hn, tensors + ht, f32(rng.standard_normal((6, 5))),
                rng.integers(0, 3, 6), constants=consts, acts=(last,))


@pytest.mark.parametrize("variant", [
    dict(second_reader=True), dict(bound_weight=True), dict(conv_clip=True)],
    ids=["bn_output_read_twice", "bound_is_a_weight", "no_batchnorm_before"])
def test_not_fused(device, variant):
    c = _model(**variant)
    res = _step(device, c, TILED=True)
    assert res["plan"].clip_fused == {}
    assert any("unary" in e for e in _entries(res["plan"].fwd_train))
    assert any("unary" in e for e in _entries(res["plan"].bwd))


@pytest.mark.parametrize("tiled", [False, True], ids=["cpu_path", "gpu_path"])
@pytest.mark.parametrize("variant", [
    {}, dict(relu_before=True), dict(relu_after=True), dict(clip_twice=True)],
    ids=["plain", "relu_before_bn", "relu_after_clip", "clip_output_read_twice"])
def test_fused_variants_train_like_unfused(device, variant, tiled):
    """The plain model and its neighbours that still fuse (the variants above differ from the
    plain one in one thing each): the same loss and gradient bits as unfused."""
    c = _model(**variant)
    on = _step(device, c, TILED=tiled)
    off = _step(device, c, TILED=tiled, FUSE_CLIP=False)
    assert len(on["plan"].clip_fused) == 1
    assert on["loss"] == off["loss"]
    for name in c.acts:
        assert np.array_equal(on["acts"][name], off["acts"][name]), name
    for name, g in off["grads"].items():
        assert np.array_equal(on["grads"][name], g), name


def test_kept_gradient_is_not_fused_away(device):
    """A BatchNorm output whose gradient the caller names to keep (parity.load's keep_grads,
    tests/golden.py's dacts) stays unfused (found by review)."""
    c = batchnorm.CLIP_CASES[1]
    plan = run(parity.load(device, c.graph, c.blob, len(c.labels),
                           np.ascontiguousarray(c.x, "<f4").tobytes(),
                           np.asarray(c.labels, "<u4").tobytes(), loss=c.loss,
                           keep_grads={"bn_out"}, keep_acts=set(c.acts)))
    assert plan.clip_fused == {} and "bn_out" in plan.grads

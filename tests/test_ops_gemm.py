"""Gemm on the native device against the float64 numpy engine (the cases of tests/cases/gemm.py),
and the numpy engine against torch (skipped without torch)."""

import numpy as np
import pytest

from cases import gemm, ids
from harness import check_case
from webgpu_trainer.cpu.gemm import gemm as np_gemm
from webgpu_trainer.cpu.gemm import gemm_backward

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", gemm.CASES, ids=ids(gemm.CASES))
def test_case(device, case):
    check_case(device, case)


def test_numpy_gemm_matches_torch():
    """transA, transB, alpha, beta and a [M, 1] C: forward and the three gradients."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    t = lambda a: torch.tensor(a, dtype=torch.float64, requires_grad=True)  # noqa: E731
    a, bm, c = rng.standard_normal((5, 3)), rng.standard_normal((4, 5)), \
        rng.standard_normal((3, 1))
    dy = rng.standard_normal((3, 4))
    at, bmt, ct = t(a), t(bm), t(c)
    yt = 0.5 * at.T @ bmt.T + 2.0 * ct
    yt.backward(torch.tensor(dy))
    assert np.allclose(np_gemm(a, bm, c, 0.5, 2.0, 1, 1), yt.detach().numpy())
    for got, want in zip(gemm_backward(a, bm, dy, c, 0.5, 2.0, 1, 1),
                         (at.grad, bmt.grad, ct.grad)):
        assert np.allclose(got, want.numpy())



def _wide_hidden(hidden):
    """input [4, 8] -> Gemm (tested: 8 -> ``hidden``) -> Relu -> Gemm (hidden -> 10) ->
    LogSoftmax: a hidden layer wider than one dispatch dimension (the 10 classes keep the loss
    and the labels small)."""
    from conftest import f32, node, rng_for
    from cases import case
    batch, features, classes = 4, 8, 10
    rng = rng_for("gemm_wide", hidden)
    w = f32(rng.standard_normal((hidden, features)) / np.sqrt(features))
    b = f32(rng.standard_normal(hidden) * 0.1)
    w2 = f32(rng.standard_normal((classes, hidden)) / np.sqrt(hidden))
    b2 = f32(rng.standard_normal(classes) * 0.1)
    nodes = [node("Gemm", ["input", "w", "b"], ["h"], transB=1),
             node("Relu", ["h"], ["r"]),
             node("Gemm", ["r", "w2", "b2"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("w", w, "param"), ("b", b, "param"), ("w2", w2, "param"), ("b2", b2, "param")]
    x = f32(rng.standard_normal((batch, features)))
    return case(f"gemm/wide_hidden_{hidden}", nodes, tensors, x,
                rng.integers(0, classes, batch), tag="Gemm", acts=("r", "logits"),
                dacts=("h", "logits"))


def test_more_channels_than_one_dispatch_dimension(device):
    """Gemm 8 -> 70,000 outputs: the bias gradient (channel_sum, one workgroup per output
    channel) needs more workgroups than maxComputeWorkgroupsPerDimension (65,535), so its
    channels fold into z (groups_per_channel). Before, the dispatch of (70000, 1, 1) workgroups
    was refused by validation and nothing of the step ran; now every gradient matches the
    float64 numpy engine, dB over all 70,000 channels (those past 65,535 included)."""
    from webgpu_trainer.engine.backends.base import MAX_GROUPS, groups_per_channel

    assert groups_per_channel(70_000, 1) == (35_000, 1, 2)
    assert groups_per_channel(MAX_GROUPS, 4) == (MAX_GROUPS, 4, 1)
    res, want = check_case(device, _wide_hidden(70_000))
    grad = res["grads"]["b"]
    assert grad.shape == (70_000,) and np.abs(grad[MAX_GROUPS:]).max() > 0
    np.testing.assert_allclose(grad[MAX_GROUPS:], want["grads"]["b"][MAX_GROUPS:], rtol=1e-4,
                               atol=1e-4 * np.abs(want["grads"]["b"]).max())

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
    from conftest import rng_for
    from cases.gemm import two_layers
    return two_layers(f"gemm/wide_hidden_{hidden}", rng_for("gemm_wide", hidden), 4, 8, hidden,
                      10)


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


def _wide_classes(classes, loss, batch=3):
    """input [batch, 8] -> Gemm (8 -> ``classes``) -> LogSoftmax, trained with ``loss``: the
    class axis itself is wider than one dispatch dimension. Class ``classes - 2`` wins row 1 by
    far (its label: a hit past 65,535); rows 0 and 2 are labelled 5 and ``classes - 1``."""
    from conftest import f32, node, rng_for
    from cases import case
    features = 8
    rng = rng_for("gemm_wide_classes", classes, batch)
    w = f32(rng.standard_normal((classes, features)) / np.sqrt(features))
    b = f32(rng.standard_normal(classes) * 0.1)
    x = f32(rng.standard_normal((batch, features)))
    w[classes - 2] = 20 * x[1] / np.square(x[1]).sum()  # logit of class C - 2 in row 1: 20
    nodes = [node("Gemm", ["input", "w", "b"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    labels = rng.integers(0, classes, batch)
    labels[:3] = [5, classes - 2, classes - 1]
    return case(f"gemm/wide_classes_{classes}_{loss['loss']}_{batch}", nodes,
                [("w", w, "param"), ("b", b, "param")], x, labels, tag="Gemm",
                acts=("logits",), dacts=("logits",), loss=loss)


WEIGHTS = np.linspace(0.5, 2.0, 1500).tolist()


@pytest.mark.parametrize("loss,classes,batch", [
    ({"loss": "nll"}, 70_000, 3),
    ({"loss": "cross_entropy", "label_smoothing": 0.1}, 70_000, 3),
    ({"loss": "mse"}, 70_000, 3),
    ({"loss": "bce_with_logits"}, 70_000, 3),
    ({"loss": "nll"}, 70_000, 256),
    ({"loss": "cross_entropy", "label_smoothing": 0.2, "weight": WEIGHTS}, 1500, 300)],
    ids=lambda v: v["loss"] if isinstance(v, dict) else str(v))
def test_more_classes_than_lavapipe_loops(device, loss, classes, batch):
    """Gemm straight to many classes, LogSoftmax and the loss: the loss, the accuracy (row 1's
    label, class C - 2, is its argmax), the log-probabilities and every gradient match the
    float64 numpy engine. Before, one thread looped over a row's C classes (its argmax) and
    over the batch's gradient, and lavapipe, which caps a shader's loop iterations at 65,535
    in all, cut the batch's reduction short: from 65,535 classes (or B x C past ~8 M) the loss
    and the gradients were wrong. Rows of ops.losses.WIDE classes or more now take one
    workgroup each (the last case: class weights, label smoothing, 300 rows of 1,500)."""
    res, want = check_case(device, _wide_classes(classes, loss, batch))
    if batch == 3:
        assert res["acc"] == pytest.approx(1 / 3) and want["acc"] == pytest.approx(1 / 3)
    assert res["loss"] == pytest.approx(want["loss"], rel=1e-5)

"""The cross_entropy head's LogSoftmax backward inside the loss's dispatch (plan.Plan.build,
ops/losses.nll_loss ``through_log_softmax``, shaders/loss.wgsl ``nll`` flag 8): the fused step
gives the same bits as the LogSoftmax backward it replaces where that kernel sums each row in
order (CPU adapters, rows of < 32 classes), one dispatch fewer; where it is not taken (no
upstream gradient, wide rows, CPU adapters' workgroup rows). The values against the float64
numpy engine: tests/test_ops_losses.py (CPU adapters' kernels) and tests/test_ops_tiled.py's
losses family (GPU adapters' kernels, every row length fused)."""

import numpy as np
import pytest

from cases import by_id, losses
from conftest import run
from harness import builder_patch, one_step

# The plan's LogSoftmax head (cross_entropy; after the model's own LogSoftmax too, whose
# backward then stays), and the model's own final one (nll: the loss then writes the gradients
# of the LogSoftmax's input and of its output).
FUSED = ["ce_mean_64x10", "ce_sum_weight_ls_64x10", "auto_ls_1x7", "ce_mean_weight_ls_7x2",
         "one_gemm_cross_entropy", "ce_sum_weight_ls_after_log_softmax", "auto_after_log_softmax",
         "nll_mean_weight_after_log_softmax"]


def _step(device, case, fuse, tiled=False):
    with builder_patch({"FUSE_LOSS_HEAD": fuse, "TILED": tiled}):
        return run(one_step(device, case.graph, case.blob, case.x, case.labels, loss=case.loss))


@pytest.mark.parametrize("case_id", FUSED)
def test_fused_head_gives_the_same_bits_with_one_dispatch_fewer(device, case_id):
    case = by_id(losses.CASES, case_id)
    on, off = _step(device, case, True), _step(device, case, False)
    assert on["plan"].loss_through is not None and off["plan"].loss_through is None
    assert len(on["plan"].bwd) == len(off["plan"].bwd) - 1
    assert len(on["plan"].loss) == len(off["plan"].loss)
    assert on["loss"] == off["loss"] and on["acc"] == off["acc"]
    head = off["plan"].head_node is not None
    assert set(off["dacts"]) - set(on["dacts"]) == ({"loss/log_softmax"} if head else set())
    for name, g in on["dacts"].items():  # the model's activations' gradients, its output's too
        assert np.array_equal(g, off["dacts"][name]), f"d loss / d {name}"
    for name, g in off["grads"].items():
        assert np.array_equal(on["grads"][name], g), name


def test_gpu_kernels_fuse_rows_the_cpu_kernels_do_not(device):
    """7 x 33: the CPU adapters' LogSoftmax backward takes a workgroup a row there (its sums
    in another order), so only the GPU adapters' plan fuses; both within float32 rounding."""
    case = by_id(losses.CASES, "ce_mean_ls_7x33")
    cpu, gpu = _step(device, case, True), _step(device, case, True, tiled=True)
    assert cpu["plan"].loss_through is None and gpu["plan"].loss_through is not None
    out = case.graph["outputs"][0]["name"]
    np.testing.assert_allclose(gpu["dacts"][out], cpu["dacts"][out], rtol=0, atol=1e-6)


@pytest.mark.parametrize("case_id", ["ce_sum_ls_5x1030", "mse_mean_7x2", "nll_mean_7x2",
                                     "ce_mean_64x10"])
def test_not_fused(device, case_id, monkeypatch):
    """Wide rows (the two-dispatch loss), a loss without the head, NLL of the raw output (no
    LogSoftmax), more values than the one workgroup takes (``FUSED_VALUES``, lowered here)."""
    from webgpu_trainer.engine.ops import losses as loss_ops
    monkeypatch.setattr(loss_ops, "FUSED_VALUES", 639)
    case = by_id(losses.CASES, case_id)
    res = _step(device, case, True, tiled=True)
    assert res["plan"].loss_through is None


def _tiled_step(device, case, softmax):
    with builder_patch({"FUSE_LOSS_SOFTMAX": softmax, "TILED": True}):
        return run(one_step(device, case.graph, case.blob, case.x, case.labels, loss=case.loss))


# GPU adapters' kernels, rows of 10 classes: several nll workgroups (64 x 10, with class
# weights and label smoothing), one (7 x 10), after the model's own LogSoftmax
SCORES = ["ce_mean_64x10", "ce_sum_weight_ls_64x10", "cross_entropy_on_raw_logits",
          "ce_sum_weight_ls_after_log_softmax", "auto_ls_64x10"]


@pytest.mark.parametrize("case_id", SCORES)
def test_head_forward_in_the_loss_gives_the_same_bits(device, case_id):
    """GPU adapters: the head's LogSoftmax forward inside nll (``FUSE_LOSS_SOFTMAX``, loss.wgsl
    FROM_SCORES) writes the log-probabilities softmax.wgsl forward_seg writes, and the step's
    loss, accuracy and every gradient keep their bits, one dispatch fewer."""
    case = by_id(losses.CASES, case_id)
    on, off = _tiled_step(device, case, True), _tiled_step(device, case, False)
    assert len(on["plan"].loss) == len(off["plan"].loss) - 1 == 1
    assert on["loss"] == off["loss"] and on["acc"] == off["acc"]
    assert np.array_equal(on["acts"]["loss/log_softmax"], off["acts"]["loss/log_softmax"])
    for name, g in off["dacts"].items():
        assert np.array_equal(on["dacts"][name], g), f"d loss / d {name}"
    for name, g in off["grads"].items():
        assert np.array_equal(on["grads"][name], g), name


@pytest.mark.parametrize("case_id", ["ce_mean_ls_7x33", "auto_ls_1x7", "nll_mean_7x2"])
def test_head_forward_stays_where_rows_do_not_fit(device, case_id):
    """33 classes (more than ``FROM_SCORES_MAX``), 7 (below forward_seg's 8: another kernel,
    another order), NLL of the raw output (no head): the loss keeps its own dispatches."""
    case = by_id(losses.CASES, case_id)
    on, off = _tiled_step(device, case, True), _tiled_step(device, case, False)
    assert len(on["plan"].loss) == len(off["plan"].loss)

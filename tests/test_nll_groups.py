"""NLLLoss as several workgroups on GPU adapters (ops/losses.nll_groups, loss.wgsl ``nll``,
``Builder.NLL_WIDE``): each sums the whole batch as the one workgroup does and writes its share
of dx, so the loss, the accuracy and every gradient keep their bits against one workgroup, on
every cross_entropy / nll case of tests/cases/losses.py at batch 64 x 10 classes (640 values of
dx; through the head's LogSoftmax or not, weighted, smoothed, summed), with the group cap also
lowered to 2 so that threads stride. The values against float64:
tests/test_ops_tiled.py's losses family."""

import numpy as np
import pytest

from cases import losses
from conftest import run
from harness import builder_patch, one_step
from webgpu_trainer.engine.ops import losses as loss_ops

pytestmark = pytest.mark.every_backend

NLL = [c for c in losses.CASES if "64x10" in c.id
       and (c.loss is None or c.loss.get("loss") in ("cross_entropy", "nll"))]


def _step(device, case, wide):
    with builder_patch({"TILED": True, "NLL_WIDE": wide}):
        return run(one_step(device, case.graph, case.blob, case.x, case.labels, loss=case.loss))


def _nll_groups(plan) -> list:
    return [d[2][0] for d in plan.loss if d[0][2].split(":")[1] == "nll"]


@pytest.mark.parametrize("cap", [64, 2])
@pytest.mark.parametrize("case", NLL, ids=lambda c: c.name)
def test_same_bits_as_one_workgroup(device, case, cap, monkeypatch):
    monkeypatch.setattr(loss_ops, "NLL_GROUPS", cap)
    on, off = _step(device, case, True), _step(device, case, False)
    assert _nll_groups(on["plan"]) == [min(cap, 3)]  # 640 values of dx: 3 workgroups
    assert _nll_groups(off["plan"]) == [1]
    assert on["loss"] == off["loss"] and on["acc"] == off["acc"]
    for name, g in off["dacts"].items():
        assert np.array_equal(on["dacts"][name], g), f"d loss / d {name}"
    for name, g in off["grads"].items():
        assert np.array_equal(on["grads"][name], g), name


def test_groups_rule():
    class B:
        tiled, NLL_WIDE = True, True
    b = B()
    assert loss_ops.nll_groups(b, 64, 10) == 3 and loss_ops.nll_groups(b, 1000, 10) == 40
    assert loss_ops.nll_groups(b, 1, 7) == 1
    assert loss_ops.nll_groups(b, 100000, 10) == loss_ops.NLL_GROUPS
    b.tiled = False
    assert loss_ops.nll_groups(b, 1000, 10) == 1
    b.tiled, b.NLL_WIDE = True, False
    assert loss_ops.nll_groups(b, 1000, 10) == 1

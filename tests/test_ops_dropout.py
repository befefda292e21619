"""Dropout on the native device against the float64 numpy engine (tests/cases/dropout.py), and
its masks over steps and in eval mode."""

import numpy as np
import pytest

from cases import dropout, ids
from conftest import run
from harness import check_case, one_step

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", dropout.CASES, ids=ids(dropout.CASES))
def test_case(device, case):
    check_case(device, case)


@pytest.mark.parametrize("case", dropout.CASES[1:], ids=ids(dropout.CASES[1:]))
def test_masks_follow_seed_and_step(device, case):
    """Same (seed, step) -> same mask; another step -> another mask; eval -> identity."""
    res, _ = check_case(device, case)
    d, keep, plan = res["acts"]["d"], res["acts"]["d"] != 0, res["plan"]
    c = case

    def again(**kw):
        return run(one_step(device, c.graph, c.blob, c.x, c.labels, plan=plan, **kw))["acts"]

    assert np.array_equal(again(step=c.step, seed=c.seed)["d"], d)
    assert not np.array_equal(again(step=c.step + 1, seed=c.seed)["d"] != 0, keep)
    ev = again(train=False)
    assert np.array_equal(ev["d"], ev["h"])

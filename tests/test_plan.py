"""The plan between the ops (views, in-place ReLU, gradients summed over several uses) on the
native device against the float64 numpy engine (tests/cases/plan.py)."""

import pytest

from cases import ids, plan
from harness import check_case

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", plan.CASES, ids=ids(plan.CASES))
def test_case(device, case):
    check_case(device, case)

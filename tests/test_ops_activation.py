"""Relu on the native device against the float64 numpy engine (tests/cases/activation.py)."""

import pytest

from cases import activation, ids
from harness import check_case

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", activation.CASES, ids=ids(activation.CASES))
def test_case(device, case):
    check_case(device, case)

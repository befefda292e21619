"""Flatten, Identity, Reshape, Squeeze, Unsqueeze on the native device against the float64 numpy
engine (tests/cases/views.py)."""

import pytest

from cases import ids, views
from harness import check_case

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", views.CASES, ids=ids(views.CASES))
def test_case(device, case):
    check_case(device, case)

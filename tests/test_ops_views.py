"""Flatten, Identity, Reshape, Squeeze, Unsqueeze on the native device against the float64 numpy
engine (tests/cases/views.py)."""

import pytest

from cases import ids, views
from harness import check_case
from webgpu_trainer.engine.errors import GraphError

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", views.CASES, ids=ids(views.CASES))
def test_case(device, case):
    check_case(device, case)


@pytest.mark.xfail(strict=True, raises=GraphError,
                   reason="engine/ops/views.py: infer of a one-input Unsqueeze (opset < 13, "
                          "axes as an attribute) reads the missing axes input")
@pytest.mark.parametrize("case", views.BROKEN, ids=ids(views.BROKEN))
def test_known_broken(device, case):
    check_case(device, case)

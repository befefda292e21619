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

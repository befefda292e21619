"""Conv on the native device against the float64 numpy engine (the cases of tests/cases/conv.py:
strides, asymmetric pads, dilations, groups, depthwise, sizes 1 / 7 / 33), and the numpy engine
against torch (skipped without torch)."""

import numpy as np
import pytest

from cases import conv, ids
from harness import check_case
from webgpu_trainer.cpu.conv import conv2d, conv2d_backward

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", conv.CASES, ids=ids(conv.CASES))
def test_case(device, case):
    check_case(device, case)


def test_numpy_conv_matches_torch():
    """Asymmetric pads, strides, dilations, groups: forward and the three gradients."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    t = lambda a: torch.tensor(a, dtype=torch.float64, requires_grad=True)  # noqa: E731
    x, w, b = rng.standard_normal((2, 4, 9, 8)), rng.standard_normal((6, 2, 3, 2)), \
        rng.standard_normal(6)
    pads, strides, dil = [1, 0, 2, 1], [2, 1], [1, 2]
    dy = rng.standard_normal(conv2d(x, w, b, pads, strides, dil, 2).shape)
    xt, wt, bt = t(x), t(w), t(b)
    yt = F.conv2d(F.pad(xt, (pads[1], pads[3], pads[0], pads[2])), wt, bt, strides, 0, dil, 2)
    yt.backward(torch.tensor(dy))
    assert np.allclose(conv2d(x, w, b, pads, strides, dil, 2), yt.detach().numpy())
    for got, want in zip(conv2d_backward(x, w, dy, pads, strides, dil, 2),
                         (xt.grad, wt.grad, bt.grad)):
        assert np.allclose(got, want.numpy())

"""The numpy engine's fast paths (issue 20 item 5b) against independent references:

- stride-1 convolutions over wide rows, all groups in one product (cpu/conv.py
  ``_wide_windows`` / ``_backward_wide``): forward and the three gradients = torch's conv2d in
  float64 for asymmetric pads, dilations, groups (depthwise included) and non-square kernels,
  with the forward's im2col reused and without, the input gradient's w^T dy over all images
  at once and one image at a time;
- the branch-free ReLU gradient: the bits of ``np.where(x > 0, dy, 0)``, non-finite values
  and signed zeros included, on contiguous and strided arrays;
- the optimizers' update per run of trainable elements: a mask with gaps gives, bit for bit,
  the update of the trainable elements packed into one vector, and the masked elements (BatchNorm
  running statistics, padding) and their state are left alone;
- glibc takes cpu/heap.py's thresholds.
"""

import numpy as np
import pytest

from webgpu_trainer.cpu import conv, optim
from webgpu_trainer.cpu.activation import relu_backward
from webgpu_trainer.cpu.conv import conv2d, conv2d_backward


@pytest.mark.parametrize("pads, dil, group, kernel, out", [
    ([0, 0, 0, 0], [1, 1], 1, (3, 3), 8),
    ([1, 0, 2, 1], [1, 2], 2, (3, 2), 8),
    ([0, 3, 1, 0], [2, 1], 1, (1, 4), 8),
    ([2, 2, 2, 2], [1, 1], 4, (1, 1), 8),
    ([1, 1, 1, 1], [1, 1], 4, (3, 3), 4),  # depthwise: one output channel a group
    ([0, 2, 1, 0], [2, 2], 2, (2, 3), 2),  # one output channel a group, two inputs
])
@pytest.mark.parametrize("dcols_bytes", [1 << 20, 1])  # all images at once; one at a time
def test_stride1_conv_matches_torch(pads, dil, group, kernel, out, dcols_bytes, monkeypatch):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    monkeypatch.setattr(conv, "DCOLS_BYTES", dcols_bytes)
    rng = np.random.default_rng(3)
    x, w, b = rng.standard_normal((2, 4, 9, 8)), \
        rng.standard_normal((out, 4 // group) + kernel), rng.standard_normal(out)
    keep = []
    y = conv2d(x, w, b, pads, [1, 1], dil, group, keep=keep)
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    yt = F.conv2d(F.pad(xt, (pads[1], pads[3], pads[0], pads[2])), wt, bt, 1, 0, dil, group)
    dy = rng.standard_normal(y.shape)
    yt.backward(torch.tensor(dy))
    assert y.shape == tuple(yt.shape)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    for cols in (keep, None):
        got = conv2d_backward(x, w, dy, pads, [1, 1], dil, group, cols=cols)
        for g, want in zip(got, (xt.grad, wt.grad, bt.grad)):
            np.testing.assert_allclose(g, want.numpy(), rtol=1e-10, atol=1e-12)
    dx, dw, _ = conv2d_backward(x, w, dy, pads, [1, 1], dil, group, cols=keep, need_dx=False)
    assert dx is None
    np.testing.assert_allclose(dw, wt.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_backward_is_where(dtype):
    x = np.array([-1, 0, -0.0, 1, np.nan, np.inf, -np.inf, 2, -3, 1e-38], dtype)
    dy = np.array([np.nan, np.inf, 1, -2, 5, -0.0, 7, np.nan, -np.inf, -0.0], dtype)
    want = np.where(x > 0, dy, 0)
    got = relu_backward(x, dy)
    assert got.dtype == dtype and got.view(np.uint8).tobytes() == want.view(np.uint8).tobytes()
    rng = np.random.default_rng(0)
    xs, ds = (rng.standard_normal((3, 4, 6)).astype(dtype)[:, ::2, 1:] for _ in range(2))
    np.testing.assert_array_equal(relu_backward(xs, ds), np.where(xs > 0, ds, 0))


@pytest.mark.parametrize("name, kwargs", [
    ("adam", {}), ("adam", {"amsgrad": True, "weight_decay": 0.01}), ("adamw", {}),
    ("sgd", {"momentum": 0.9, "nesterov": True}), ("rmsprop", {"centered": True}),
    ("adagrad", {}), ("adadelta", {}), ("adam", {"clip_grad_norm": 0.5}),
])
def test_optimizer_runs_match_packed(name, kwargs):
    n = 300
    mask = np.ones(n, np.float32)
    mask[0], mask[40:47], mask[200:260], mask[-2:] = 0, 0, 0, 0
    keep = np.flatnonzero(mask)
    gapped, packed = optim.make(name, 1e-2, **kwargs), optim.make(name, 1e-2, **kwargs)
    gapped.attach_flat(n, mask)
    packed.attach_flat(keep.size, np.ones(keep.size, np.float32))
    assert [(r.start, r.stop) for r in gapped.runs] == [(1, 40), (47, 200), (260, 298)]
    rng = np.random.default_rng(1)
    P = rng.standard_normal(n).astype(np.float32)
    Q, frozen = P[keep].copy(), P[mask == 0].copy()
    for t in range(1, 6):
        G = rng.standard_normal(n).astype(np.float32)
        gapped.step(P, G, t, 1e-2)
        packed.step(Q, G[keep].copy(), t, 1e-2)
    assert P[keep].tobytes() == Q.tobytes()
    assert P[mask == 0].tobytes() == frozen.tobytes()
    for a, b, init in zip(gapped.slots, packed.slots, gapped.state_init):
        if a is not None:
            assert a[keep].tobytes() == b.tobytes()
            assert (a[mask == 0] == np.float32(init)).all()


def test_heap_retain_freed_once():
    """glibc accepts the thresholds (this project's Linux machines); a second call does not
    call mallopt again and answers the same."""
    import platform

    from webgpu_trainer.cpu import heap
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only")
    assert heap.retain_freed() is True
    assert heap.retain_freed() is True and heap._done is True

"""LayerNormalization on the native device against the float64 numpy engine
(tests/cases/layernorm.py), what is refused, and the numpy engine against literal values and
torch (skipped without torch)."""

import numpy as np
import pytest

from cases import ids, layernorm
from cases.blocks import gemm_to
from conftest import f32, make_graph, node, rng_for
from harness import check_case
from webgpu_trainer.cpu import KERNELS
from webgpu_trainer.cpu import engine as cpu_engine
from webgpu_trainer.cpu.layernorm import layernorm as np_layernorm
from webgpu_trainer.cpu.layernorm import layernorm_backward

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", layernorm.CASES, ids=ids(layernorm.CASES))
def test_case(device, case):
    check_case(device, case)


def test_scale_not_the_normalised_shape_refused():
    """GraphError for a Scale that is not (a trailing part of) the normalised shape."""
    from webgpu_trainer.engine.graph import Graph, GraphError
    nodes, tensors, consts = gemm_to(rng_for("refused"), [3, 4])
    ln = nodes + [node("LayerNormalization", ["h", "g"], ["y"], axis=-1)]
    graph, _ = make_graph(ln, tensors + [("g", f32(np.ones((3, 1))), "param")],
                          [("input", ["N", 5])], [("y", ["N", 3, 4])], constants=consts)
    with pytest.raises(GraphError, match="Scale of shape \\[3, 1\\] is not the normalised"):
        Graph(graph).shapes(2)


def test_numpy_layernorm_literals():
    """LayerNorm of [1, 2, 3, 4]: mean 2.5, var 1.25 (values computed by hand)."""
    n = node("LayerNormalization", ["x", "g", "b"], ["y", "m", "i"], axis=-1, epsilon=0.0)
    ins = [np.array([[1.0, 2.0, 3.0, 4.0]]), np.array([2.0, 2.0, 2.0, 2.0]),
           np.array([1.0, 0, 0, 0])]
    outs, _ = KERNELS["LayerNormalization"].forward(n, ins, cpu_engine.Context(False, np.float64))
    s = np.sqrt(1.25)
    assert np.allclose(outs[0], [[-1.5 / s * 2 + 1, -0.5 / s * 2, 0.5 / s * 2, 1.5 / s * 2]])
    assert outs[1].shape == (1, 1) and outs[1][0, 0] == 2.5
    assert np.isclose(outs[2][0, 0], 1 / s)


def test_numpy_layernorm_matches_torch():
    """LayerNorm over the last 2 dims, Scale / B of the normalised shape: forward, the saved
    mean / inverse std, backward."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    t = lambda a: torch.tensor(a, dtype=torch.float64, requires_grad=True)  # noqa: E731
    x = rng.standard_normal((3, 4, 5, 6)) * 2 + 1
    g, b = rng.standard_normal((5, 6)), rng.standard_normal((5, 6))
    dy = rng.standard_normal(x.shape)
    xt, gt, bt = t(x), t(g), t(b)
    yt = F.layer_norm(xt, (5, 6), gt, bt, 1e-5)
    yt.backward(torch.tensor(dy))
    y, mean, inv = np_layernorm(x, g, b, axis=-2, eps=1e-5)
    assert np.allclose(y, yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    _, tm, tr = torch.native_layer_norm(torch.tensor(x), [5, 6], torch.tensor(g),
                                        torch.tensor(b), 1e-5)
    assert np.allclose(mean, tm.numpy()) and np.allclose(inv, tr.numpy())
    for got, want in zip(layernorm_backward(x, g, dy, mean, inv, axis=-2),
                         (xt.grad, gt.grad, bt.grad)):
        assert np.allclose(got, want.numpy(), rtol=1e-10, atol=1e-12)

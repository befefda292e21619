"""ReduceMean, ReduceSum, ReduceMax, ReduceMin on the native device against the float64 numpy
engine (tests/cases/reduction.py), what is refused, and the numpy engine against literal values
and torch (skipped without torch)."""

import numpy as np
import pytest

from cases import ids, reduction
from cases.blocks import flat_head_case, gemm_to
from conftest import make_graph, node, rng_for, run
from harness import check_case
from webgpu_trainer.cpu import KERNELS
from webgpu_trainer.engine.tools import parity

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", reduction.CASES, ids=ids(reduction.CASES))
def test_case(device, case):
    check_case(device, case)


def test_refused_shapes(device):
    """GraphError for a non-constant axes input; NotImplementedError for axes that split the
    tensor into more than 3 runs of reduced dims."""
    from webgpu_trainer.engine.graph import Graph, GraphError
    rng = rng_for("refused")
    nodes, tensors, consts = gemm_to(rng, [3, 4])
    bad_axes = nodes + [node("ReduceSum", ["h", "pre"], ["r"])]
    graph, _ = make_graph(bad_axes, tensors, [("input", ["N", 5])], [("r", ["N", 1])],
                          constants=consts)
    with pytest.raises(GraphError, match="axes input 'pre' is not a constant"):
        Graph(graph).shapes(2)
    nodes, tensors, consts = gemm_to(rng, [2] * 7)
    nodes.append(node("ReduceMax", ["h"], ["r"], axes=[1, 3, 5, 7], keepdims=0))
    c = flat_head_case("reduction/refused", rng, nodes, tensors, consts, "r", [2] * 3)
    with pytest.raises(NotImplementedError, match="more than 3 runs"):
        run(parity.load(device, c.graph, c.blob, 2))


def test_numpy_reduce_literals():
    """ReduceMax of [[1, 3, 3], [2, 0, 1]] over axis 1: ties split the gradient; ReduceMean
    without axes: everything."""
    n = node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=0)
    x = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]])
    (y,), cache = KERNELS["ReduceMax"].forward(n, [x], None)
    assert np.array_equal(y, [3.0, 2.0])
    dx = KERNELS["ReduceMax"].backward(n, [x], [y], cache, [np.array([1.0, 4.0])], None)[0]
    assert np.array_equal(dx, [[0, 0.5, 0.5], [4.0, 0, 0]])
    n = node("ReduceMean", ["x"], ["y"], keepdims=1)  # no axes: all
    (y,), cache = KERNELS["ReduceMean"].forward(n, [x], None)
    assert y.shape == (1, 1) and y[0, 0] == 10 / 6


def test_numpy_reduce_ties_match_torch():
    """ReduceMax / ReduceMin with ties = torch.amax / amin (gradient split evenly)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = np.maximum(rng.standard_normal((3, 4, 5)), 0)
    for op, f in (("ReduceMax", torch.amax), ("ReduceMin", torch.amin)):
        n = node(op, ["x"], ["y"], axes=[0, 2], keepdims=0)
        (y,), cache = KERNELS[op].forward(n, [x], None)
        dy = rng.standard_normal(y.shape)
        xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        yt = f(xt, dim=(0, 2))
        yt.backward(torch.tensor(dy))
        dx = KERNELS[op].backward(n, [x], [y], cache, [dy], None)[0]
        assert np.allclose(y, yt.detach().numpy())
        assert np.allclose(dx, xt.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("op", ["ReduceSumSquare", "ReduceL2", "ReduceLogSumExp"])
def test_numpy_sumsquare_l2_logsumexp_match_torch(op):
    """x.pow(2).sum, torch.linalg.vector_norm and torch.logsumexp over axes (1, 2), forward and
    backward (float64, 1e-12); ReduceL2 of an all-zero row: 0 and a zero gradient (torch)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 5)) * 3
    if op == "ReduceL2":
        x[1] = 0.0
    fns = {"ReduceSumSquare": lambda t: t.pow(2).sum(dim=(1, 2)),
           "ReduceL2": lambda t: torch.linalg.vector_norm(t, dim=(1, 2)),
           "ReduceLogSumExp": lambda t: torch.logsumexp(t, dim=(1, 2))}
    n = node(op, ["x"], ["y"], axes=[1, 2], keepdims=0)
    (y,), cache = KERNELS[op].forward(n, [x], None)
    dy = rng.standard_normal(y.shape)
    xt = torch.tensor(x, requires_grad=True)
    yt = fns[op](xt)
    yt.backward(torch.tensor(dy))
    dx = KERNELS[op].backward(n, [x], [y], cache, [dy], None)[0]
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", ["ReduceL1", "ReduceProd"])
def test_numpy_l1_prod_match_torch(op):
    """torch.linalg.vector_norm(ord=1) and torch.prod over axes (1, 2), forward and backward
    (float64, 1e-12); ReduceProd rows with one zero (the gradient at the zero is the product
    of the others) and with two zeros (all 0), ReduceL1's zeros (sign 0)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.uniform(0.5, 1.5, (3, 4, 5)) * rng.choice([-1, 1], (3, 4, 5))
    x[1, 2, 3] = 0.0
    x[2, 0, 0] = x[2, 3, 1] = 0.0
    fns = {"ReduceL1": lambda t: torch.linalg.vector_norm(t, ord=1, dim=(1, 2)),
           "ReduceProd": lambda t: t.flatten(1).prod(1)}
    n = node(op, ["x"], ["y"], axes=[1, 2], keepdims=0)
    (y,), cache = KERNELS[op].forward(n, [x], None)
    dy = rng.standard_normal(y.shape)
    xt = torch.tensor(x, requires_grad=True)
    yt = fns[op](xt)
    yt.backward(torch.tensor(dy))
    dx = KERNELS[op].backward(n, [x], [y], cache, [dy], None)[0]
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    if op == "ReduceProd":
        assert dx[1, 2, 3] != 0 and (dx[2] == 0).all()


@pytest.mark.parametrize("dynamo,opset", [(False, 13), (False, 17), (True, 18)])
def test_torch_logsumexp_norm_model(device, tmp_path, dynamo, opset):
    """torch.logsumexp and torch.linalg.vector_norm (ReduceLogSumExp, ReduceL2 from both
    exporters) import and train one step like torch."""
    torch = pytest.importorskip("torch")
    from torch_models import export_and_step

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.head = torch.nn.Linear(784, 40), torch.nn.Linear(12, 10)

        def forward(self, x):
            h = self.fc(x.flatten(1)).reshape(-1, 4, 10)
            return self.head(torch.cat([torch.logsumexp(h, 2),
                                        torch.linalg.vector_norm(h, dim=2),
                                        h.pow(2).sum(2)], 1))

    torch.manual_seed(0)
    graph = export_and_step(device, Net(), tmp_path / "red.onnx", dynamo, opset,
                            f"torch reductions opset {opset}")
    assert {"ReduceLogSumExp", "ReduceL2"} <= {n["op_type"] for n in graph["nodes"]}

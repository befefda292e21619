"""Add, Sub, Mul, Div, Pow with NumPy broadcasting on the native device against the float64
numpy engine (tests/cases/binary.py: every op x shapes x operand kinds, Pow's exponents and
bases, the same tensor twice in one node, x / 255), shapes that do not broadcast, and the numpy
engine against torch (skipped without torch).
"""

import numpy as np
import pytest

from cases import binary, ids
from conftest import make_graph, node
from harness import check_case

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", binary.CASES, ids=ids(binary.CASES))
def test_case(device, case):
    check_case(device, case)


# ---- shapes that do not broadcast ----------------------------------------------------------

@pytest.mark.parametrize("sa,sb", [([2, 3], [4]), ([2, 3, 4], [3, 1, 5])])
def test_not_broadcastable(sa, sb):
    from webgpu_trainer.engine.graph import Graph, GraphError
    tensors = [("a", np.zeros(sa, np.float32), "param"), ("b", np.zeros(sb, np.float32),
                                                          "param")]
    graph, _ = make_graph([node("Mul", ["a", "b"], ["y"], name="/blk/Mul")], tensors,
                          [("input", ["N", 2])], [("y", ["N", 2])])
    with pytest.raises(GraphError, match=r"/blk/Mul \(Mul\): shapes " + str(sa).replace(
            "[", r"\[").replace("]", r"\]") + " and " + str(sb).replace("[", r"\[")
            .replace("]", r"\]") + " do not broadcast"):
        Graph(graph).shapes(2)


# ---- the reference itself, against torch (skipped without torch) --------------------------

def test_reference_matches_torch():
    torch = pytest.importorskip("torch")
    from webgpu_trainer.cpu.binary import binary, binary_backward
    rng = np.random.default_rng(1)
    fns = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div,
           "Pow": torch.pow}
    a_zero = np.abs(rng.standard_normal((3, 1, 5))) + 0.5
    a_zero[0, 0, :2] = 0.0
    cases = [(op, rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((3, 1, 5)) + 3)
             for op in ("Add", "Sub", "Mul", "Div")]
    cases += [("Pow", np.abs(rng.standard_normal((2, 3, 4, 5))) + 0.1,
               rng.standard_normal((3, 1, 5))),
              ("Pow", rng.standard_normal((4, 7)), np.array([2.0, 3.0, -1.0, 0.0, 1.0, 2.0,
                                                             3.0])),
              ("Pow", a_zero, rng.uniform(0.0, 2.0, (2, 1, 4, 5)))]
    for op, a, b in cases:
        at = torch.tensor(a, requires_grad=True)
        bt = torch.tensor(b, requires_grad=True)
        yt = fns[op](at, bt)
        dy = rng.standard_normal(tuple(yt.shape))
        yt.backward(torch.tensor(dy))
        assert np.allclose(binary(op, a, b), yt.detach().numpy(), equal_nan=True), op
        da, db = binary_backward(op, a, b, dy)
        assert np.allclose(da, at.grad.numpy(), equal_nan=True), f"{op} dA"
        assert np.allclose(db, bt.grad.numpy(), equal_nan=True), f"{op} dB"


def test_prelu_max_min_sum_mean_match_torch():
    """PRelu (slope [C, 1, 1], [1], [W]) against F.prelu's formula with a broadcast weight,
    Max / Min / Sum / Mean of two broadcast operands without ties against torch.maximum /
    minimum / add / (a + b) / 2, forward and both gradients (float64, 1e-12)."""
    torch = pytest.importorskip("torch")
    from webgpu_trainer.cpu.binary import binary, binary_backward
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 4, 5))
    fns = {"PRelu": lambda a, b: torch.where(a >= 0, a, b * a), "Max": torch.maximum,
           "Min": torch.minimum, "Sum": torch.add, "Mean": lambda a, b: (a + b) / 2}
    cases = [("PRelu", x, rng.uniform(-0.5, 0.5, s)) for s in ((3, 1, 1), (1,), (5,))]
    cases += [(op, x, rng.standard_normal((3, 1, 5))) for op in ("Max", "Min", "Sum", "Mean")]
    for op, a, b in cases:
        at, bt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        yt = fns[op](at, bt)
        dy = rng.standard_normal(tuple(yt.shape))
        yt.backward(torch.tensor(dy))
        np.testing.assert_allclose(binary(op, a, b), yt.detach().numpy(), rtol=1e-12)
        da, db = binary_backward(op, a, b, dy)
        np.testing.assert_allclose(da, at.grad.numpy(), rtol=1e-12, atol=1e-12, err_msg=op)
        np.testing.assert_allclose(db, bt.grad.numpy(), rtol=1e-12, atol=1e-12, err_msg=op)


def test_max_min_ties_go_to_the_first_input():
    """The documented rule at ties: the first input takes the whole gradient (torch.maximum
    and torch.minimum give each input half, asserted here so a change of torch shows)."""
    torch = pytest.importorskip("torch")
    from webgpu_trainer.cpu.binary import binary_backward
    a, b, dy = np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 5.0]), np.array([4.0, 5.0, 6.0])
    for op, fn in (("Max", torch.maximum), ("Min", torch.minimum)):
        da, db = binary_backward(op, a, b, dy)
        first = [4.0, 5.0, 0.0] if op == "Max" else [4.0, 0.0, 6.0]
        np.testing.assert_array_equal(da, first)
        np.testing.assert_array_equal(db, dy - np.array(first))
        at, bt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        fn(at, bt).backward(torch.tensor(dy))
        assert at.grad[0].item() == bt.grad[0].item() == 2.0  # torch: halves at the tie


@pytest.mark.parametrize("op,count", [("Max", 1), ("Sum", 1), ("Add", 3)])
def test_variadic_of_one_input_refused(op, count):
    """Max / Min / Sum / Mean take two or more inputs; the other binary ops exactly two."""
    from webgpu_trainer.engine.graph import Graph, GraphError
    tensors = [(f"t{k}", np.zeros(2, np.float32), "param") for k in range(count)]
    graph, _ = make_graph([node(op, [f"t{k}" for k in range(count)], ["y"], name="/v")],
                          tensors, [("input", ["N", 2])], [("y", ["N", 2])])
    what = "two inputs" if op == "Add" else "two or more inputs"
    with pytest.raises(GraphError, match=rf"/v \({op}\): {count} inputs; only {op} of {what} "
                                         "is supported"):
        Graph(graph).shapes(2)


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_numpy_variadic_matches_torch(op):
    """Max / Min / Sum / Mean of [2, 3, 4], [3, 1] and [4] (no ties) = torch's maximum /
    minimum chain, sum, and the sum / 3: forward and each input's gradient in float64."""
    torch = pytest.importorskip("torch")
    from webgpu_trainer.cpu.binary import backward, forward
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal(s) for s in ((2, 3, 4), (3, 1), (4,))]
    ts = [torch.tensor(x, requires_grad=True) for x in xs]
    f = {"Max": torch.maximum, "Min": torch.minimum, "Sum": torch.add,
         "Mean": torch.add}[op]
    yt = f(f(ts[0], ts[1]), ts[2]) / (3 if op == "Mean" else 1)
    dy = rng.standard_normal(yt.shape)
    yt.backward(torch.tensor(dy))
    ctx = type("Ctx", (), {"dtype": np.float64})()
    n = node(op, ["a", "b", "c"], ["y"])
    (y,), _ = forward(n, xs, ctx)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12)
    for got, t in zip(backward(n, xs, [y], None, [dy], ctx), ts):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_prelu_slope_that_grows_the_input_refused():
    from webgpu_trainer.engine.graph import Graph, GraphError
    tensors = [("x", np.zeros((3, 1), np.float32), "param"),
               ("s", np.zeros((3, 4), np.float32), "param")]
    graph, _ = make_graph([node("PRelu", ["x", "s"], ["y"], name="/act")], tensors,
                          [("input", ["N", 2])], [("y", ["N", 2])])
    with pytest.raises(GraphError, match=r"/act \(PRelu\): shapes \[3, 1\] and \[3, 4\] do "
                                         "not broadcast to the input's"):
        Graph(graph).shapes(2)


@pytest.mark.parametrize("dynamo,opset", [(False, 13), (False, 17), (True, 18)])
def test_torch_activations_model(device, tmp_path, dynamo, opset):
    """nn.PReLU per channel after a Conv and with one slope, F.selu, F.celu, F.mish,
    torch.maximum / minimum from both exporters (PRelu, Selu, Celu, Max, Min, Mish at opset 18;
    Softplus + Tanh + Mul before) import and train one step like torch."""
    torch = pytest.importorskip("torch")
    from torch_models import export_and_step
    F = torch.nn.functional

    class Acts(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.prelu = torch.nn.Conv2d(1, 4, 3, stride=2), torch.nn.PReLU(4)
            self.fc1, self.prelu1 = torch.nn.Linear(4 * 13 * 13, 32), torch.nn.PReLU()
            self.fc2 = torch.nn.Linear(32, 10)

        def forward(self, x):
            h = self.fc1(self.prelu(self.conv(x)).flatten(1))
            h = torch.maximum(F.selu(h), F.celu(h, 0.7)) + torch.minimum(F.mish(h),
                                                                         self.prelu1(h))
            return self.fc2(h)

    torch.manual_seed(0)
    graph = export_and_step(device, Acts(), tmp_path / "acts.onnx", dynamo, opset,
                            f"torch activations opset {opset}")
    ops = {n["op_type"] for n in graph["nodes"]}
    assert {"PRelu", "Selu", "Celu", "Max", "Min"} <= ops
    assert ("Mish" in ops) == (opset >= 18)

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

"""MatMul on the native device against the float64 numpy engine (tests/cases/matmul.py: weights
and activations as either operand, broadcast batch dims, 1-D operands, split-K), the dispatches
of the split cases, shape inference and its errors, and the numpy engine against torch.
"""

import numpy as np
import pytest

from cases import by_id, ids, matmul
from cases.blocks import shape_const as _shape_const
from conftest import f32, make_graph, node, rng_for, run
from harness import check_case

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", matmul.CASES, ids=ids(matmul.CASES))
def test_case(device, case):
    check_case(device, case)


@pytest.mark.parametrize("case,rows,cols,inner", [
    ("3d_x_2d_splitk_fwd", 20, 3, 300),   # forward: the batch folded into the rows, k split
    ("3d_x_2d_splitk_dw", 7, 3, 320),     # dW: the batch folded into k (8 x 40), k split
])
def test_matmul_folds_and_splits(device, monkeypatch, case, rows, cols, inner):
    """The dispatches the split cases above really make: one matmul with split-K (gid.z > 1)
    over the folded sizes, then one reduce_splits."""
    from webgpu_trainer.engine.plan import Builder
    seen = []
    orig = Builder.kernel

    async def spy(self, shader, entry, groups, **kw):
        if shader in ("matmul", "reduce"):
            p = kw["params"]
            seen.append((entry, tuple(p.get(f) for f in ("M", "N", "K", "splits")), groups))
        return await orig(self, shader, entry, groups, **kw)

    monkeypatch.setattr(Builder, "kernel", spy)
    monkeypatch.setattr(Builder, "FOLD_LINEARS", False)  # the MatMul itself, not a Gemm
    check_case(device, by_id(matmul.CASES, case))
    hits = [i for i, (e, (m, n, k, s), _) in enumerate(seen)
            if e == "matmul" and (m, n, k) == (rows, cols, inner)]
    assert hits, seen
    _, (_, _, _, splits), counts = seen[hits[0]]
    assert splits > 1 and counts[2] == splits
    assert seen[hits[0] + 1][0] == "reduce_splits"


# ---- shapes and errors --------------------------------------------------------------------

SHAPES = [([3], [3]), ([3], [3, 4]), ([2, 3], [3]), ([5, 2, 3], [3]), ([3], [5, 3, 4]),
          ([2, 3], [3, 4]), ([6, 2, 3], [3, 4]), ([2, 3], [6, 3, 4]), ([2, 1, 2, 3], [5, 3, 4]),
          ([1, 2, 3], [7, 1, 3, 4]), ([0, 2, 3], [3, 4]), ([2, 0], [0, 4])]


@pytest.mark.parametrize("a,b", SHAPES)
def test_infer_matches_numpy(a, b):
    from webgpu_trainer.engine.ops import matmul
    n = {"name": "mm", "op_type": "MatMul", "inputs": ["a", "b"], "outputs": ["y"], "attrs": {}}
    want = list(np.matmul(np.zeros(a), np.zeros(b)).shape)
    assert matmul.infer(n, [a, b], [None, None]) == [want]


@pytest.mark.parametrize("a,b,msg", [([2, 3], [4, 5], "inner sizes differ"),
                                     ([2, 2, 3], [3, 3, 4], "batch dims do not broadcast"),
                                     ([], [3], "a scalar operand")])
def test_infer_errors(a, b, msg):
    from webgpu_trainer.engine.graph import GraphError
    from webgpu_trainer.engine.ops import matmul
    n = {"name": "mm", "op_type": "MatMul", "inputs": ["a", "b"], "outputs": ["y"], "attrs": {}}
    with pytest.raises(GraphError, match=f"node mm \\(MatMul\\): {msg}"):
        matmul.infer(n, [a, b], [None, None])


def test_too_many_batch_dims(device):
    """Six batch dims whose broadcast pattern alternates cannot be merged: refused at build."""
    from webgpu_trainer.engine.tools import parity
    a = [2, 1, 2, 1, 2, 1, 3, 4]
    bshape = [1, 2, 1, 2, 1, 2, 4, 5]
    consts = {"a.shape": _shape_const(a)}
    tensors = [("a.pre.w", f32(np.zeros((96, 5))), "param"), ("b.w", f32(np.zeros(bshape)),
                                                              "param")]
    nodes = [node("Gemm", ["input", "a.pre.w"], ["a.flat"], transB=1),
             node("Reshape", ["a.flat", "a.shape"], ["a"]),
             node("MatMul", ["a", "b.w"], ["y"], name="mm")]
    consts["y.shape"] = _shape_const([1, -1])
    nodes.append(node("Reshape", ["y", "y.shape"], ["output"]))
    graph, _ = make_graph(nodes, tensors, [("input", ["N", 5])], [("output", ["N", 960])],
                          constants=consts)
    with pytest.raises(NotImplementedError, match="mm: more than 4 kept or reduced batch dims"):
        run(parity.load(device, graph, None, 1))


# ---- the numpy engine ---------------------------------------------------------------------

@pytest.mark.parametrize("a,b", [s for s in SHAPES if 0 not in s[0] + s[1]])
def test_numpy_matches_torch(a, b):
    torch = pytest.importorskip("torch")
    from webgpu_trainer.cpu.matmul import matmul_backward
    rng = rng_for("mm_torch", str(a), str(b))
    av, bv = rng.standard_normal(a), rng.standard_normal(b)
    ta = torch.tensor(av, requires_grad=True)
    tb = torch.tensor(bv, requires_grad=True)
    y = torch.matmul(ta, tb)
    dy = rng.standard_normal(tuple(y.shape))
    y.backward(torch.tensor(dy))
    da, db = matmul_backward(av, bv, np.asarray(dy))
    np.testing.assert_allclose(np.matmul(av, bv), y.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(da, ta.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(db, tb.grad.numpy(), rtol=1e-12, atol=1e-12)

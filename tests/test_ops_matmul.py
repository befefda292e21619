"""MatMul (ops/matmul.py, shaders/matmul.wgsl) against the float64 numpy engine.

Each operand is a weight or an activation (input -> Gemm -> Reshape to the operand's shape, so
its gradient flows into that Gemm); the product is reshaped to [batch, -1] and ends in a
Gemm + LogSoftmax head; one training step is compared through ``compare``.
"""

import numpy as np
import pytest

import reference as ref
from conftest import compare, f32, make_graph, node, one_step, params_of, rng_for, run

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend

# id: (A, B, batch) with each operand ("param" | "act", shape); an activation's element count
# is a multiple of batch.
CASES = {
    # [N, K] @ [K, M] with a weight B, sizes 1 / 7 / 33
    "2d_1x1x1": (("act", [1, 1]), ("param", [1, 1]), 1),
    "2d_7x33x7": (("act", [7, 33]), ("param", [33, 7]), 7),
    "2d_33x7x33": (("act", [33, 7]), ("param", [7, 33]), 33),
    "2d_1x7x33": (("act", [1, 7]), ("param", [7, 33]), 1),
    "2d_33x1x7": (("act", [33, 1]), ("param", [1, 7]), 33),
    # batched activation times a weight (nn.Linear by the dynamo exporter: x @ W^T)
    "3d_x_2d": (("act", [3, 7, 33]), ("param", [33, 5]), 3),
    "3d_x_2d_splitk_fwd": (("act", [4, 5, 300]), ("param", [300, 3]), 4),
    "3d_x_2d_splitk_dw": (("act", [8, 40, 7]), ("param", [7, 3]), 8),
    # broadcast batch dims on both sides: [2, 1, N, K] @ [3, K, M]
    "bcast_4d": (("act", [2, 1, 7, 5]), ("param", [3, 5, 6]), 2),
    "bcast_4d_33": (("act", [2, 1, 1, 33]), ("param", [3, 33, 7]), 2),
    "bcast_4d_weight_a": (("param", [3, 7, 5]), ("act", [2, 1, 5, 6]), 2),
    # the weight as the first operand: W [P, K] @ x [B, K, M] (dW sums over the batch)
    "weight_a_2d": (("param", [6, 7]), ("act", [3, 7, 33]), 3),
    # 1-D operands
    "vec_param_x_3d": (("param", [7]), ("act", [3, 7, 5]), 3),
    "3d_x_vec_param": (("act", [3, 5, 7]), ("param", [7]), 3),
    "2d_x_vec_param": (("act", [4, 33]), ("param", [33]), 4),
    "vec_x_vec": (("act", [7]), ("param", [7]), 1),
    "vec_x_2d_param": (("act", [33]), ("param", [33, 7]), 1),
    # activation times activation: both gradients
    "act_act_3d": (("act", [3, 7, 5]), ("act", [3, 5, 33]), 3),
    "act_act_bcast": (("act", [2, 3, 7, 5]), ("act", [2, 1, 5, 4]), 2),
    "act_act_2d": (("act", [1, 33]), ("act", [33, 7]), 1),
}


def _head(name, features, rng):
    """Gemm(transB=1) -> LogSoftmax over 2 classes with weights (s, -s), labels all 0: no
    cancellation in the head's gradients (see tests/test_ops_unary.py)."""
    s = rng.uniform(0.05, 0.3, features) * rng.choice([-1.0, 1.0], features)
    w, b = f32(np.stack([s, -s])), f32(0.1 * rng.standard_normal(2))
    nodes = [node("Gemm", [name, "fc.w", "fc.b"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    return nodes, [("fc.w", w, "param"), ("fc.b", b, "param")]


def _shape_const(values):
    return {"dtype": "int64", "shape": [len(values)], "values": list(values)}


def _model(case, a_spec, b_spec, batch, same=False):
    """The graph of one case: returns (nodes, tensors, graph, blob, x, labels, acts)."""
    rng = rng_for("matmul", case)
    fin = 5
    nodes, tensors, consts, acts = [], [], {}, []
    names = []
    for tag, (kind, shape) in zip("ab", (a_spec, b_spec)):
        if same and tag == "b":
            names.append(names[0])
            break
        numel = int(np.prod(shape))
        if kind == "param":
            w = f32(rng.standard_normal(shape) / np.sqrt(shape[-2] if len(shape) > 1 else 4))
            tensors.append((f"{tag}.w", w, "param"))
            names.append(f"{tag}.w")
            continue
        assert numel % batch == 0, (case, shape, batch)
        per = numel // batch
        tensors += [(f"{tag}.pre.w", f32(rng.standard_normal((per, fin)) / np.sqrt(fin)), "param"),
                    (f"{tag}.pre.b", f32(0.1 * rng.standard_normal(per)), "param")]
        consts[f"{tag}.shape"] = _shape_const(shape)
        nodes += [node("Gemm", ["input", f"{tag}.pre.w", f"{tag}.pre.b"], [f"{tag}.flat"],
                       transB=1),
                  node("Reshape", [f"{tag}.flat", f"{tag}.shape"], [tag])]
        names.append(tag)
        acts.append(tag)
    nodes.append(node("MatMul", names, ["y"]))
    y_shape = list(np.matmul(np.zeros(a_spec[1]), np.zeros(b_spec[1])).shape)
    consts["y.shape"] = _shape_const([batch, -1])
    nodes.append(node("Reshape", ["y", "y.shape"], ["y2"]))
    feats = max(1, int(np.prod(y_shape)) // batch)
    hn, ht = _head("y2", feats, rng)
    tensors += ht
    graph, blob = make_graph(nodes + hn, tensors, [("input", ["N", fin])],
                             [("output", ["N", 2])], constants=consts)
    x = f32(rng.standard_normal((batch, fin)))
    labels = np.zeros(batch, np.int64)
    return nodes + hn, tensors, graph, blob, x, labels, acts, consts


def _check(device, case, a_spec, b_spec, batch, same=False):
    nodes, tensors, graph, blob, x, labels, acts, consts = _model(case, a_spec, b_spec, batch,
                                                                  same)
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes, params_of(tensors), x, labels, constants=consts)
    compare("MatMul", res, want, acts=acts + ["y"], dacts=acts + ["y"])
    return res


@pytest.mark.parametrize("case", list(CASES))
def test_matmul(device, case):
    a_spec, b_spec, batch = CASES[case]
    _check(device, case, a_spec, b_spec, batch)


def test_matmul_same_operand(device):
    """MatMul(a, a) with a [B, K, K]: both gradient contributions are summed by the plan."""
    _check(device, "same", ("act", [3, 7, 7]), ("act", [3, 7, 7]), 3, same=True)


@pytest.mark.parametrize("case,rows,cols,inner", [
    ("3d_x_2d_splitk_fwd", 20, 3, 300),   # forward: the batch folded into the rows, k split
    ("3d_x_2d_splitk_dw", 7, 3, 320),     # dW: the batch folded into k (8 x 40), k split
])
def test_matmul_folds_and_splits(device, monkeypatch, case, rows, cols, inner):
    """The dispatches the split cases above really make: one matmul with split-K (gid.z > 1)
    over the folded sizes, then one reduce_splits."""
    import struct

    from webgpu_trainer.engine.plan import Builder
    seen = []
    orig = Builder.kernel

    async def spy(self, shader, entry, params, buffers, counts, constants=None):
        if shader in ("matmul", "reduce"):
            seen.append((entry, struct.unpack("<4I", params[:16]), counts))
        return await orig(self, shader, entry, params, buffers, counts, constants)

    monkeypatch.setattr(Builder, "kernel", spy)
    a_spec, b_spec, batch = CASES[case]
    _check(device, case, a_spec, b_spec, batch)
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
    from webgpu_trainer.engine.graph import Graph
    from webgpu_trainer.engine.plan import Plan
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
        run(Plan.build(device, Graph(graph), 1))


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

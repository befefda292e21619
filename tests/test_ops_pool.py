"""Pooling (MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool): the engine on the native
device against the float64 numpy engine (tests/cases/pool.py), shapes and refusals, and the
numpy engine against hand-computed values, PyTorch and onnxruntime (those two skipped when
missing).
"""

import numpy as np
import pytest

from cases import ids, pool
from conftest import f32, make_graph, node, rng_for
from harness import check_case
from webgpu_trainer.cpu import pool as cpool
from webgpu_trainer.engine.graph import Graph, GraphError

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", pool.CASES, ids=ids(pool.CASES))
def test_case(device, case):
    check_case(device, case)


# ---- shapes and refusals --------------------------------------------------------------------

def _shapes(pool_node, shape):
    graph, _ = make_graph([pool_node], [], [("input", shape)], [(pool_node["outputs"][0], [])])
    return Graph(graph).shapes(shape[0])[pool_node["outputs"][0]]


@pytest.mark.parametrize("size,k,s,p,ceil,want", [
    (7, 2, 2, 0, 0, 3), (7, 2, 2, 0, 1, 4), (5, 2, 2, 1, 1, 3),  # last window dropped
    (8, 3, 2, 1, 1, 5), (1, 1, 1, 0, 1, 1), (33, 3, 2, 1, 0, 17), (6, 3, 3, 1, 1, 3),
])
def test_output_size(size, k, s, p, ceil, want):
    for op in ("MaxPool", "AveragePool"):
        pn = node(op, ["input"], ["y"], kernel_shape=[k, 1], strides=[s, 1], pads=[p, 0, p, 0],
                  ceil_mode=ceil)
        assert _shapes(pn, [2, 3, size, 4]) == [2, 3, want, 4]
        assert cpool.pool_out_len(size, k, s, p, p, 1, ceil) == want


def test_refusals():
    def err(pn, shape=(2, 3, 7, 7)):
        with pytest.raises(GraphError) as e:
            _shapes(pn, list(shape))
        return str(e.value)

    msg = err(node("MaxPool", ["input"], ["y", "idx"], name="mp", kernel_shape=[2, 2]))
    assert msg == "node mp (MaxPool): the Indices output is not supported"
    _shapes(node("MaxPool", ["input"], ["y", ""], kernel_shape=[2, 2]), [2, 3, 7, 7])
    assert err(node("AveragePool", ["input"], ["y"], name="ap", kernel_shape=[2, 2, 2],
                    strides=[1, 1, 1]), (2, 3, 7, 7, 7)) == "node ap (AveragePool): input " \
        "[2, 3, 7, 7, 7] is not NCL or NCHW (only 1-D and 2-D pooling are supported)"
    assert "NCHW" in err(node("GlobalMaxPool", ["input"], ["y"], name="g"), (2, 3, 4, 4, 4))
    assert "kernel_shape [2, 2] does not describe a 1-D window over input [2, 3, 7]" in err(
        node("MaxPool", ["input"], ["y"], kernel_shape=[2, 2]), (2, 3, 7))
    assert "dilations [2, 2] are not supported" in err(
        node("AveragePool", ["input"], ["y"], kernel_shape=[2, 2], dilations=[2, 2]))
    assert "auto_pad" in err(node("MaxPool", ["input"], ["y"], kernel_shape=[2, 2],
                                  auto_pad="SAME_UPPER", ceil_mode=1))
    assert "holds only padding" in err(node("MaxPool", ["input"], ["y"], kernel_shape=[2, 2],
                                            pads=[2, 0, 0, 0]))
    assert "too small" in err(node("MaxPool", ["input"], ["y"], kernel_shape=[9, 2]))
    # the numpy engine refuses the same
    x = np.zeros((1, 1, 4, 4))
    with pytest.raises(GraphError, match="the Indices output is not supported"):
        cpool.forward(node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2]), [x], None)
    with pytest.raises(GraphError, match="only 1-D and 2-D"):
        cpool.forward(node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2]), [x[None]], None)


# ---- the numpy engine against hand-computed values -------------------------------------------

def test_numpy_maxpool_by_hand():
    x = np.array([[1., 3., 2.],
                  [4., 0., 4.],
                  [1., 4., 3.]])[None, None]
    y, arg = cpool.maxpool2d(x, (2, 2), (1, 1))
    np.testing.assert_array_equal(y[0, 0], [[4, 4], [4, 4]])
    # first maximum in window order: (1,0) for both left windows, (1,2) top right,
    # (1,2) bottom right (row 1 comes before row 2's 4 at (2,1))
    np.testing.assert_array_equal(arg[0, 0], [[3, 5], [3, 5]])
    dx = cpool.maxpool2d_backward(x.shape, arg, np.array([[1., 2.], [10., 20.]])[None, None])
    np.testing.assert_array_equal(dx[0, 0], [[0, 0, 0], [11, 0, 22], [0, 0, 0]])
    # padding is -inf: a window over negative values and padding picks the value
    y, arg = cpool.maxpool2d(-np.ones((1, 1, 1, 2)) * [[[[5., 7.]]]], (2, 2), (2, 2),
                             (1, 1, 0, 0), (1, 1), 1)
    np.testing.assert_array_equal(y[0, 0], [[-5, -7]])
    np.testing.assert_array_equal(arg[0, 0], [[0, 1]])
    # dilation 2, stride 2 on a 1x5 row with ceil_mode: windows {0, 2}, {2, 4}
    row = np.array([[[[3., 9., 3., 9., 1.]]]])
    y, arg = cpool.maxpool2d(row, (1, 2), (1, 2), (0, 0, 0, 0), (1, 2), 1)
    np.testing.assert_array_equal(y[0, 0], [[3, 3]])
    np.testing.assert_array_equal(arg[0, 0], [[0, 2]])
    dx = cpool.maxpool2d_backward(row.shape, arg, np.array([[[[1., 1.]]]]))
    np.testing.assert_array_equal(dx[0, 0], [[1, 0, 1, 0, 0]])


def test_numpy_avgpool_by_hand():
    x = np.arange(1., 10.).reshape(1, 1, 3, 3)  # [[1 2 3] [4 5 6] [7 8 9]]
    # k2 s2 pad 1 on all sides: windows rows {-1,0},{1,2}, cols likewise
    y, div = cpool.avgpool2d(x, (2, 2), (2, 2), (1, 1, 1, 1), 0, 0)
    np.testing.assert_allclose(y[0, 0], [[1, (2 + 3) / 2], [(4 + 7) / 2, (5 + 6 + 8 + 9) / 4]])
    y, div = cpool.avgpool2d(x, (2, 2), (2, 2), (1, 1, 1, 1), 0, 1)
    np.testing.assert_allclose(y[0, 0], [[1 / 4, 5 / 4], [11 / 4, 28 / 4]])
    # ceil_mode, no padding: the last window (row/col 2) is clipped to the input, and with
    # count_include_pad PyTorch divides by the clipped window (1 or 2 elements), not by 4
    y, div = cpool.avgpool2d(x, (2, 2), (2, 2), (0, 0, 0, 0), 1, 1)
    np.testing.assert_allclose(div, [[4, 2], [2, 1]])
    np.testing.assert_allclose(y[0, 0], [[12 / 4, 9 / 2], [15 / 2, 9]])
    # ceil_mode with padding 1 on a 4-wide row, k3 s2: windows start -1, 1, 3 (the last
    # clipped to size + pad = 5): include_pad divisors 3, 3, 2; exclude: 2, 3, 1
    row = np.array([[[[1., 2., 3., 4.]]]])
    y, div = cpool.avgpool2d(row, (1, 3), (1, 2), (0, 1, 0, 1), 1, 1)
    np.testing.assert_allclose(div[0], [3, 3, 2])
    np.testing.assert_allclose(y[0, 0, 0], [3 / 3, 9 / 3, 4 / 2])
    y, div = cpool.avgpool2d(row, (1, 3), (1, 2), (0, 1, 0, 1), 1, 0)
    np.testing.assert_allclose(div[0], [2, 3, 1])
    dx = cpool.avgpool2d_backward(row.shape, (1, 3), (1, 2), (0, 1, 0, 1), div,
                                  np.array([[[[2., 3., 5.]]]]))
    np.testing.assert_allclose(dx[0, 0, 0], [1, 1 + 1, 1, 1 + 5])
    # asymmetric pads [t, l, b, r] = [0, 2, 0, 0], k3 s1, count_include_pad
    y, div = cpool.avgpool2d(row, (1, 3), (1, 1), (0, 2, 0, 0), 0, 1)
    np.testing.assert_allclose(y[0, 0, 0], [1 / 3, 3 / 3, 6 / 3, 9 / 3])


def test_numpy_global_by_hand():
    x = np.array([[[[1., 5.], [5., 2.]], [[-1., -3.], [-2., -4.]]]])
    node_max = node("GlobalMaxPool", ["x"], ["y"])
    (y,), cache = cpool.forward(node_max, [x], None)
    np.testing.assert_array_equal(y.ravel(), [5, -1])
    (dx,) = cpool.backward(node_max, [x], [y], cache, [np.array([[[[2.]], [[3.]]]])], None)
    np.testing.assert_array_equal(dx[0], [[[0, 2], [0, 0]], [[3, 0], [0, 0]]])
    node_avg = node("GlobalAveragePool", ["x"], ["y"])
    (y,), cache = cpool.forward(node_avg, [x], None)
    np.testing.assert_allclose(y.ravel(), [13 / 4, -10 / 4])
    (dx,) = cpool.backward(node_avg, [x], [y], cache, [np.array([[[[4.]], [[8.]]]])], None)
    np.testing.assert_allclose(dx[0], [np.full((2, 2), 1.), np.full((2, 2), 2.)])


# ---- the numpy engine against PyTorch and onnxruntime -------------------------------------

TORCH_CASES = [
    # (H, W, k, s, p, d, ceil)
    (7, 7, 3, 2, 1, 1, 0), (7, 7, 3, 2, 1, 1, 1), (8, 5, 2, 2, 1, 1, 1), (5, 5, 2, 2, 1, 1, 1),
    (9, 9, 3, 1, 1, 2, 0), (8, 9, 3, 2, 1, 2, 1), (1, 33, 1, 2, 0, 1, 1), (6, 7, 3, 3, 1, 1, 1),
]


@pytest.mark.parametrize("case", TORCH_CASES)
def test_numpy_against_torch(case):
    torch = pytest.importorskip("torch")
    fn = torch.nn.functional
    h, w, k, s, p, d, ceil = case
    rng = rng_for("torch_pool", case)
    x = np.round(rng.standard_normal((2, 3, h, w)) * 2)  # many ties
    tx = torch.tensor(x, requires_grad=True)
    ty = fn.max_pool2d(tx, k, s, p, d, ceil_mode=bool(ceil))
    y, arg = cpool.maxpool2d(x, (k, k), (s, s), (p,) * 4, (d, d), ceil)
    dy = rng.standard_normal(y.shape)
    ty.backward(torch.tensor(dy))
    np.testing.assert_array_equal(y, ty.detach().numpy())
    np.testing.assert_allclose(cpool.maxpool2d_backward(x.shape, arg, dy), tx.grad.numpy(),
                               rtol=1e-12, atol=1e-12)
    if d != 1:
        return
    for incl in (0, 1):
        tx = torch.tensor(x, requires_grad=True)
        ty = fn.avg_pool2d(tx, k, s, p, ceil_mode=bool(ceil), count_include_pad=bool(incl))
        ty.backward(torch.tensor(dy))
        y, div = cpool.avgpool2d(x, (k, k), (s, s), (p,) * 4, ceil, incl)
        np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12, atol=1e-12)
        dx = cpool.avgpool2d_backward(x.shape, (k, k), (s, s), (p,) * 4, div, dy)
        np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-12, atol=1e-12)


ORT_CASES = [
    # (op, H, W, attributes)
    ("MaxPool", 7, 9, {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 0, 1]}),
    ("MaxPool", 8, 9, {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [1, 0, 0, 1],
                       "dilations": [2, 1], "ceil_mode": 1}),
    ("MaxPool", 6, 7, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 1, 2, 0],
                       "ceil_mode": 1}),
    ("MaxPool", 7, 6, {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("MaxPool", 7, 6, {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "VALID"}),
    ("AveragePool", 9, 6, {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 0, 1],
                           "ceil_mode": 1}),
    ("AveragePool", 6, 7, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 1, 2, 0],
                           "ceil_mode": 1, "count_include_pad": 1}),
    ("AveragePool", 7, 9, {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [0, 1, 1, 0],
                           "count_include_pad": 1}),
    ("AveragePool", 5, 5, {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1],
                           "ceil_mode": 1, "count_include_pad": 1}),
    ("AveragePool", 7, 6, {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
]


@pytest.mark.parametrize("case", ORT_CASES)
def test_numpy_against_onnxruntime(case):
    """Asymmetric pads, ceil_mode and auto_pad (which PyTorch cannot express) against
    onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    op, h, w, attrs = case
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "pool",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, h, w])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = f32(rng_for("ort_pool", case).standard_normal((2, 3, h, w)))
    want = sess.run(None, {"x": x})[0]
    (y,), _ = cpool.forward(node(op, ["x"], ["y"], **attrs), [x.astype(np.float64)], None)
    assert y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"])
def test_numpy_1d_against_torch(op):
    """1-D pools of [N, C, L] (run as [N, C, 1, L]) = torch's max_pool1d (dilation, ceil_mode,
    padding), avg_pool1d (count_include_pad, ceil_mode), adaptive pools to 1: forward and
    backward in float64."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(4)
    x = rng.permutation(2 * 3 * 17).reshape(2, 3, 17) / 10.0
    attrs = {"MaxPool": dict(kernel_shape=[3], pads=[1, 1], strides=[2], dilations=[2],
                             ceil_mode=1),
             "AveragePool": dict(kernel_shape=[3], pads=[1, 1], strides=[2], ceil_mode=1,
                                 count_include_pad=1)}.get(op, {})
    fn = {"MaxPool": lambda t: F.max_pool1d(t, 3, 2, 1, 2, ceil_mode=True),
          "AveragePool": lambda t: F.avg_pool1d(t, 3, 2, 1, ceil_mode=True),
          "GlobalAveragePool": lambda t: F.adaptive_avg_pool1d(t, 1),
          "GlobalMaxPool": lambda t: F.adaptive_max_pool1d(t, 1)}[op]
    n = node(op, ["input"], ["y"], **attrs)
    (y,), cache = cpool.forward(n, [x], None)
    xt = torch.tensor(x, requires_grad=True)
    yt = fn(xt)
    dy = rng.standard_normal(y.shape)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12)
    (dx,) = cpool.backward(n, [x], [y], cache, [dy], None)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    assert list(_shapes(n, [2, 3, 17])) == list(y.shape)

"""Transpose, Concat, Slice, Pad, Expand on the native device against the float64 numpy engine
(tests/cases/layout.py), the refusals, and the numpy engine (cpu/layout.py) against onnxruntime.
"""

import numpy as np
import pytest

from cases import ids, layout
from cases.layout import I64_MAX, I64_MIN
from conftest import f32, make_graph, node
from harness import check_case

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


def _const(values, dtype="int64"):
    values = list(values)
    return {"dtype": dtype, "shape": [len(values)], "values": values}


@pytest.mark.parametrize("case", layout.CASES, ids=ids(layout.CASES))
def test_case(device, case):
    check_case(device, case)


# ---- refusals (no device work) ---------------------------------------------------------------

def _graph_of(nodes, constants, tensors=()):
    from webgpu_trainer.engine.graph import Graph
    graph, _ = make_graph(nodes, list(tensors), [("input", ["N", 3, 4])], [("y", [])],
                          constants=constants)
    return Graph(graph)


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_pad_mode_refused(mode):
    from webgpu_trainer.engine.graph import GraphError
    g = _graph_of([node("Pad", ["input", "pads"], ["y"], name="/pad", mode=mode)],
                  {"pads": _const([0, 1, 1, 0, 1, 1])})
    with pytest.raises(GraphError, match=f"/pad.*{mode}"):
        g.shapes(2)


def test_slice_non_constant_starts_refused():
    from webgpu_trainer.engine.graph import GraphError
    g = _graph_of([node("Slice", ["input", "st", "en"], ["y"], name="/slice")],
                  {"en": _const([2])}, tensors=[("st", f32([1.0]), "param")])
    with pytest.raises(GraphError, match="/slice.*'st'.*starts"):
        g.shapes(2)


# ---- the oracle against onnxruntime ----------------------------------------------------------

ORT_CASES = [
    ("Transpose", {"perm": [2, 0, 3, 1]}, []),
    ("Transpose", {}, []),
    ("Slice", {}, [[-2, 1], [I64_MAX, I64_MIN], [1, 3], [1, -1]]),
    ("Slice", {}, [[-10], [I64_MIN], [2], [-1]]),
    ("Slice", {}, [[10, 0], [I64_MIN, I64_MAX], [2, -1], [-2, 2]]),
    ("Pad", {"mode": "constant"}, [[1, 0, -1, 2, 0, 3, 2, -1], 0.5]),
    ("Pad", {"mode": "constant"}, [[2, -1], 1.5, [-1]]),
    ("Expand", {}, [[2, 1, 1, 1, 4]]),
]


@pytest.mark.parametrize("k", range(len(ORT_CASES)))
def test_numpy_engine_matches_onnxruntime(k):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from webgpu_trainer.cpu import layout
    from webgpu_trainer.cpu.engine import Context
    op, attrs, consts = ORT_CASES[k]
    x = np.random.default_rng(k).standard_normal((3, 7, 5, 4))
    arrays = [np.asarray(c, np.float64 if isinstance(c, float) else np.int64) for c in consts]
    names = [f"c{i}" for i in range(len(arrays))]
    onode = helper.make_node(op, ["x"] + names, ["y"], **attrs)
    g = helper.make_graph([onode], "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE,
                                                                      None)],
                          [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
                          [numpy_helper.from_array(a, n) for a, n in zip(arrays, names)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    bnode = {"name": "n", "op_type": op, "inputs": ["x"] + names, "outputs": ["y"],
             "attrs": attrs}
    got = layout.forward(bnode, [x] + arrays, Context(False, np.float64))[0][0]
    assert got.shape == want.shape and np.array_equal(got, want)
    # the backward is the adjoint of the (linear in x) forward: <dy, f(x)> = <dx, x>
    dy = np.random.default_rng(k + 100).standard_normal(got.shape)
    dx = layout.backward(bnode, [x] + arrays, [got], None, [dy], Context(True, np.float64))[0]
    if op == "Pad":  # the constant cells are not linear in x
        inner = layout.forward(bnode, [x, arrays[0], np.float64(0.0)] + arrays[2:],
                               Context(False, np.float64))[0][0]
        got = inner
    assert abs((dy * got).sum() - (dx * x).sum()) < 1e-9

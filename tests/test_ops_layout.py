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


@pytest.mark.parametrize("fold", [False, True], ids=["copies", "one_gather"])
def test_concat_one_element(device, fold):
    """A Concat input of one element copied op by op (the weight chain not folded into a
    Gather): its copy has no dim larger than 1 (it once failed to build), and folded."""
    from harness import builder_patch
    case = next(c for c in layout.CASES if c.id == "layout/concat_one_element")
    with builder_patch({"FOLD_WEIGHT_LAYOUTS": fold}):
        res, _ = check_case(device, case)
    ops = [n["op_type"] for n in res["plan"].graph.nodes]
    assert ("Concat" in ops) != fold and ("Gather" in ops) == fold


# ---- refusals (no device work) ---------------------------------------------------------------

def _graph_of(nodes, constants, tensors=()):
    from webgpu_trainer.engine.graph import Graph
    graph, _ = make_graph(nodes, list(tensors), [("input", ["N", 3, 4])], [("y", [])],
                          constants=constants)
    return Graph(graph)


def test_pad_mode_wrap_refused():
    from webgpu_trainer.engine.graph import GraphError
    g = _graph_of([node("Pad", ["input", "pads"], ["y"], name="/pad", mode="wrap")],
                  {"pads": _const([0, 1, 1, 0, 1, 1])})
    with pytest.raises(GraphError, match=r"/pad \(Pad\): mode 'wrap' is not supported"):
        g.shapes(2)


@pytest.mark.parametrize("mode,pads", [("reflect", [0, 3, 0, 0, 0, 0]),
                                       ("reflect", [0, 0, 0, 0, 0, 4]),
                                       ("edge", [0, 0, -1, 0, 0, 0])])
def test_pad_mode_pads_that_do_not_fit_refused(mode, pads):
    """input [N, 3, 4]: reflect needs 0 <= pad <= dim - 1, edge pad >= 0 (no crop)."""
    from webgpu_trainer.engine.graph import GraphError
    g = _graph_of([node("Pad", ["input", "pads"], ["y"], name="/pad", mode=mode)],
                  {"pads": _const(pads)})
    with pytest.raises(GraphError, match=rf"/pad \(Pad\): pads .* do not fit mode '{mode}'"):
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
    ("Pad", {"mode": "reflect"}, [[0, 1, 2, 1, 0, 2, 0, 3]]),
    ("Pad", {"mode": "edge"}, [[1, 0, 3, 0, 0, 2, 0, 5]]),
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


@pytest.mark.parametrize("sizes,used", [([1, 3, 2], [0, 2]), ([2, 2, 2], [1]),
                                        ([6], [0])])
def test_numpy_split_matches_torch(sizes, used):
    """cpu/layout.py's Split (input form, axis -2) in float64 against torch.split: forward,
    and the backward with only the ``used`` outputs in the loss (the others get no gradient)."""
    torch = pytest.importorskip("torch")
    from webgpu_trainer.cpu import layout
    rng = np.random.default_rng(len(sizes))
    x = rng.standard_normal((2, 6, 3))
    outs = [f"y{k}" for k in range(len(sizes))]
    n = {"name": "/split", "op_type": "Split", "inputs": ["x", "s"], "outputs": outs,
         "attrs": {"axis": -2}}
    ins = [x, np.asarray(sizes, np.int64)]
    ys, _ = layout.forward(n, ins, None)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.split(xt, sizes, dim=-2)
    for a, b in zip(ys, yt):
        np.testing.assert_array_equal(a, b.detach().numpy())
    dys = [rng.standard_normal(y.shape) if k in used else None for k, y in enumerate(ys)]
    sum((t * torch.tensor(d)).sum() for t, d in zip(yt, dys) if d is not None).backward()
    dx, ds = layout.backward(n, ins, ys, None, dys, None)
    assert ds is None
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_split_sizes_refused():
    from webgpu_trainer.engine.graph import GraphError
    g = _graph_of([node("Split", ["input", "sp"], ["a", "b"], name="/split", axis=2)],
                  {"sp": _const([1, 2])})
    with pytest.raises(GraphError, match=r"/split \(Split\): split \[1, 2\] does not cut axis 2 "
                                         r"of size 4 into 2 outputs"):
        g.shapes(2)


@pytest.mark.parametrize("dynamo,opset", [(False, 11), (False, 13), (True, 18)])
def test_torch_split_model(device, tmp_path, dynamo, opset):
    """``Tensor.split`` from both exporters (Split's attribute form at opset 11, input form
    from 13) imports and trains one step like torch."""
    torch = pytest.importorskip("torch")
    from torch_models import export_and_step

    class SplitNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.head = torch.nn.Linear(784, 24), torch.nn.Linear(16, 10)

        def forward(self, x):
            a, b, c = self.fc(x.flatten(1)).split([8, 8, 8], dim=1)
            return self.head(torch.cat([torch.tanh(a) * c, b], 1))

    torch.manual_seed(0)
    graph = export_and_step(device, SplitNet(), tmp_path / "split.onnx", dynamo, opset,
                            f"torch Split opset {opset}")
    assert "Split" in {n["op_type"] for n in graph["nodes"]}


@pytest.mark.parametrize("mode,torch_mode", [("reflect", "reflect"), ("edge", "replicate")])
def test_numpy_pad_modes_match_torch(mode, torch_mode):
    """Pad reflect / edge of the last two dims against F.pad (reflect / replicate) in float64:
    forward, and the backward (several padded cells copy one cell: their gradients add)."""
    torch = pytest.importorskip("torch")
    from webgpu_trainer.cpu import layout
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 5, 6))
    pads = [0, 0, 4, 2, 0, 0, 3, 5]  # ONNX: begins of every dim, then ends
    n = {"name": "/pad", "op_type": "Pad", "inputs": ["x", "p"], "outputs": ["y"],
         "attrs": {"mode": mode}}
    ins = [x, np.asarray(pads, np.int64)]
    (y,), _ = layout.forward(n, ins, None)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.pad(xt, (2, 5, 4, 3), mode=torch_mode)  # (w0, w1, h0, h1)
    np.testing.assert_array_equal(y, yt.detach().numpy())
    dy = rng.standard_normal(y.shape)
    yt.backward(torch.tensor(dy))
    dx = layout.backward(n, ins, [y], None, [dy], None)[0]
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dynamo,opset", [(False, 13), (False, 17), (True, 18)])
def test_torch_reflection_replication_pad_model(device, tmp_path, dynamo, opset):
    """nn.ReflectionPad2d and nn.ReplicationPad2d around Convs (Pad reflect / edge) from both
    exporters import and train one step like torch."""
    torch = pytest.importorskip("torch")
    from torch_models import export_and_step
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.ReflectionPad2d((1, 2, 3, 0)), nn.Conv2d(1, 3, 3, 2),
                                      nn.Tanh(), nn.ReplicationPad2d(2), nn.Conv2d(3, 2, 3, 2))
            self.head = nn.Linear(2 * 9 * 9, 10)

        def forward(self, x):
            return self.head(self.body(x).flatten(1))

    torch.manual_seed(0)
    graph = export_and_step(device, Net(), tmp_path / "pad.onnx", dynamo, opset,
                            f"torch Pad modes opset {opset}")
    modes = {n["attrs"].get("mode") for n in graph["nodes"] if n["op_type"] == "Pad"}
    assert modes == {"reflect", "edge"}, modes

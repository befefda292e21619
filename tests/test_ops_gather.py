"""Gather with constant indices on the native device against the float64 numpy engine
(tests/cases/gather.py), the numpy engine against torch, the refusals, and
``nn.TransformerEncoderLayer`` (``nn.MultiheadAttention``'s packed q/k/v is a Gather on
activations) from both exporters: the committed fixtures transformer_enc-ts17 / -dynamo18
(scripts/make_fixtures.py) against onnxruntime and torch, and training natively."""

import copy
import pathlib

import numpy as np
import pytest

from cases import gather, ids
from conftest import _record, f32, make_graph, node, rel_err, run
from harness import check_case, read_f32, read_flat

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", gather.CASES, ids=ids(gather.CASES))
def test_case(device, case):
    check_case(device, case)


# ---- the numpy engine against torch (float64) ------------------------------------------------

TORCH_CASES = [  # (x shape, axis, indices, index shape)
    ((4, 5, 3), 1, [4, -1, 0, 4, 2, 2], (2, 3)),
    ((4, 5, 3), 0, [-4], ()),
    ((3, 2, 6), -1, [5, 0, -6, 3], (4,)),
    ((7,), 0, [1, 1, 1], (3, 1)),
]


@pytest.mark.parametrize("k", range(len(TORCH_CASES)))
def test_numpy_engine_matches_torch(k):
    torch = pytest.importorskip("torch")
    from webgpu_trainer.cpu import gather as cpu_gather
    shape, axis, idx, ishape = TORCH_CASES[k]
    rng = np.random.default_rng(k)
    x = rng.standard_normal(shape)
    n = {"name": "/g", "op_type": "Gather", "inputs": ["x", "i"], "outputs": ["y"],
         "attrs": {"axis": axis}}
    i = np.asarray(idx, np.int64).reshape(ishape)
    (y,), _ = cpu_gather.forward(n, [x, i], None)
    xt = torch.tensor(x, requires_grad=True)
    ax = axis % len(shape)
    pos = torch.tensor(idx) % shape[ax]
    yt = torch.index_select(xt, ax, pos.reshape(-1)).reshape(
        shape[:ax] + ishape + shape[ax + 1:])
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=0, atol=0)
    dy = rng.standard_normal(y.shape)
    yt.backward(torch.tensor(dy))
    dx, di = cpu_gather.backward(n, [x, i], [y], None, [dy], None)
    assert di is None
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-12, atol=1e-12)


# ---- refusals (no device work) ---------------------------------------------------------------

def _gather_graph(constants, tensors=(), **attrs):
    from webgpu_trainer.engine.graph import Graph
    graph, _ = make_graph([node("Gather", ["input", "idx"], ["y"], name="/enc/Gather_3",
                                **attrs)], list(tensors), [("input", ["N", 6, 4])], [("y", [])],
                          constants=constants)
    return Graph(graph)


def test_indices_not_constant_refused():
    from webgpu_trainer.engine.graph import GraphError
    g = _gather_graph({}, tensors=[("idx", f32([1.0]), "param")], axis=1)
    with pytest.raises(GraphError, match=r"/enc/Gather_3 \(Gather\): input 1 'idx' \(indices\)"
                                         " is not a constant"):
        g.shapes(2)


@pytest.mark.parametrize("idx,axis,msg", [([6], 1, "index 6 out of range for axis 1 of size 6"),
                                          ([-7], 1, "index -7 out of range"),
                                          ([0], 3, "axis 3 out of range for rank 3")])
def test_bad_index_or_axis_refused(idx, axis, msg):
    from webgpu_trainer.engine.graph import GraphError
    g = _gather_graph({"idx": {"dtype": "int64", "shape": [1], "values": idx}}, axis=axis)
    with pytest.raises(GraphError, match=r"/enc/Gather_3 \(Gather\): " + msg):
        g.shapes(2)


def test_import_refuses_indices_computed_at_run_time(tmp_path):
    """A Gather whose indices come from activations (ArgMax of the input) is named, with
    why; the file is left as it was."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from webgpu_trainer import onnx_io
    table = numpy_helper.from_array(np.ones((784, 10), np.float32), "table")
    shape = numpy_helper.from_array(np.array([0, -1], np.int64), "shape")
    g = helper.make_graph(
        [helper.make_node("Reshape", ["input", "shape"], ["flat"]),
         helper.make_node("ArgMax", ["flat"], ["am"], axis=1, keepdims=0),
         helper.make_node("Gather", ["table", "am"], ["output"], name="/emb/Gather")],
        "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 28, 28])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 10])],
        [table, shape])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    before = path.read_bytes()
    with pytest.raises(onnx_io.OnnxImportError) as exc:
        onnx_io.load_bundle(path)
    assert "node /emb/Gather (Gather) input 1 'am' must be a constant but is computed at run " \
           "time" in str(exc.value)
    assert path.read_bytes() == before


# ---- nn.TransformerEncoderLayer from both exporters ----------------------------------------

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENCODER = [ROOT / "tests" / "fixtures" / "models" / f"transformer_enc-{e}.onnx"
           for e in ("ts17", "dynamo18")]
ENC_RTOL = 1e-4


def _ratio0(graph):
    """A copy of ``graph`` whose Dropout nodes have ratio 0 (torch's references used p=0)."""
    graph = copy.deepcopy(graph)
    graph["constants"]["__ratio0"] = {"dtype": "float32", "shape": [], "values": [0.0]}
    for n in graph["nodes"]:
        if n["op_type"] == "Dropout":
            n["inputs"] = [n["inputs"][0], "__ratio0"] + n["inputs"][2:]
            n["attrs"]["ratio"] = 0.0
    return graph


@pytest.mark.parametrize("path", ENCODER, ids=[p.stem for p in ENCODER])
def test_transformer_encoder_layer(device, path):
    """Imports with its three Gathers; eval output == onnxruntime's (numpy engine in float64 and
    the GPU, <= 1e-4); one train step's loss and every parameter gradient == torch's (<= 1e-4
    relative each); five SGD steps on the batch lower the loss."""
    ort = pytest.importorskip("onnxruntime")
    from webgpu_trainer import onnx_io
    from webgpu_trainer.cpu.engine import Engine, params_from_blob
    from webgpu_trainer.engine.train import optim
    from webgpu_trainer.engine.tools import parity
    graph, blob = onnx_io.load_bundle(path)
    ref = dict(np.load(path.with_suffix(".npz")))
    assert sum(n["op_type"] == "Gather" for n in graph["nodes"]) == 3
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, {sess.get_inputs()[0].name: ref["x"]})[0]
    assert rel_err(want, ref["out"]) <= ENC_RTOL  # onnxruntime agrees with torch
    eng = Engine(graph, params_from_blob(graph, blob), np.float64)
    vals, _, _ = eng.forward(ref["x"], train=False)
    assert rel_err(vals[graph["outputs"][0]["name"]], want) <= ENC_RTOL

    labels = np.asarray(ref["labels"], np.uint32)
    plan = run(parity.load(device, _ratio0(graph), blob, len(labels), ref["x"].tobytes(),
                           labels.tobytes(), loss=str(ref["loss_kind"])))
    parity.run_step(device, plan, 1, 0, train=False)
    got = run(read_f32(device, plan.acts[plan.graph.output]))
    err = rel_err(got, want)
    _record(f"gpu-ort {path.stem}", "fwd", err)
    assert err <= ENC_RTOL, f"eval output vs onnxruntime: {err:.3g}"
    parity.run_step(device, plan, 1, 0)
    loss = float(np.frombuffer(run(device.read(plan.metrics, 0, 4)), np.float32)[0])
    assert abs(loss - float(ref["loss"])) <= ENC_RTOL * abs(float(ref["loss"]))
    grads = {k[5:]: v for k, v in ref.items() if k.startswith("grad/")}
    assert set(grads) == set(plan.trainable)
    for name, g in grads.items():
        err = rel_err(run(read_flat(device, plan, plan.G, name)), g)
        _record(f"gpu {path.stem}", "grad", err)
        assert err <= ENC_RTOL, f"gradient of {name}: {err:.3g}"

    opt = optim.SGD(0.05, momentum=0.9)
    run(opt.attach(plan))
    program = parity.program(device, plan, opt=opt)
    for t in range(1, 6):
        parity.run_step(device, plan, t, 0, opt=opt, prog=program)
    losses = np.frombuffer(run(device.read(plan.metrics, 0, 40)), np.float32)[::2]
    assert np.isfinite(losses).all() and losses[-1] < 0.5 * losses[0], losses

"""Dropouts of constant ratio 0 as Identity views (engine/rewrites/dropouts.py,
``Builder.FOLD_DROPOUTS``): which nodes fold and which stay; a model exported in training mode
with nn.Dropout(0.0) trains one step as torch does in float64, and beside an nn.Dropout(0.5)
(whose Philox salt must not move) gives the same bits as without the fold, two dispatches
fewer (one forward, one backward)."""

import numpy as np
import pytest

from conftest import GRAD_RTOL, run
from harness import builder_patch, one_step
from webgpu_trainer.engine.graph import Graph
from webgpu_trainer.engine.rewrites import dropouts

torch = pytest.importorskip("torch")
nn = torch.nn
BATCH = 6


def _graph(dropout, extra_nodes=(), constants=None):
    nodes = [dropout, *extra_nodes]
    return Graph({"name": "m", "nodes": nodes, "tensors": [], "constants": constants or {},
                  "inputs": [{"name": "x", "dims": ["N", 5]}, {"name": "r", "dims": []}],
                  "outputs": [{"name": nodes[-1]["outputs"][0], "dims": ["N", 5]}],
                  "opset": 13})


def _dropout(inputs, outputs=("y", "mask"), **attrs):
    return {"name": "d", "op_type": "Dropout", "inputs": list(inputs), "outputs": list(outputs),
            "attrs": attrs}


def _const(v):
    return {"dtype": "float32", "shape": [], "values": [v]}


def _ops(g):
    return [n["op_type"] for n in g.nodes]


@pytest.mark.parametrize("dropout, constants, folds", [
    (_dropout(["x", "zero", "t"]), {"zero": _const(0.0)}, True),
    (_dropout(["x", "zero"], outputs=["y"]), {"zero": _const(0.0)}, True),
    (_dropout(["x"], ratio=0.0), {}, True),  # opset < 12: the attribute
    (_dropout(["x", "tenth", "t"]), {"tenth": _const(0.1)}, False),
    (_dropout(["x", "r", "t"]), {}, False),  # a graph input decides it
    (_dropout(["x"]), {}, False),  # no ratio at all: 0.5
    (_dropout(["x", "two", "t"]), {"two": {"dtype": "float32", "shape": [2],
                                            "values": [0.0, 0.0]}}, False),
], ids=["input_0", "no_mask_output", "attribute_0", "ratio_0.1", "ratio_from_an_input",
        "default_ratio", "not_one_value"])
def test_which_dropouts_fold(dropout, constants, folds):
    g = _graph(dropout, constants=constants)
    out = dropouts.fold(g, {})
    if not folds:
        assert out is g
        return
    (node,) = out.nodes
    assert (node["op_type"], node["name"], node["inputs"], node["outputs"]) == \
        ("Identity", "d", ["x"], ["y"])


def test_a_read_or_kept_mask_stays():
    zero = {"zero": _const(0.0)}
    neg = {"name": "n", "op_type": "Identity", "inputs": ["mask"], "outputs": ["nm"], "attrs": {}}
    g = _graph(_dropout(["x", "zero", "t"]), [neg], zero)
    assert _ops(dropouts.fold(g, {})) == ["Dropout", "Identity"]
    g = _graph(_dropout(["x", "zero", "t"]), constants=zero)
    assert _ops(dropouts.fold(g, {}, keep={"mask"})) == ["Dropout"]
    assert _ops(dropouts.fold(g, {}, keep={"y"})) == ["Identity"]  # y is still there


class _Net(nn.Module):
    """Linear -> Dropout(p0) -> ReLU -> Dropout(p1) -> Linear -> LogSoftmax."""

    def __init__(self, p0, p1):
        super().__init__()
        torch.manual_seed(3)
        self.fc1, self.fc2 = nn.Linear(7, 12), nn.Linear(12, 4)
        self.d0, self.d1 = nn.Dropout(p0), nn.Dropout(p1)

    def forward(self, x):
        return torch.log_softmax(self.fc2(self.d1(torch.relu(self.d0(self.fc1(x))))), -1)


def _export(model, path):
    from webgpu_trainer import onnx_io
    torch.onnx.export(model.train(), torch.zeros(2, 7), str(path), opset_version=17,
                      dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["input"],
                      output_names=["output"],
                      dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})
    return onnx_io.load_bundle(path)


def _data():
    rng = np.random.default_rng(9)
    return rng.standard_normal((BATCH, 7)).astype(np.float32), np.arange(BATCH) % 4


def _step(device, graph, blob, fold, tiled):
    x, labels = _data()
    with builder_patch({"FOLD_DROPOUTS": fold, "TILED": tiled}):
        return run(one_step(device, graph, blob, x, labels, seed=17))


@pytest.mark.parametrize("tiled", [False, True], ids=["cpu_kernels", "gpu_kernels"])
def test_ratio_zero_trains_as_torch(device, tmp_path, tiled):
    model = _Net(0.0, 0.0)
    graph, blob = _export(model, tmp_path / "m.onnx")
    assert _ops(Graph(graph)).count("Dropout") == 2
    res = _step(device, graph, blob, True, tiled)
    assert "Dropout" not in _ops(res["plan"].graph)
    x, labels = _data()
    ref = model.double().train()
    loss = nn.functional.nll_loss(ref(torch.from_numpy(x).double()),
                                  torch.from_numpy(labels))
    loss.backward()
    assert abs(res["loss"] - loss.item()) <= 1e-5 * abs(loss.item())
    for name, p in ref.named_parameters():
        want = p.grad.numpy()
        err = np.abs(res["grads"][name] - want).max() / max(np.abs(want).max(), 1e-30)
        assert err <= GRAD_RTOL, (name, err)


@pytest.mark.parametrize("tiled", [False, True], ids=["cpu_kernels", "gpu_kernels"])
def test_same_bits_two_dispatches_fewer(device, tmp_path, tiled):
    graph, blob = _export(_Net(0.0, 0.5), tmp_path / "m.onnx")
    on, off = _step(device, graph, blob, True, tiled), _step(device, graph, blob, False, tiled)
    assert _ops(on["plan"].graph).count("Dropout") == 1
    assert _ops(off["plan"].graph).count("Dropout") == 2
    assert len(on["plan"].fwd_train) == len(off["plan"].fwd_train) - 1
    assert len(on["plan"].bwd) == len(off["plan"].bwd) - 1
    assert on["loss"] == off["loss"]
    for name, g in off["grads"].items():  # the 0.5 Dropout dropped the same units
        assert np.array_equal(on["grads"][name], g), name
    kept = off["acts"][off["plan"].graph.output]
    assert np.array_equal(on["acts"][on["plan"].graph.output], kept)

"""A model whose graph output (what the loss reads) is also read by another node: an exported
classifier returning (logits, probabilities). The loss's gradient of the output must reach the
layers before it on the native GPU and on the numpy engine, as torch computes it (the second
output gets no loss, so the node reading the output contributes nothing). Before the fix the
GPU plan gave the output one gradient buffer for its one reader, the Softmax, whose backward
overwrote the loss's gradient with zeros: every parameter gradient was 0."""

import warnings

import numpy as np
import pytest

from conftest import rel_err, run
from harness import read_flat
from torch_models import _onnx_names

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


def _export(torch, path, end):
    """Linear -> Tanh -> Linear (logits) -> [LogSoftmax]: outputs ("output", "probs"), probs
    computed from the first output (Softmax of the logits, or Exp of the log-probabilities)."""

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(6, 8), torch.nn.Linear(8, 5)

        def forward(self, x):
            out = self.fc2(torch.tanh(self.fc1(x)))
            if end == "log_softmax":
                out = torch.log_softmax(out, dim=1)
                return out, out.exp()
            return out, torch.softmax(out, dim=1)

    torch.manual_seed(3)
    model = Net().eval()
    x = np.random.default_rng(4).standard_normal((4, 6)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.from_numpy(x),), str(path), dynamo=False,
                          opset_version=17, input_names=["input"],
                          output_names=["output", "probs"])
    return model, x


@pytest.mark.parametrize("end, loss", [("logits", "cross_entropy"), ("log_softmax", "nll")])
def test_output_read_by_another_node_trains_like_torch(device, tmp_path, end, loss):
    """Every parameter gradient of one step, GPU (float32) and numpy (float64), against
    torch's float64 gradient of the loss of the first output."""
    torch = pytest.importorskip("torch")
    from webgpu_trainer import onnx_io
    from webgpu_trainer.cpu.engine import Engine, params_from_blob
    from webgpu_trainer.engine.tools import parity
    model, x = _export(torch, tmp_path / "two_outputs.onnx", end)
    labels = np.array([0, 3, 4, 1])
    graph, blob = onnx_io.load_bundle(tmp_path / "two_outputs.onnx")
    out = graph["outputs"][0]["name"]
    assert [o["name"] for o in graph["outputs"]] == ["output", "probs"]
    assert [n["op_type"] for n in graph["nodes"] if out in n["inputs"]] == \
        ["Softmax" if end == "logits" else "Exp"]

    ref = model.double()
    first = ref(torch.from_numpy(x).double())[0]
    fn = torch.nn.functional.cross_entropy if loss == "cross_entropy" else \
        torch.nn.functional.nll_loss
    value = fn(first, torch.from_numpy(labels))
    value.backward()
    names, _ = _onnx_names(graph, blob, model)

    want = Engine(graph, params_from_blob(graph, blob), np.float64).step(
        np.float64(x), labels, loss=loss)
    assert abs(want["loss"] - value.item()) <= 1e-12
    plan = run(parity.load(device, graph, blob, 4, x.tobytes(),
                           labels.astype(np.uint32).tobytes(), loss=loss))
    parity.run_step(device, plan, 1, 0)
    got_loss = float(np.frombuffer(run(device.read(plan.metrics, 0, 4)), np.float32)[0])
    assert rel_err(got_loss, value.item()) <= 1e-6
    for tname, p in ref.named_parameters():
        g = p.grad.numpy()
        assert np.abs(g).max() > 1e-3, tname  # a gradient that could be lost
        assert rel_err(want["grads"][names[tname]].reshape(g.shape), g) <= 1e-10, tname
        gpu = run(read_flat(device, plan, plan.G, names[tname])).reshape(g.shape)
        assert rel_err(gpu, g) <= 1e-5, f"GPU gradient of {tname}: {rel_err(gpu, g):.3g}"

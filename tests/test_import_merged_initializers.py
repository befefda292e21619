"""Exporters merge equal initializers (torch.onnx.export(dynamo=True) writes the two
LayerNorms' weights, all ones, as one ``ln1.weight`` used by both nodes; the same for the
zero biases). The import gives each further trainable use its own copy, so that training
does not tie layers torch trains apart: three SGD steps on the native device match torch's
(float64) losses and final weights within 1e-4. Skips without torch and onnxscript."""

import warnings

import numpy as np
import pytest

from conftest import rel_err, run

RTOL = 1e-4
STEPS, LR, BATCH = 3, 0.5, 4

pytestmark = pytest.mark.every_backend


def _model(torch):
    class TwoNorms(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.ln1 = torch.nn.Linear(784, 16), torch.nn.LayerNorm(16)
            self.fc2, self.ln2 = torch.nn.Linear(16, 16), torch.nn.LayerNorm(16)
            self.fc3 = torch.nn.Linear(16, 10)

        def forward(self, x):
            x = torch.relu(self.ln1(self.fc1(x.flatten(1))))
            return self.fc3(torch.relu(self.ln2(self.fc2(x))))
    torch.manual_seed(0)
    return TwoNorms()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    from webgpu_trainer import onnx_io
    model = _model(torch).eval()
    x = np.random.default_rng(3).standard_normal((BATCH, 1, 28, 28)).astype(np.float32)
    path = tmp_path_factory.mktemp("merged") / "two_norms.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.from_numpy(x),), str(path), dynamo=True,
                          input_names=["input"], output_names=["output"])
    graph, blob = onnx_io.load_bundle(path)
    return torch, model, x, graph, blob


def test_each_norm_gets_its_own_parameters(exported):
    """The file holds one ``ln1.weight`` for both LayerNorms (the exporter's merge: the
    premise); the bundle has a trainable copy for the second, named in a note."""
    _, _, _, graph, _ = exported
    norms = [n for n in graph["nodes"] if n["op_type"] == "LayerNormalization"]
    assert len(norms) == 2
    first, second = norms[0]["inputs"][1:3], norms[1]["inputs"][1:3]
    assert first == ["ln1.weight", "ln1.bias"]
    assert second == [f"ln1.weight.{norms[1]['name']}", f"ln1.bias.{norms[1]['name']}"]
    roles = {t["name"]: (t["role"], t.get("source")) for t in graph["tensors"]}
    assert roles[second[0]] == ("param", {"copy_of": "ln1.weight", "node": norms[1]["name"],
                                          "input": 1})
    assert any(f"trains its own copy {second[0]!r}" in n for n in graph["notes"])


def test_training_matches_torch_which_does_not_tie(device, exported):
    """Three SGD steps (lr 0.5): each step's loss and the final weights of both LayerNorms
    against torch in float64. Tied (before), the second step's loss was already off, and the
    two LayerNorms ended with one set of weights."""
    torch, model, x, graph, blob = exported
    from webgpu_trainer.cpu.engine import params_from_blob
    from webgpu_trainer.engine.tools import parity
    labels = np.arange(BATCH) % 10
    ref = _model(torch).double()
    ref.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(ref.parameters(), lr=LR)
    want = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ref(torch.from_numpy(x).double()),
                                                 torch.from_numpy(labels))
        loss.backward()
        opt.step()
        want.append(loss.item())
    case = {"name": "two_norms", "graph": graph, "weights": parity.b64(blob),
            "batch": BATCH, "x": parity.b64(x.tobytes()),
            "labels": parity.b64(labels.astype(np.uint32).tobytes()),
            "loss": "cross_entropy", "optimizer": {"name": "sgd", "lr": LR}, "steps": STEPS}
    got = run(parity.run_case(device, case))
    for step, (g, w) in enumerate(zip(got["losses"], want)):
        assert abs(g - w) <= RTOL * abs(w), (step, g, w)
    weights = params_from_blob(graph, parity.unb64(got["weights"]))
    norms = [n for n in graph["nodes"] if n["op_type"] == "LayerNormalization"]
    for node, ln in zip(norms, (ref.ln1, ref.ln2)):
        for name, p in zip(node["inputs"][1:3], (ln.weight, ln.bias)):
            assert rel_err(weights[name], p.detach().numpy()) <= RTOL, name
    assert not np.allclose(weights["ln1.weight"], weights[norms[1]["inputs"][1]])


def test_one_module_used_twice_stays_tied(tmp_path):
    """The untying reads the module of each use (dynamo's ``pkg.torch.onnx.name_scopes``): a
    LayerNorm applied twice is one parameter in torch, and stays one (a note says tied)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    from webgpu_trainer import onnx_io

    class SharedNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(784, 16), torch.nn.Linear(16, 16)
            self.ln, self.fc3 = torch.nn.LayerNorm(16), torch.nn.Linear(16, 10)

        def forward(self, x):
            x = torch.relu(self.ln(self.fc1(x.flatten(1))))
            return self.fc3(torch.relu(self.ln(self.fc2(x))))
    torch.manual_seed(0)
    path = tmp_path / "shared.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(SharedNorm().eval(), (torch.zeros(BATCH, 1, 28, 28),), str(path),
                          dynamo=True, input_names=["input"], output_names=["output"])
    graph, _ = onnx_io.load_bundle(path)
    norms = [n for n in graph["nodes"] if n["op_type"] == "LayerNormalization"]
    assert len(norms) == 2
    assert norms[0]["inputs"][1:3] == norms[1]["inputs"][1:3] == ["ln.weight", "ln.bias"]
    notes = " ".join(graph.get("notes", []))
    assert "ln.weight" in notes and "tied" in notes, notes

"""A text-style model on token inputs, end to end natively: ``nn.Embedding`` -> mean over the
tokens (ReduceMean) -> ``nn.Linear`` -> 4 classes, exported with both exporters (dynamic batch)
from an int64 ``[N, 16]`` input; the synthetic ``markers`` tokens dataset
(host/datasets/tokens.py: the label is which of 4 marker tokens appears most).

Asserted: the import (int64 input, no refusal), the device's forward vs onnxruntime and its
first-step gradients vs torch (float64), training steps on the device agreeing with the numpy
engine step by step, and ``webgpu-trainer data --markers`` then ``train --data markers`` from
the CLI reaching >= 0.95 test accuracy, its exported .onnx run by onnxruntime, and
``predict`` on a test row agreeing with onnxruntime."""

import json
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest

from conftest import FWD_RTOL, GRAD_RTOL, assert_close, run
from harness import one_step
from torch_models import check_engines_agree

torch = pytest.importorskip("torch")

VOCAB, DIM, LENGTH, CLASSES = 32, 16, 16, 4
EXE = [sys.executable, "-m", "webgpu_trainer.cli.main"]


class TextNet(torch.nn.Module):
    """Token ids [N, T] -> Embedding(32, 16) -> mean over T -> Linear(16, 4)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, DIM)
        self.fc = torch.nn.Linear(DIM, CLASSES)

    def forward(self, x):
        return self.fc(self.emb(x).mean(1))


def _export(net, path, dynamo, opset=None):
    """``net`` exported to ``path`` (opset default 18 with dynamo, else 13)."""
    x = torch.zeros(2, LENGTH, dtype=torch.int64)
    if dynamo:
        torch.onnx.export(net, (x,), str(path), dynamo=True, opset_version=opset or 18,
                          input_names=["tokens"], output_names=["scores"],
                          dynamic_shapes=({0: torch.export.Dim("N")},), verbose=False)
    else:
        torch.onnx.export(net, (x,), str(path), dynamo=False, opset_version=opset or 13,
                          input_names=["tokens"], output_names=["scores"],
                          dynamic_axes={"tokens": {0: "N"}, "scores": {0: "N"}})


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{dynamo: (torch module, path)}, made once (read only afterwards); the dynamo exporter's
    only where onnxscript is installed."""
    try:
        import onnxscript  # noqa: F401
        exporters = (False, True)
    except ImportError:
        exporters = (False,)
    torch.manual_seed(0)
    net = TextNet()
    out = {}
    for dynamo in exporters:
        path = tmp_path_factory.mktemp("text") / f"text_{int(dynamo)}.onnx"
        _export(net, path, dynamo)
        out[dynamo] = net, path
    return out


def _check_step(device, path, graph, blob, net, x, labels, rename=None, zero=()):
    """One step of the bundle on ``device`` on ids ``x``: its forward against onnxruntime's,
    its loss and every gradient against ``net``'s (copied to float64) in torch; ``rename``:
    {bundle tensor: torch parameter} where the exporter renamed one; ``zero``: parameters
    whose gradient is exactly 0 (float32 noise within 1e-6 here, no relative error to
    take). Returns the step's result."""
    res = run(one_step(device, graph, blob, x, labels))
    want = ort.InferenceSession(str(path)).run(None, {"tokens": x})[0]
    assert_close(res["acts"][graph["outputs"][0]["name"]], want, FWD_RTOL, "forward vs ort")
    net64 = type(net)().double()
    net64.load_state_dict(net.state_dict())
    loss = torch.nn.functional.cross_entropy(net64(torch.tensor(x)), torch.tensor(labels))
    loss.backward()
    assert_close(res["loss"], loss.item(), FWD_RTOL, "loss")
    grads = {(rename or {}).get(k, k): v for k, v in res["grads"].items()}
    assert set(grads) == {n for n, _ in net64.named_parameters()}
    for name, p in net64.named_parameters():
        if name in zero:
            assert np.abs(grads[name]).max() <= 1e-6 and np.abs(p.grad.numpy()).max() <= 1e-12
            continue
        assert_close(grads[name], p.grad.numpy().reshape(grads[name].shape), GRAD_RTOL,
                     f"gradient of {name}")
    return res


def _imported(net_class, seed, path, dynamo=False):
    """``(net, graph, blob)``: ``net_class()`` made under torch seed ``seed``, exported to
    ``path`` (skipped without onnxscript for the dynamo exporter) and imported."""
    if dynamo:
        pytest.importorskip("onnxscript")
    from webgpu_trainer.onnx_io import load_bundle
    torch.manual_seed(seed)
    net = net_class()
    _export(net, path, dynamo)
    return (net, *load_bundle(path))


def _markers(train, test, seed=0):
    from webgpu_trainer.host.datasets import tokens
    return tokens.markers(train=train, test=test, seed=seed)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_exported_forward_and_gradients(device, exported, dynamo):
    """Import: int64 input [N, 16], nodes Gather, ReduceMean, Gemm; the device's forward vs
    onnxruntime (1e-5 relative); its loss and first-step gradients vs torch in float64."""
    if dynamo not in exported:
        pytest.skip("onnxscript not installed")
    from webgpu_trainer.onnx_io import load_bundle
    net, path = exported[dynamo]
    graph, blob = load_bundle(path)
    assert graph["inputs"][0]["dtype"] == "int64"
    assert graph["inputs"][0]["shape"][1:] == [LENGTH]
    assert [n["op_type"] for n in graph["nodes"]] == ["Gather", "ReduceMean", "Gemm"]
    a = _markers(8, 2)
    x, labels = a.train_x.astype(np.int64), a.train_y.astype(np.int64)
    res = run(one_step(device, graph, blob, x, labels))
    want = ort.InferenceSession(str(path)).run(None, {"tokens": x})[0]
    assert_close(res["acts"][graph["outputs"][0]["name"]], want, FWD_RTOL, "forward vs ort")
    net64 = TextNet().double()
    net64.load_state_dict(net.state_dict())
    loss = torch.nn.functional.cross_entropy(net64(torch.tensor(x)), torch.tensor(labels))
    loss.backward()
    assert_close(res["loss"], loss.item(), FWD_RTOL, "loss")
    grads = {n: p.grad.numpy() for n, p in net64.named_parameters()}
    assert set(res["grads"]) == set(grads)
    for name, g in grads.items():
        assert_close(res["grads"][name], g.reshape(res["grads"][name].shape), GRAD_RTOL,
                     f"gradient of {name}")


def _split(arrays, which):
    from webgpu_trainer.engine.train.data import DataSpec, Split
    spec = DataSpec("markers", "markers", "tokens", [LENGTH], arrays.classes,
                    dtype="uint16", vocab_size=VOCAB)
    x, y = arrays.split(which)
    return Split(x.tobytes(), y.tobytes(), len(y), y.tobytes(), spec)


def test_trains_natively_like_numpy(device, exported):
    """12 Adam steps (batch 16, lr 0.05) on the device and on the numpy engine: the same loss
    at every step (1e-4 relative), and the loss falls."""
    from webgpu_trainer.onnx_io import load_bundle
    graph, blob = load_bundle(exported[False][1])
    cfg = {"batch_size": 16, "epochs": 1, "seed": 3, "init": "finetune", "eval_images": 16,
           "val_images": 16, "report_every": 1, "optimizer": "adam", "lr": 0.05}
    a = _markers(12 * 16 + 16, 16, seed=1)
    check_engines_agree(device, graph, blob, cfg,
                        lambda: (_split(a, "train"), _split(a, "test")), 12, 0.7)


def test_cli_data_markers_then_train(exported, tmp_path):
    """``data --markers`` writes the tokens dataset (manifest: kind, vocab_size, uint16
    shards); ``train --data markers`` (Adam, 5 epochs: 140 steps) reaches >= 0.95 test
    accuracy, and its model.onnx classifies the test rows in onnxruntime as well."""
    root = tmp_path / "data"
    out = subprocess.run(EXE + ["data", "--markers", "--data-root", str(root)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    m = json.loads((root / "markers" / "manifest.json").read_text())
    assert (m["kind"], m["sample_shape"], m["vocab_size"]) == ("tokens", [LENGTH], VOCAB)
    assert m["splits"]["train"]["images"]["dtype"] == "uint16"
    run_dir = tmp_path / "run"
    out = subprocess.run(EXE + ["train", str(exported[False][1]), "--data", "markers",
                                "--data-root", str(root), "--epochs", "5", "--optimizer",
                                "adam", "--lr", "0.02", "--out", str(run_dir)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    acc = float(out.stdout.split("test acc ")[1].split()[0])
    assert acc >= 0.95, out.stdout[-500:]
    a = _markers(2000, 500)  # the dataset data --markers wrote (same seed)
    scores = ort.InferenceSession(str(run_dir / "model.onnx")).run(
        None, {"tokens": a.test_x.astype(np.int64)})[0]
    assert np.mean(scores.argmax(1) == a.test_y) >= 0.95
    out = subprocess.run(EXE + ["predict", str(run_dir / "model.onnx"), "--data", "markers",
                                "--data-root", str(root), "--index", "3"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"(label marker {a.test_y[3] + 1}): predicted marker {a.test_y[3] + 1}" in out.stdout
    assert float(out.stdout.split("max |engine - onnxruntime| = ")[1].split()[0]) < 1e-5


class MaskedNet(torch.nn.Module):
    """Embedding(32, 8, padding_idx=0) -> the mean over the non-padding tokens (mask
    ``x != 0``: Equal, Not, Unsqueeze, Cast as exported) -> Linear(8, 4)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 8, padding_idx=0)
        self.fc = torch.nn.Linear(8, CLASSES)

    def forward(self, x):
        m = (x != 0).unsqueeze(-1).float()
        return self.fc((self.emb(x) * m).sum(1) / m.sum(1).clamp(min=1))


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_padding_mask_folded_to_lookup(device, exported, tmp_path, dynamo):
    """The padding mask computed from the ids imports as a lookup into a constant table (a
    note says so; no node but Gathers reads the ids); forward vs onnxruntime, gradients vs
    torch (whose padding row's gradient is 0, as the mask makes it here); opsets 20 / 21."""
    if dynamo not in exported:
        pytest.skip("onnxscript not installed")
    from webgpu_trainer.onnx_io import load_bundle
    torch.manual_seed(1)
    net = MaskedNet()
    path = tmp_path / "masked.onnx"
    _export(net, path, dynamo, opset=21 if dynamo else 20)
    graph, blob = load_bundle(path)
    assert graph["opset"] == (21 if dynamo else 20)
    readers = [n["op_type"] for n in graph["nodes"] if "tokens" in n["inputs"]]
    assert readers == ["Gather", "Gather"]
    assert any("became lookups into constant tables" in n for n in graph["notes"])
    x = _markers(6, 2).train_x.astype(np.int64)
    x[:, 10:] = 0  # padding
    x[2, :] = 0  # a row of padding only (the clamp keeps its count 1)
    res = _check_step(device, path, graph, blob, net, x, np.arange(6) % CLASSES)
    assert not np.any(res["grads"]["emb.weight"][0])


class FilledNet(torch.nn.Module):
    """``masked_fill`` of the padding positions: Where(bool mask, activation, 0), not foldable
    into a float lookup."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 8)
        self.fc = torch.nn.Linear(8, CLASSES)

    def forward(self, x):
        return self.fc(self.emb(x).masked_fill((x == 0).unsqueeze(-1), 0.0).mean(1))


def test_bool_mask_on_activations_refused(tmp_path):
    """The import refuses naming the node that reads the ids, and leaves the file as it was."""
    from webgpu_trainer.onnx_io import OnnxImportError, load_bundle
    path = tmp_path / "filled.onnx"
    _export(FilledNet(), path, False)
    before = path.read_bytes()
    with pytest.raises(OnnxImportError, match=r"input 'tokens' holds integers \(token ids\); "
                                              r"the engine reads them only as the indices of "
                                              r"a Gather \(nn.Embedding\), but node /Equal "
                                              r"\(Equal\) reads it as input 0"):
        load_bundle(path)
    assert path.read_bytes() == before


class PositionsNet(torch.nn.Module):
    """Token and position embeddings, the positions from ``torch.arange(x.shape[1])``: a Shape
    node reads the int64 ids (their dims only) -> mean over T -> Linear(8, 4)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 8)
        self.pos = torch.nn.Embedding(LENGTH, 8)
        self.fc = torch.nn.Linear(8, CLASSES)

    def forward(self, x):
        positions = torch.arange(x.shape[1], device=x.device)
        return self.fc((self.emb(x) + self.pos(positions)).mean(1))


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_shape_of_the_ids_is_read(device, tmp_path, dynamo):
    """A Shape reading the ids imports (only Gathers read them once it is folded); forward vs
    onnxruntime, loss and first-step gradients of both tables vs torch in float64."""
    path = tmp_path / "positions.onnx"
    net, graph, blob = _imported(PositionsNet, 2, path, dynamo)
    assert [n["op_type"] for n in graph["nodes"] if "tokens" in n["inputs"]] == ["Gather"]
    # the dynamo exporter folds pos.weight[arange(16)] (a static length) into an initializer
    # of its own: the same [16, 8] values, trained under another name
    other = {t["name"] for t in graph["tensors"]} - {"emb.weight", "fc.weight", "fc.bias"}
    assert len(other) == 1
    _check_step(device, path, graph, blob, net, _markers(6, 2).train_x.astype(np.int64),
                np.arange(6) % CLASSES, rename={other.pop(): "pos.weight"})


class HFStyleNet(torch.nn.Module):
    """Hugging Face's embeddings: position ids ``arange(t).unsqueeze(0).expand(n, t)`` and
    token type ids ``zeros_like(ids)``, each looked up in a table of its own, summed with the
    token embedding."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 8)
        self.pos = torch.nn.Embedding(LENGTH, 8)
        self.typ = torch.nn.Embedding(2, 8)
        self.fc = torch.nn.Linear(8, CLASSES)

    def forward(self, x):
        n, t = x.shape
        positions = torch.arange(t, device=x.device).unsqueeze(0).expand(n, t)
        types = torch.zeros_like(x)
        return self.fc((self.emb(x) + self.pos(positions) + self.typ(types)).mean(1))


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_same_ids_for_every_sample_are_looked_up_once(device, tmp_path, dynamo):
    """HF-style position and token type ids (the same [1, T] for every sample, made from the
    ids' shape): each Gather reads one constant row and an Expand with ``batch_axes`` repeats
    its output for the batch (it was refused: "depends on the batch size"). Forward vs
    onnxruntime at two batch sizes, loss and first-step gradients of all three tables vs
    torch in float64 (the type table's row 0 sums every token of every sample); the export
    (weights written into the original graph) runs in onnxruntime at another batch."""
    from webgpu_trainer.onnx_io import export_onnx
    path = tmp_path / "hf.onnx"
    net, graph, blob = _imported(HFStyleNet, 3, path, dynamo)
    lookups = [n for n in graph["nodes"] if n["op_type"] == "Gather"
               and "tokens" not in n["inputs"]]
    expands = [n for n in graph["nodes"] if n["op_type"] == "Expand"]
    if not dynamo:  # the dynamo exporter may fold a static-length lookup into a tensor
        assert len(lookups) == 2 and len(expands) == 2, [n["op_type"] for n in graph["nodes"]]
    assert all(n["attrs"].get("batch_axes") == [0] for n in expands)
    rename = {}
    other = {t["name"] for t in graph["tensors"]} - {
        "emb.weight", "pos.weight", "typ.weight", "fc.weight", "fc.bias"}
    for name in other:  # a table the dynamo exporter renamed: matched by its shape
        shape = next(t["shape"] for t in graph["tensors"] if t["name"] == name)
        rename[name] = "pos.weight" if shape[0] == LENGTH else "typ.weight"
    a = _markers(6, 2)
    for n in (6, 3):
        x = a.train_x[:n].astype(np.int64)
        res = _check_step(device, path, graph, blob, net, x, np.arange(n) % CLASSES,
                          rename=rename)
    assert np.abs(res["grads"][next((k for k, v in rename.items() if v == "typ.weight"),
                                    "typ.weight")][1]).max() == 0  # row 1 is never read
    out = tmp_path / "exported.onnx"  # the weights written back into the original graph
    out.write_bytes(export_onnx(path, blob, {}))
    x5 = {"tokens": a.train_x[:5].astype(np.int64)}
    got = ort.InferenceSession(str(out)).run(None, x5)[0]
    want = ort.InferenceSession(str(path)).run(None, x5)[0]
    assert got.shape == (5, CLASSES) and np.array_equal(got, want)


class PerSampleIdsNet(HFStyleNet):
    """Position ids that differ from sample to sample (``arange(n * t)`` folded into rows):
    they follow the batch in a way no one row can stand for."""

    def forward(self, x):
        n, t = x.shape
        positions = torch.arange(n * t, device=x.device).reshape(n, t) % t
        positions = positions + (torch.arange(n, device=x.device) % 2).unsqueeze(1)
        return self.fc((self.emb(x) + self.pos(positions % t)).mean(1))


def test_ids_that_differ_per_sample_are_still_refused(tmp_path):
    from webgpu_trainer.onnx_io import OnnxImportError, load_bundle
    path = tmp_path / "per-sample.onnx"
    _export(PerSampleIdsNet(), path, False)
    with pytest.raises(OnnxImportError, match=r"node /pos/Gather \(Gather\) input 1 .* depends "
                                              r"on the batch size"):
        load_bundle(path)


class BertStyleNet(torch.nn.Module):
    """BertModel's defaults without an attention mask given: ``torch.ones(n, t)`` as the mask,
    its additive form ``(1 - mask[:, None, :]) * -10000`` added to the scores, position and
    token type ids from the ids' shape, LayerNorm, one attention head."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 8)
        self.pos = torch.nn.Embedding(LENGTH, 8)
        self.typ = torch.nn.Embedding(2, 8)
        self.q, self.k, self.v = (torch.nn.Linear(8, 8) for _ in range(3))
        self.norm = torch.nn.LayerNorm(8)
        self.fc = torch.nn.Linear(8, CLASSES)

    def forward(self, x):
        n, t = x.shape
        mask = torch.ones(n, t, device=x.device)
        additive = (1.0 - mask[:, None, :]) * -10000.0
        positions = torch.arange(t, device=x.device).unsqueeze(0).expand(n, t)
        h = self.norm(self.emb(x) + self.pos(positions) + self.typ(torch.zeros_like(x)))
        rows = h.reshape(n * t, 8)  # Gemms, so the exporter keeps the Linears' weight names
        q, k, v = (f(rows).reshape(n, t, 8) for f in (self.q, self.k, self.v))
        scores = q @ k.transpose(1, 2) / 8 ** 0.5 + additive.to(h.dtype)
        return self.fc((torch.softmax(scores, -1) @ v).mean(1))


def test_bert_style_defaults_import_and_train(device, tmp_path):
    """The mask of ones made from the batch size (refused before: "depends on the batch
    size") is one row broadcast over the batch by the Add that reads it; with the position
    and token type lookups, the model's forward agrees with onnxruntime and its loss and
    every gradient with torch in float64, at two batch sizes."""
    path = tmp_path / "bert.onnx"
    net, graph, blob = _imported(BertStyleNet, 4, path)
    assert any("broadcast over the batch" in note for note in graph["notes"])
    a = _markers(6, 2)
    for n in (6, 2):  # k.bias shifts every score of a row alike: the softmax drops it
        _check_step(device, path, graph, blob, net, a.train_x[:n].astype(np.int64),
                    np.arange(n) % CLASSES, zero={"k.bias"})


class BatchSumOfOnesNet(HFStyleNet):
    """A batch-sized constant that must keep its batch: ``ones(n, t).sum()`` scales the output
    by the batch size (no row can stand for it)."""

    def forward(self, x):
        n, t = x.shape
        scale = torch.ones(n, t).sum() / 1000.0
        return self.fc(self.emb(x).mean(1)) * scale


def test_a_batch_sized_constant_that_is_not_a_row_is_still_refused(tmp_path):
    from webgpu_trainer.onnx_io import OnnxImportError, load_bundle
    path = tmp_path / "sum.onnx"
    _export(BatchSumOfOnesNet(), path, False)
    with pytest.raises(OnnxImportError, match="depends on the batch size"):
        load_bundle(path)

"""Issue 18, a table dataset (``kind: table``: float32 features [F], standardised when
prepared) on the native engines: three Gaussian blobs in 6 features, an MLP exported by
torch.onnx.export, ``train --data iris-like --data-root DIR`` on the GPU (lavapipe here) and on
the numpy engine: the loss falls, the test accuracy is >= 0.9 (chance 1/3), and the trained
.onnx in onnxruntime on the raw features agrees with the engine's eval forward within 1e-4."""

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from conftest import run
from test_dataset_rgb import _metrics, cli
from webgpu_trainer.cli import commands as native
from webgpu_trainer.engine.train.data import DataSpec

CLASSES = ["a", "b", "c"]
TRAIN, TEST = 240, 60
ARGS = ["--epochs", "3", "--batch-size", "20", "--val-images", "20", "--eval-images", str(TEST),
        "--optimizer", "adam", "--lr", "0.01", "--seed", "2", "--no-progress",
        "--checkpoint-every-s", "0"]


def write_table(root: Path, name: str) -> Path:
    """``root/name``: blobs around three centres (features float32 little-endian [N, 6],
    standardised with the training split's mean and std), the manifest of DATASETS.md."""
    rng = np.random.default_rng(11)
    centres = rng.normal(0, 2, (3, 6))
    data = {}
    for split, n in (("train", TRAIN), ("test", TEST)):
        y = rng.integers(0, 3, n)
        data[split] = (centres[y] + rng.normal(0, 0.7, (n, 6)), y.astype(np.uint8))
    mean, std = data["train"][0].mean(axis=0), data["train"][0].std(axis=0)
    folder = root / name
    folder.mkdir(parents=True)
    splits = {}
    for split, (x, y) in data.items():
        ent = {"count": len(y)}
        feats = ((x - mean) / std).astype("<f4")
        for kind, arr, ext in (("images", feats, "f32"), ("labels", y, "u8")):
            raw = arr.tobytes()
            sha = hashlib.sha256(raw).hexdigest()
            (folder / f"{split}-{kind}-{sha[:12]}.{ext}").write_bytes(raw)
            ent[kind] = {"file": f"{split}-{kind}-{sha[:12]}.{ext}", "shape": list(arr.shape),
                         "dtype": str(arr.dtype), "bytes": len(raw),
                         "sha256": sha}
        splits[split] = ent
    manifest = {"format": "webgpu-trainer/dataset@1", "name": name, "title": "Blobs",
                "dataset": "Blobs", "kind": "table", "sample_shape": [6], "classes": CLASSES,
                "mean": [], "std": [], "source": "tests/test_dataset_table.py", "notes": [],
                "splits": splits}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return folder


def export_mlp(path: Path) -> Path:
    """Linear(6 -> 16) -> ReLU -> Linear(16 -> 3), dynamic batch."""
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    torch.onnx.export(model.train(), torch.zeros(2, 6), str(path), opset_version=17,
                      dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["input"],
                      output_names=["output"],
                      dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("table")
    folder = write_table(root / "datasets", "blobs")
    model = export_mlp(root / "mlp.onnx")
    out = {"folder": folder}
    for device in ("gpu", "cpu"):
        out[device] = (cli("train", model, "--data", "blobs", "--data-root",
                           root / "datasets", "--device", device, "--out", root / device,
                           *ARGS), root / device)
    return out


@pytest.mark.parametrize("engine", ["gpu", "cpu"])
def test_table_trains_and_exports(trained, engine, request):
    proc, run_dir = trained[engine]
    rows = _metrics(run_dir)
    assert rows[-1]["train_loss"] < 0.5 * rows[0]["train_loss"], rows
    assert float(re.search(r"test acc ([0-9.]+)", proc.stdout).group(1)) >= 0.9, proc.stdout
    folder = trained["folder"]
    manifest = json.loads((folder / "manifest.json").read_text())
    ent = manifest["splits"]["test"]
    x = np.fromfile(folder / ent["images"]["file"], "<f4").reshape(-1, 6)[:9]
    y = np.fromfile(folder / ent["labels"]["file"], np.uint8)[:9]
    path = run_dir / "model.onnx"
    logits = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0].astype(np.float64)
    ref = np.exp(logits - logits.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    dev = request.getfixturevalue("device") if engine == "gpu" else native.CpuDevice()
    got = np.exp(run(native.engine_log_probs(dev, path, x, y,
                                             DataSpec.from_manifest(manifest))))
    assert np.abs(got - ref).max() <= 1e-4

"""Issue 18's "Done when", natively: ``webgpu-trainer data --source cifar-10-binary.tar.gz``
then ``train --data cifar10`` with the shipped 3x32x32 default model (models/seednet-rgb32.onnx).

The archive is generated here in exactly CIFAR-10's binary format (cs.toronto.edu/~kriz/
cifar.html: ``cifar-10-batches-bin/data_batch_1..5.bin`` and ``test_batch.bin``, records of one
label byte + 1,024 R, 1,024 G, 1,024 B bytes; ``batches.meta.txt`` the class names), small and
learnable (an image's class decides its mean colour), because no CIFAR download exists offline.
Asserted: the dataset's manifest (counts, classes, per-channel mean/std vs numpy float64), the
training loss falls, and the exported .onnx runs in onnxruntime on [N, 3, 32, 32] inputs
normalised here from the manifest's mean/std, classifying the test images above chance.
"""

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

REPO = Path(__file__).resolve().parents[1]
EXE = [sys.executable, "-m", "webgpu_trainer.cli.main"]
NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
         "truck"]
PER_BATCH, TEST = 40, 60


def _records(rng, n):
    """``n`` learnable CIFAR images uint8 [n, 3, 32, 32] and labels 0..9: class k's mean
    colour is the k-th of ten distinct RGB colours, plus noise of +-40."""
    colours = np.array([[(k * 97) % 256, (k * 57 + 80) % 256, (k * 151 + 30) % 256]
                        for k in range(10)])
    labels = rng.integers(0, 10, n)
    x = colours[labels][:, :, None, None] + rng.integers(-40, 41, (n, 3, 32, 32))
    return np.clip(x, 0, 255).astype(np.uint8), labels.astype(np.uint8)


def _batch(x, y) -> bytes:
    return b"".join(bytes([int(label)]) + img.tobytes() for img, label in zip(x, y))


def make_archive(path: Path, seed: int = 0) -> dict:
    """``cifar-10-binary.tar.gz`` as downloaded; returns the arrays written by split."""
    rng = np.random.default_rng(seed)
    members, train = {}, []
    for i in range(1, 6):
        x, y = _records(rng, PER_BATCH)
        train.append((x, y))
        members[f"data_batch_{i}.bin"] = _batch(x, y)
    tx, ty = _records(rng, TEST)
    members["test_batch.bin"] = _batch(tx, ty)
    members["batches.meta.txt"] = ("\n".join(NAMES) + "\n\n").encode()
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return {"train": (np.concatenate([x for x, _ in train]),
                      np.concatenate([y for _, y in train])), "test": (tx, ty)}


def cli(*args):
    proc = subprocess.run(EXE + [str(a) for a in args], capture_output=True, text=True,
                          cwd=REPO, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cifar")
    arrays = make_archive(tmp / "cifar-10-binary.tar.gz")
    root = tmp / "datasets"
    cli("data", "--source", tmp / "cifar-10-binary.tar.gz", "--data-root", root)
    out = tmp / "run"
    cli("train", REPO / "models" / "seednet-rgb32.onnx", "--data", "cifar10", "--data-root", root,
        "--epochs", "4", "--batch-size", "20", "--val-images", "20", "--optimizer", "adam",
        "--lr", "0.003", "--seed", "0", "--no-progress", "--checkpoint-every-s", "0",
        "--out", out)
    return root, out, arrays


def test_the_archive_becomes_the_cifar10_dataset(trained):
    root, _, arrays = trained
    m = json.loads((root / "cifar10" / "manifest.json").read_text())
    assert m["name"] == "cifar10" and m["classes"] == NAMES
    assert m["sample_shape"] == [3, 32, 32] and m["kind"] == "image"
    assert m["splits"]["train"]["count"] == 5 * PER_BATCH and m["splits"]["test"]["count"] == TEST
    x = arrays["train"][0].astype(np.float64) / 255
    assert m["mean"] == [round(v, 4) for v in x.mean(axis=(0, 2, 3))]
    assert np.allclose(m["std"], x.std(axis=(0, 2, 3)), atol=5e-5)
    listing = cli("datasets", "--data-root", root)
    assert "cifar10" in listing and "CIFAR-10" in listing


def test_training_loss_falls_and_the_export_runs_in_onnxruntime(trained):
    root, out, arrays = trained
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["train_loss"] for r in rows if "train_loss" in r]
    assert len(losses) == 4 and losses[-1] < 0.7 * losses[0], losses
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["config"]["dataset"] == "cifar10"
    m = json.loads((root / "cifar10" / "manifest.json").read_text())
    tx, ty = arrays["test"]
    mean = np.array(m["mean"])[None, :, None, None]
    std = np.array(m["std"])[None, :, None, None]
    x = ((tx / 255 - mean) / std).astype(np.float32)
    sess = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    assert sess.get_inputs()[0].shape[1:] == [3, 32, 32]
    scores = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    assert scores.shape == (TEST, 10)
    acc = float((scores.argmax(1) == ty).mean())
    assert acc >= 0.3, acc  # chance is 0.1; the classes differ by colour

"""Issue 18 end to end on the native engines: a generated 3x8x8 RGB dataset of 3 classes (the
class is the brightest colour channel) in the manifest format ``webgpu-trainer/dataset@1``, a
tiny Conv model exported by torch.onnx.export with a dynamic batch, trained by
``webgpu-trainer train --data NAME --data-root DIR`` on the GPU (lavapipe here) and on the
numpy engine (``--device cpu``):

- the training loss falls (last epoch's mean < half the first's) and the test accuracy is
  >= 0.9 (chance: 1/3);
- config.json records the dataset's name, title and the manifest's sha256;
- the trained .onnx runs in onnxruntime on [N, 3, 8, 8] (input normalised here, per channel,
  in float64) and agrees with the engine's eval forward within 1e-4 (probabilities);
- ``predict --data NAME`` prints the class names and the probabilities per class;
- ``--resume`` on another dataset is refused naming both, with the run folder unchanged.
"""

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from conftest import run
from webgpu_trainer.cli import commands as native
from webgpu_trainer.engine.train.data import DataSpec

REPO = Path(__file__).resolve().parents[1]
EXE = [sys.executable, "-m", "webgpu_trainer.cli.main"]
CLASSES = ["red", "green", "blue"]
TRAIN, TEST, VAL = 300, 90, 30
ARGS = ["--epochs", "4", "--batch-size", "30", "--val-images", str(VAL), "--eval-images",
        str(TEST), "--optimizer", "adam", "--lr", "0.01", "--seed", "1", "--no-progress",
        "--checkpoint-every-s", "0"]


def _images(rng, n):
    """``n`` images uint8 [n, 3, 8, 8] and labels: channel ``label`` bright (150..255), the
    others dark (0..120), pixel by pixel."""
    labels = rng.integers(0, 3, n)
    x = rng.integers(0, 121, (n, 3, 8, 8))
    bright = rng.integers(150, 256, (n, 8, 8))
    x[np.arange(n), labels] = bright
    return x.astype(np.uint8), labels.astype(np.uint8)


def write_dataset(root: Path, name: str, seed: int) -> Path:
    """A dataset folder ``root/name`` in the format of DATASETS.md (shards named by their
    sha256, per-channel mean / std of x / 255 over the training split, 4 decimals)."""
    rng = np.random.default_rng(seed)
    folder = root / name
    folder.mkdir(parents=True)
    splits = {}
    train_x = None
    for split, n in (("train", TRAIN), ("test", TEST)):
        x, y = _images(rng, n)
        train_x = x if split == "train" else train_x
        ent = {"count": n}
        for kind, arr in (("images", x), ("labels", y)):
            data = arr.tobytes()
            sha = hashlib.sha256(data).hexdigest()
            file = f"{split}-{kind}-{sha[:12]}.u8"
            (folder / file).write_bytes(data)
            ent[kind] = {"file": file, "shape": list(arr.shape), "dtype": "uint8",
                         "bytes": len(data), "sha256": sha}
        splits[split] = ent
    v = train_x.astype(np.float64) / 255
    manifest = {"format": "webgpu-trainer/dataset@1", "name": name, "title": f"Colours {seed}",
                "dataset": f"Colours {seed}", "kind": "image", "sample_shape": [3, 8, 8],
                "classes": CLASSES,
                "mean": [round(float(m), 4) for m in v.mean(axis=(0, 2, 3))],
                "std": [round(float(s), 4) for s in v.std(axis=(0, 2, 3))],
                "source": "tests/test_dataset_rgb.py", "notes": [], "splits": splits}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return folder


def export_model(path: Path, outputs: int = 3) -> Path:
    """Conv(3->4, 3x3) -> ReLU -> MaxPool(2) -> Flatten -> Linear(64 -> outputs),
    torch.onnx.export in training mode with a dynamic batch axis."""
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                torch.nn.Linear(64, outputs))
    torch.onnx.export(model.train(), torch.zeros(2, 3, 8, 8), str(path), opset_version=17,
                      dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["input"],
                      output_names=["output"],
                      dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})
    return path


def cli(*args, check=True, cwd=REPO):
    proc = subprocess.run(EXE + [str(a) for a in args], capture_output=True, text=True,
                          timeout=600, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\n"
                             f"stderr:\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Both engines' runs of the tiny model on dataset "colours" (read-only for the tests)."""
    root = tmp_path_factory.mktemp("rgb")
    data = root / "datasets"
    folder = write_dataset(data, "colours", 5)
    write_dataset(data, "other", 6)
    model = export_model(root / "tiny.onnx")
    out = {}
    for device in ("gpu", "cpu"):
        run_dir = root / device
        out[device] = (cli("train", model, "--data", "colours", "--data-root", data,
                           "--device", device, "--out", run_dir, *ARGS), run_dir)
    return {"data": data, "folder": folder, "model": model, **out}


def _metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _test_split(folder):
    manifest = json.loads((folder / "manifest.json").read_text())
    ent = manifest["splits"]["test"]
    x = np.fromfile(folder / ent["images"]["file"], np.uint8).reshape(-1, 3, 8, 8)
    y = np.fromfile(folder / ent["labels"]["file"], np.uint8)
    return manifest, x, y


@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_trains_and_records_the_dataset(trained, device):
    proc, run_dir = trained[device]
    rows = _metrics(run_dir)
    assert len(rows) == 4
    assert rows[-1]["train_loss"] < 0.5 * rows[0]["train_loss"], rows
    acc = float(re.search(r"test acc ([0-9.]+)", proc.stdout).group(1))
    assert acc >= 0.9, proc.stdout  # chance is 1/3
    doc = json.loads((run_dir / "config.json").read_text())
    raw = (trained["folder"] / "manifest.json").read_bytes()
    assert doc["config"]["dataset"] == "colours"
    assert (doc["data"]["name"], doc["data"]["dataset"], doc["data"]["manifest_sha256"]) == \
        ("colours", "Colours 5", hashlib.sha256(raw).hexdigest())


@pytest.mark.parametrize("engine", ["gpu", "cpu"])
def test_export_agrees_with_the_engine(trained, engine, request):
    """onnxruntime on [7, 3, 8, 8] (normalised here in float64) vs the engine's eval forward
    of the trained model: probabilities within 1e-4."""
    _, run_dir = trained[engine]
    path = run_dir / "model.onnx"
    manifest, x, y = _test_split(trained["folder"])
    dims = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and [d.dim_value for d in dims[1:]] == [3, 8, 8]
    mean = np.array(manifest["mean"])[None, :, None, None]
    std = np.array(manifest["std"])[None, :, None, None]
    inp = ((x[:7] / 255 - mean) / std).astype(np.float32)
    logits = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"input": inp})[0].astype(np.float64)
    ref = np.exp(logits - logits.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    dev = request.getfixturevalue("device") if engine == "gpu" else native.CpuDevice()
    got = np.exp(run(native.engine_log_probs(dev, path, x[:7], y[:7],
                                             DataSpec.from_manifest(manifest))))
    assert np.abs(got - ref).max() <= 1e-4
    assert (ref.argmax(axis=1) == y[:7]).mean() >= 5 / 7


def test_guessing_counts_the_datasets_classes(trained, tmp_path):
    """A 10-output model on the 3 classes of "colours", barely trained (lr 1e-9): its test
    accuracy is near 1/3, "no better than guessing (33% for 3 classes)", not judged against
    the model's 10 outputs (10%: that would call it fine)."""
    model = export_model(tmp_path / "ten.onnx", outputs=10)
    args = [a if a != "0.01" else "1e-9" for a in ARGS]
    args[args.index("--epochs") + 1] = "1"
    proc = cli("train", model, "--data", "colours", "--data-root", trained["data"],
               "--device", "cpu", "--out", tmp_path / "run", *args)
    acc = float(re.search(r"test acc ([0-9.]+)", proc.stdout).group(1))
    assert acc <= 0.5, proc.stdout
    assert "is no better than guessing (33% for 3 classes)" in proc.stderr, proc.stderr


def test_predict_names_the_classes(trained):
    _, run_dir = trained["cpu"]
    _, x, y = _test_split(trained["folder"])
    out = cli("predict", run_dir / "model.onnx", "--data", "colours", "--data-root",
              trained["data"], "--index", "3", "--device", "cpu").stdout
    first = out.splitlines()[0]
    assert first.startswith(f"Colours 5 test image 3 (label {CLASSES[y[3]]}): predicted ")
    rows = re.findall(r"^(red|green|blue) +([0-9.]+)  ([0-9.]+)$", out, re.M)
    assert [r[0] for r in rows] == CLASSES
    assert abs(sum(float(r[1]) for r in rows) - 1) < 1e-3


def test_resume_on_another_dataset_is_refused(trained):
    _, run_dir = trained["cpu"]
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    proc = cli("train", "--resume", run_dir, "--data-dir", trained["data"] / "other",
               "--epochs", "5", "--device", "cpu", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith(
        f"--resume: the run trained on dataset colours, but {trained['data'] / 'other'} holds "
        "dataset other: resume it on colours")
    proc = cli("train", "--resume", run_dir, "--data", "other", "--epochs", "5", "--device",
               "cpu", check=False)
    assert proc.returncode == 2
    assert "--data: may not change on --resume (the run has 'colours', 'other' given)" in \
        proc.stderr
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before



def test_resume_on_a_changed_dataset_is_refused(trained, tmp_path):
    """Dataset "colours" prepared again from other images (same name, another manifest sha256)
    no longer resumes the run that trained on it; the run folder stays as it was."""
    run_dir = tmp_path / "run"
    shutil.copytree(trained["cpu"][1], run_dir)
    data = tmp_path / "datasets"
    write_dataset(data, "colours", 7)  # other images under the same name
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    proc = cli("train", "--resume", run_dir, "--data-root", data, "--epochs", "5", "--device",
               "cpu", check=False)
    assert proc.returncode == 2, proc.stderr
    assert f"--resume: dataset colours in {data / 'colours'} is not the data the run trained " \
        "on (manifest sha256 " in proc.stderr and "prepared again from other data" in proc.stderr
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_a_small_dataset_trains_without_val_images(trained, tmp_path):
    """Without --val-images the default holds out a tenth of the 300 training images (the
    5,000 of MNIST would leave nothing to train on)."""
    out = tmp_path / "run"
    cli("train", trained["model"], "--data", "colours", "--data-root", trained["data"],
        "--device", "cpu", "--max-steps", "2", "--batch-size", "30", "--no-progress",
        "--checkpoint-every-s", "0", "--out", out)
    doc = json.loads((out / "config.json").read_text())
    assert doc["config"]["val_images"] == TRAIN // 10 and doc["data"]["val_images"] == 30


# ---- hostile dataset folders: refused naming the file, nothing read past the problem -----

def _copy(tmp_path):
    data = tmp_path / "datasets"
    write_dataset(data, "colours", 5)
    write_dataset(data, "other", 6)
    return data


def test_missing_dataset_names_the_prepared_ones(tmp_path):
    from webgpu_trainer.cli.run_data import dataset_folder, load_dataset
    data = _copy(tmp_path)
    folder = dataset_folder("cifar10", None, data)
    with pytest.raises(ValueError) as e:
        load_dataset(folder, "cifar10")
    assert str(e.value) == (
        f"no dataset cifar10 in {data} (no {folder / 'manifest.json'}; prepared there: "
        "colours, other): prepare it with `webgpu-trainer data --source ...`")
    proc = cli("train", REPO / "models" / "seednet.onnx", "--data", "cifar10", "--data-root",
               data, "--device", "cpu", "--out", tmp_path / "run", check=False)
    assert proc.returncode == 2 and f"no dataset cifar10 in {data}" in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("damage,message", [
    ("flip", "test-images-{sha12}.u8 (test images) has sha256 "),
    ("truncate", "test-images-{sha12}.u8 (test images) holds 17279 bytes; the manifest says "
                 "17280 (90 x 192)"),
    ("escape", "manifest.json: test images: file '../other/test-images-"),  # store's check
])
def test_damaged_shards_are_refused(tmp_path, damage, message):
    from webgpu_trainer.cli.run_data import load_dataset
    folder = _copy(tmp_path) / "colours"
    manifest = json.loads((folder / "manifest.json").read_text())
    ent = manifest["splits"]["test"]["images"]
    shard = folder / ent["file"]
    raw = shard.read_bytes()
    if damage == "flip":
        shard.write_bytes(raw[:100] + bytes([raw[100] ^ 1]) + raw[101:])
    elif damage == "truncate":
        shard.write_bytes(raw[:-1])
    else:
        ent["file"] = "../other/" + ent["file"]
        (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError) as e:
        load_dataset(folder, "colours")
    assert message.format(sha12=ent["sha256"][:12]) in str(e.value)


def test_resume_finds_the_data_where_the_run_trained(trained, tmp_path):
    """A run trained with --data-root, resumed with neither --data-root nor --data-dir:
    config.json's data.data_dir is where its data is, so epoch 5 trains on it (before, the
    default data root was searched and "colours" was not there). The stored folder moved
    away: the error names the dataset and where it looked."""
    _, run_dir = trained["cpu"]
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    stored = json.loads((copy / "config.json").read_text())["data"]["data_dir"]
    assert Path(stored) == trained["data"] / "colours"
    proc = cli("train", "--resume", copy, "--epochs", "5", "--device", "cpu")
    assert "from epoch-004.ckpt (epoch 4, step 36)" in proc.stderr, proc.stderr
    assert [r["epoch"] for r in _metrics(copy)] == [1, 2, 3, 4, 5]
    doc = json.loads((copy / "config.json").read_text())
    assert doc["data"]["data_dir"] == stored
    gone = tmp_path / "gone"
    shutil.copytree(run_dir, gone)
    doc = json.loads((gone / "config.json").read_text())
    doc["data"]["data_dir"] = str(tmp_path / "moved" / "colours")
    (gone / "config.json").write_text(json.dumps(doc))
    proc = cli("train", "--resume", gone, "--epochs", "5", "--device", "cpu", check=False)
    assert proc.returncode == 2 and "colours" in proc.stderr, proc.stderr
    assert f"note: the folder this run trained on, {tmp_path / 'moved' / 'colours'} " \
        "(config.json), is not there" in proc.stderr


def test_a_relative_data_dir_is_recorded_whole(trained, tmp_path):
    """``--data-dir rel/colours`` given from one folder is recorded absolute, so --resume from
    another folder (no --data-dir) still finds it."""
    shutil.copytree(trained["data"] / "colours", tmp_path / "rel" / "colours")
    model = trained["cpu"][1] / "model.onnx"
    args = [a if a != "4" else "1" for a in ARGS]  # one epoch
    cli("train", model, "--data-dir", "rel/colours", "--device", "cpu", "--out", "run", *args,
        cwd=tmp_path)
    doc = json.loads((tmp_path / "run" / "config.json").read_text())
    assert doc["data"]["data_dir"] == str((tmp_path / "rel" / "colours").resolve())
    cli("train", "--resume", tmp_path / "run", "--epochs", "2", "--device", "cpu")
    assert [r["epoch"] for r in _metrics(tmp_path / "run")] == [1, 2]

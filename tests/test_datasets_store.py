"""host/datasets/store.py: write_dataset's checks, shards, mean/std and atomic replace;
read_manifest (old MNIST manifests included) and list_datasets."""

import hashlib
import json

import numpy as np
import pytest

from webgpu_trainer.host.datafiles import DataError
from webgpu_trainer.host.datasets import atomic, store
from webgpu_trainer.host.datasets.arrays import Arrays


def images(seed=0, n=(12, 5), shape=(3, 5, 4), k=3):
    rng = np.random.default_rng(seed)
    xs = [rng.integers(0, 256, (m, *shape), dtype=np.uint8) for m in n]
    ys = [np.arange(m) % k for m in n]
    return Arrays(xs[0], ys[0], xs[1], ys[1], [f"c{i}" for i in range(k)], "Tiny",
                  "generated", ["a note"])


def snapshot(root):
    """{relative path: bytes} of every file under root (temp folders included)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_round_trip_values_and_stats(tmp_path):
    a = images()
    m = store.write_dataset(tmp_path, "tiny", a, log=lambda s: None)
    folder = tmp_path / "tiny"
    assert m == store.read_manifest(folder)
    assert (m["format"], m["name"], m["title"], m["dataset"], m["kind"], m["sample_shape"],
            m["classes"], m["source"], m["notes"]) == (
        "webgpu-trainer/dataset@1", "tiny", "Tiny", "Tiny", "image", [3, 5, 4],
        ["c0", "c1", "c2"], "generated", ["a note"])
    ref = a.train_x.astype(np.float64) / 255
    assert m["mean"] == [round(float(ref[:, c].mean()), 4) for c in range(3)]
    assert m["std"] == [round(float(ref[:, c].std()), 4) for c in range(3)]
    for split, (x, y) in (("train", (a.train_x, a.train_y)), ("test", (a.test_x, a.test_y))):
        ent = m["splits"][split]
        assert ent["count"] == len(y)
        raw = (folder / ent["images"]["file"]).read_bytes()
        assert np.array_equal(np.frombuffer(raw, np.uint8).reshape(x.shape), x)
        sha = hashlib.sha256(raw).hexdigest()
        assert ent["images"] == {"file": f"{split}-images-{sha[:12]}.u8",
                                 "shape": list(x.shape), "dtype": "uint8",
                                 "bytes": x.size, "sha256": sha}
        labels = np.frombuffer((folder / ent["labels"]["file"]).read_bytes(), np.uint8)
        assert labels.tolist() == y.tolist()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]  # no temp folder left


def test_table_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    tx, sx = rng.normal(size=(6, 4)).astype(np.float32), rng.normal(size=(3, 4)).astype(
        np.float32)
    a = Arrays(tx, np.array([0, 1, 0, 1, 0, 1]), sx, np.array([1, 0, 1]), ["no", "yes"],
               "Table", "t.csv")
    m = store.write_dataset(tmp_path, "t", a, log=lambda s: None)
    ent = m["splits"]["train"]["images"]
    assert (m["kind"], m["sample_shape"], m["mean"], m["std"]) == ("table", [4], [], [])
    assert ent["file"].endswith(".f32") and ent["dtype"] == "float32"
    got = np.frombuffer((tmp_path / "t" / ent["file"]).read_bytes(), "<f4").reshape(6, 4)
    assert np.array_equal(got, tx)


def test_mnist_rounding_is_exact():
    """The per-channel statistics are exact sums: the float64 mean and std of x/255 rounded."""
    x = np.array([0, 255, 255, 3] * 5, np.uint8).reshape(5, 1, 2, 2)
    f = x / 255.0
    assert store.channel_stats(x) == ([round(f.mean(), 4)], [round(f.std(), 4)])


def test_constant_channel_is_divided_by_1_and_the_dataset_stays_valid(tmp_path):
    """Photos whose blue channel is 0 everywhere were written "ready", then listed as invalid
    ("a std of 0 (constant images)") and could not be trained: now std 1, said in the notes."""
    a = images()
    a.train_x[:, 2] = 0
    m = store.write_dataset(tmp_path, "t", a, log=lambda s: None)
    f = a.train_x / 255.0
    assert m["std"] == [round(f[:, 0].std(), 4), round(f[:, 1].std(), 4), 1.0]
    assert m["mean"][2] == 0.0
    assert m["notes"] == ["a note", "channel 2 is constant in the training images (std 0): "
                                    "divided by 1"]
    assert a.notes == ["a note"]
    assert store.read_manifest(tmp_path / "t")["std"] == m["std"]
    assert [d["name"] for d in store.list_datasets(tmp_path)] == ["t"]


def bad(kind):
    a = images()
    if kind == "one class":
        a.classes, a.train_y, a.test_y = ["only"], a.train_y * 0, a.test_y * 0
    elif kind == "257 classes":
        a.classes = [f"k{i}" for i in range(257)]
    elif kind == "label out of range":
        a.test_y = a.test_y.copy()
        a.test_y[3] = 7
    elif kind == "class missing":
        a.classes = ["c0", "c1", "c2", "c3"]
    elif kind == "shape mismatch":
        a.test_x = a.test_x[:, :1]
    elif kind == "duplicate class":
        a.classes = ["c0", "c1", "c0"]
    elif kind == "float64":
        a.train_x = a.train_x.astype(np.float64)
    return a


BAD = {
    "one class": "1 class ('only'); at least 2 needed",
    "257 classes": "257 classes; at most 256",
    "label out of range": "test split: label 7 at index 3 is outside 0..2 (3 classes)",
    "class missing": "1 of 4 classes have no training samples: 'c3'",
    "shape mismatch": "test split: samples uint8 [1, 5, 4], the train split's are uint8 "
                      "[3, 5, 4]",
    "duplicate class": "class name 'c0' appears twice",
    "float64": "train split: dtype float64; expected uint8 images [N, C, H, W] or float32 "
               "tables [N, F]",
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_arrays_change_nothing(tmp_path, kind):
    store.write_dataset(tmp_path, "d", images(5), log=lambda s: None)
    before = snapshot(tmp_path)
    with pytest.raises(DataError) as err:
        store.write_dataset(tmp_path, "d", bad(kind), log=lambda s: None)
    assert str(err.value) == BAD[kind]
    assert snapshot(tmp_path) == before


def test_failure_mid_write_keeps_the_old_folder(tmp_path, monkeypatch):
    store.write_dataset(tmp_path, "d", images(5), log=lambda s: None)
    before = snapshot(tmp_path)
    calls = []

    def failing(path, data):
        calls.append(path.name)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        path.write_bytes(data)

    monkeypatch.setattr(store, "write_file", failing)
    with pytest.raises(OSError, match="No space left"):
        store.write_dataset(tmp_path, "d", images(6), log=lambda s: None)
    assert snapshot(tmp_path) == before and len(calls) == 3


def test_replace_and_list(tmp_path):
    m1 = store.write_dataset(tmp_path, "d", images(1), log=lambda s: None)
    m2 = store.write_dataset(tmp_path, "d", images(2), log=lambda s: None)
    assert m1["splits"]["train"]["images"]["file"] != m2["splits"]["train"]["images"]["file"]
    files = {p.name for p in (tmp_path / "d").iterdir()}
    assert files == {"manifest.json"} | {m2["splits"][s][p]["file"] for s in ("train", "test")
                                         for p in ("images", "labels")}
    (tmp_path / "junk").mkdir()
    (tmp_path / ".tmp-x").mkdir()
    logs = []
    assert store.list_datasets(tmp_path, logs.append) == [{
        "name": "d", "title": "Tiny", "kind": "image", "sample_shape": [3, 5, 4],
        "classes": ["c0", "c1", "c2"], "train": 12, "test": 5,
        "bytes": 12 * 60 + 5 * 60 + 12 + 5}]
    assert logs == [f"skipped junk: {tmp_path / 'junk'}: no manifest.json (not a prepared "
                    "dataset)"]


def test_replace_without_renameat2(tmp_path, monkeypatch):
    """Where RENAME_EXCHANGE is missing: two renames; a failing second one puts the old folder
    back."""
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    store.write_dataset(tmp_path, "d", images(1), log=lambda s: None)
    m2 = store.write_dataset(tmp_path, "d", images(2), log=lambda s: None)
    assert store.read_manifest(tmp_path / "d") == m2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    before = snapshot(tmp_path)
    real = atomic.os.rename

    def rename(a, b):
        if ".tmp-" in str(a) and ".lock" not in str(a):  # the temp folder's move
            raise OSError(5, "Input/output error")
        real(a, b)

    monkeypatch.setattr(atomic.os, "rename", rename)
    with pytest.raises(OSError, match="Input/output error"):
        store.write_dataset(tmp_path, "d", images(3), log=lambda s: None)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("name", ["Bad", "a/b", "../x", "", "x" * 41, "-x", ".x"])
def test_bad_names(tmp_path, name):
    with pytest.raises(DataError) as err:
        store.write_dataset(tmp_path, name, images(), log=lambda s: None)
    assert str(err.value) == (f"dataset name {name!r} is not valid: use 1-40 characters, "
                              "lowercase letters, digits, '-' or '_', starting with a letter "
                              "or digit")
    assert list(tmp_path.iterdir()) == []


def test_refuses_to_replace_a_folder_that_is_not_a_dataset(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "mine.txt").write_text("keep")
    with pytest.raises(DataError, match="is not a dataset folder"):
        store.write_dataset(tmp_path, "d", images(), log=lambda s: None)
    assert snapshot(tmp_path) == {"d/mine.txt": b"keep"}


def test_legacy_mnist_manifest(tmp_path):
    entry = {"images": {"file": "a.u8", "shape": [2, 28, 28], "dtype": "uint8",
                        "bytes": 2 * 784, "sha256": "0" * 64},
             "labels": {"file": "b.u8", "shape": [2], "dtype": "uint8", "bytes": 2,
                        "sha256": "1" * 64}, "count": 2}
    old = {"format": "webgpu-trainer/mnist@1", "source": "s", "dataset": "own",
           "splits": {"train": entry, "test": entry}}
    (tmp_path / "manifest.json").write_text(json.dumps(old))
    (tmp_path / "a.u8").write_bytes(bytes(2 * 784))
    m = store.read_manifest(tmp_path, check_files=False)
    assert (m["format"], m["name"], m["kind"], m["sample_shape"], m["classes"], m["mean"],
            m["std"]) == ("webgpu-trainer/dataset@1", "own", "image", [1, 28, 28],
                          [str(d) for d in range(10)], [0.1307], [0.3081])
    with pytest.raises(DataError) as err:
        store.read_manifest(tmp_path)
    assert str(err.value) == f"{tmp_path}: shard b.u8 is missing"
    old["splits"]["test"] = {**entry, "count": 3}
    (tmp_path / "manifest.json").write_text(json.dumps(old))
    with pytest.raises(DataError) as err:
        store.read_manifest(tmp_path)
    assert str(err.value) == (f"{tmp_path / 'manifest.json'}: test images: shape "
                              "[2, 28, 28], expected [3, 28, 28]")

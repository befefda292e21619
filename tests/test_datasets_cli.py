"""``webgpu-trainer data`` / ``datasets`` / ``train --data`` with the inputs a newcomer tried
(issue 18): the reading options, names from non-ASCII files, a model and dataset whose classes
differ, augmentation on a table, what a killed prepare leaves, and counts past a split.
Each hostile case asserts the exact message and that nothing under the data root or --out
changed."""

from __future__ import annotations

import fcntl
import io
import json
import os
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import dataset_fixtures as dfx
from webgpu_trainer.cli.main import main
from webgpu_trainer.host.datasets import store

IRIS = ("species,sepal_length,sepal_width,petal_length,petal_width\n"
        + "".join(f"{s},{5 + i % 3}.{i},3.{i % 5},1.{i % 7},0.{i % 4}\n"
                  for i in range(18) for s in ("setosa", "virginica", "versicolor")[i % 3:][:1]))


def snapshot(root: Path) -> dict:
    """{relative path: bytes} of every file under ``root``."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_help_names_every_source_kind_and_option(capsys):
    with pytest.raises(SystemExit):
        main(["data", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for words in ("folder or .zip of photos", "CIFAR-10 / CIFAR-100", "four IDX files",
                  "a CSV table", "--label COLUMN", "--size PIXELS", "--color {grey,rgb,auto}",
                  "--test FRACTION", "--seed SEED"):
        assert words in text, words


def test_csv_label_first_column_hint_then_label_option(tmp_path, capsys):
    csv = tmp_path / "iris.csv"
    csv.write_text(IRIS)
    root = tmp_path / "root"
    code, _, err = run(capsys, "data", "--source", csv, "--data-root", root)
    assert code == 1
    assert err == ("error: iris.csv, line 2, column 1 'species': 'setosa' is not a number; "
                   "the label column is the last (5 'petal_width') by default: if column 1 "
                   "'species' holds the labels, give --label species\n")
    assert not root.exists() or list(root.iterdir()) == []
    code, out, _ = run(capsys, "data", "--source", csv, "--data-root", root, "--label",
                       "species", "--test", "0.5", "--seed", "3")
    assert code == 0
    m = store.read_manifest(root / "iris")
    assert (m["classes"], m["splits"]["train"]["count"], m["splits"]["test"]["count"]) == (
        ["setosa", "versicolor", "virginica"], 9, 9)
    assert m["source"] == "iris.csv (18 rows, 4 features, 3 classes)"
    # by index, and one feature only: "1 feature", not "1 features"
    (tmp_path / "one.csv").write_text("".join(f"{c},{i}\n" for i, c in enumerate("ab" * 4)))
    assert run(capsys, "data", "--source", tmp_path / "one.csv", "--data-root", root,
               "--label", "0")[0] == 0
    assert store.read_manifest(root / "one")["source"] == "one.csv (8 rows, 1 feature, 2 classes)"


def _photos(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    for k, name in enumerate(("cat", "dog")):
        (folder / name).mkdir(parents=True)
        for i in range(5):
            px = rng.integers(0, 80, (20, 24, 3)).astype(np.uint8)
            px[..., k] += 150
            Image.fromarray(px).save(folder / name / f"{i}.png")
    return folder


def test_photo_options_and_options_a_source_does_not_take(tmp_path, capsys):
    src = _photos(tmp_path / "pets")
    root = tmp_path / "root"
    assert run(capsys, "data", "--source", src, "--data-root", root, "--size", "16",
               "--color", "grey", "--test", "0.4", "--seed", "1")[0] == 0
    m = store.read_manifest(root / "pets")
    assert (m["sample_shape"], m["splits"]["test"]["count"]) == ([1, 16, 16], 4)
    before = snapshot(root)
    code, _, err = run(capsys, "data", "--source", src, "--data-root", root, "--name", "p2",
                       "--size", "300")
    assert (code, err) == (1, "error: size 300: use a whole number of pixels from 8 to 256 "
                              "(28 for digits, 32 for CIFAR-like photos)\n")
    code, _, err = run(capsys, "data", "--source", src, "--data-root", root, "--name", "p2",
                       "--label", "x")
    assert (code, err) == (1, f"error: {src}: --label applies to a CSV table only, and this "
                              "source is not one: leave it out\n")
    code, _, err = run(capsys, "data", "--fashion-mnist", "--data-root", root, "--seed", "2")
    assert (code, err) == (1, "error: --seed applies to --source (photos or a CSV table) "
                              "only\n")
    assert snapshot(root) == before


@pytest.mark.parametrize("seed", ["-1", str(2 ** 32)])
def test_seed_outside_train_range_is_refused_not_a_traceback(tmp_path, capsys, seed):
    """``--seed -1`` once ended in numpy's traceback ("expected non-negative integer")."""
    src = _photos(tmp_path / "pets")
    (tmp_path / "t.csv").write_text(IRIS)
    root = tmp_path / "root"
    assert run(capsys, "data", "--source", src, "--data-root", root)[0] == 0
    before = snapshot(root)
    for source, extra in ((src, ()), (tmp_path / "t.csv", ("--label", "species"))):
        code, out, err = run(capsys, "data", "--source", source, "--data-root", root,
                             "--name", "pets", "--seed", seed, *extra)
        assert (code, out, err) == (1, "", f"error: seed {seed}: use a whole number from 0 to "
                                           "4,294,967,295\n")
    assert snapshot(root) == before


def test_non_ascii_names_are_distinct_and_never_replaced_silently(tmp_path, capsys):
    root = tmp_path / "root"
    for stem, rows in (("猫", "1,a\n2,b\n3,a\n4,b\n5,a\n6,b\n"),
                       ("犬", "9,x\n8,y\n7,x\n6,y\n5,x\n4,y\n")):
        (tmp_path / f"{stem}.csv").write_text(rows)
        assert run(capsys, "data", "--source", tmp_path / f"{stem}.csv", "--data-root",
                   root)[0] == 0
    names = sorted(p.name for p in root.iterdir())
    assert names == ["dataset-1e82f9b0", "dataset-a810bf84"]  # sha256 of the stem, 8 digits
    assert store.read_manifest(root / "dataset-a810bf84")["classes"] == ["a", "b"]
    assert store.read_manifest(root / "dataset-1e82f9b0")["classes"] == ["x", "y"]
    before = snapshot(root)
    (tmp_path / "猫.csv").write_text("1,p\n2,q\n3,p\n4,q\n")  # another file, the same name
    code, _, err = run(capsys, "data", "--source", tmp_path / "猫.csv", "--data-root", root)
    assert code == 1
    assert err == (f"error: dataset 'dataset-a810bf84' already exists in {root} (猫, from "
                   "猫.csv (6 rows, 1 feature, 2 classes)): not replacing it; give --name "
                   "dataset-a810bf84 to replace it, or another --name\n")
    assert snapshot(root) == before
    assert run(capsys, "data", "--source", tmp_path / "猫.csv", "--data-root", root,
               "--name", "dataset-a810bf84")[0] == 0  # named: replaced on purpose
    assert store.read_manifest(root / "dataset-a810bf84")["classes"] == ["p", "q"]


def test_pillow_exif_warning_is_one_note_naming_the_file(tmp_path, capsys):
    src = _photos(tmp_path / "pets")
    buf = io.BytesIO()
    Image.new("RGB", (20, 20), (200, 10, 10)).save(buf, "JPEG")
    tiff = (b"II*\x00" + struct.pack("<IH", 8, 1) + struct.pack("<HHII", 0x010E, 2, 1000, 5000)
            + struct.pack("<I", 0))  # ImageDescription: 1,000 bytes past the end
    app1 = b"Exif\x00\x00" + tiff
    raw = buf.getvalue()
    (src / "cat" / "odd.jpg").write_bytes(raw[:2] + b"\xff\xe1" + struct.pack(">H", len(app1) + 2)
                                          + app1 + raw[2:])
    code, out, err = run(capsys, "data", "--source", src, "--data-root", tmp_path / "root")
    assert code == 0 and "Warning" not in err and err == ""
    assert ("[data] note: Pillow warned about 1 image (kept): cat/odd.jpg: Tag data larger "
            "than file. Skipping tag 270\n") in out
    m = store.read_manifest(tmp_path / "root" / "pets")
    assert m["splits"]["train"]["count"] + m["splits"]["test"]["count"] == 11


def _dataset(root: Path, name: str, labels, k: int = 3) -> None:
    x, _ = dfx.colour_blobs(len(labels))
    y = np.asarray(labels, np.uint8)
    dfx.write_image_dataset(root, name, {"train": (x[:-4], y[:-4]), "test": (x[-4:], y[-4:])},
                            ["red", "green", "blue", "cyan", "pink"][:k])


@pytest.mark.parametrize("model_k, labels, message", [
    (2, [0, 1, 2] * 8, "model m.onnx has 2 output classes, dataset blobs has 3 (red, green, "
                       "blue): use a model whose output is [N, 3]"),
    # the model has 5 outputs: a label 4 fits the model but not the dataset's 3 classes
    (5, [0, 1, 2] * 3 + [4] + [0, 1, 2] * 5, "dataset blobs: training label 4 at index 9 is "
                                              "outside 0..2 (the dataset's 3 classes): prepare "
                                              "it again with `webgpu-trainer data --source "
                                              "...`"),
])
def test_model_and_dataset_classes_checked_before_work(tmp_path, capsys, model_k, labels,
                                                       message):
    root = tmp_path / "root"
    _dataset(root, "blobs", labels)
    dfx.tiny_rgb_model(tmp_path / "m.onnx", classes=model_k)
    before = snapshot(root)
    code, _, err = run(capsys, "train", tmp_path / "m.onnx", "--data", "blobs", "--data-root",
                       root, "--device", "cpu", "--out", tmp_path / "run", "--no-progress")
    assert (code, err.splitlines()[-1]) == (2, f"error: {message}")
    assert not (tmp_path / "run").exists() and snapshot(root) == before


def test_augment_on_a_table_and_eval_images_past_the_test_split(tmp_path, capsys):
    root = tmp_path / "root"
    (tmp_path / "t.csv").write_text("".join(f"{i % 7},{i % 5},{'ab'[i % 2]}\n"
                                            for i in range(40)))
    assert run(capsys, "data", "--source", tmp_path / "t.csv", "--data-root", root)[0] == 0
    from webgpu_trainer.onnx_io import make_default_model
    (tmp_path / "mlp.onnx").write_bytes(make_default_model([2], 2))  # fits the table
    code, _, err = run(capsys, "train", tmp_path / "mlp.onnx", "--data", "t", "--data-root",
                       root, "--device", "cpu", "--out", tmp_path / "run", "--no-progress",
                       "--augment-flip", "--augment-crop", "2")
    assert (code, err.splitlines()[-1]) == (2, "error: --augment-flip and --augment-crop 2: "
                                               "dataset t is a table (2 features); random crop "
                                               "and flip apply to images only: leave them out")
    _dataset(root, "blobs", [0, 1, 2] * 8)
    dfx.tiny_rgb_model(tmp_path / "m.onnx")
    base = ["train", tmp_path / "m.onnx", "--data", "blobs", "--data-root", root, "--device",
            "cpu", "--out", tmp_path / "run", "--no-progress"]
    code, _, err = run(capsys, *base, "--eval-images", "5", "--batch-size", "4")
    assert (code, err.splitlines()[-1]) == (2, "error: --eval-images: must be an integer in "
                                               "[1, 4] (the dataset's 4 test images), got 5")
    assert not (tmp_path / "run").exists()
    # by default: the whole test split when it is smaller than 10,000 (recorded so)
    assert run(capsys, *base, "--batch-size", "4", "--max-steps", "2")[0] == 0
    doc = json.loads((tmp_path / "run" / "config.json").read_text())
    assert doc["config"]["eval_images"] == 4, doc


def test_killed_prepares_are_cleaned_and_invalid_folders_listed_apart(tmp_path, capsys):
    root = tmp_path / "root"
    _dataset(root, "blobs", [0, 1, 2] * 8)
    (root / "half").mkdir()  # a folder with a dataset's name but no manifest
    old = time.time() - 2 * 3600
    for name in (".tmp-a-old", ".tmp-b-unlocked", ".tmp-c-held", ".tmp-d-fresh"):
        (root / name).mkdir()
        (root / name / "train-images-x.u8").write_bytes(b"x" * 10)
    for name in (".tmp-b-unlocked", ".tmp-c-held"):
        (root / name / ".lock").write_bytes(b"")
    os.utime(root / ".tmp-a-old", (old, old))
    os.utime(root / ".tmp-a-old" / "train-images-x.u8", (old, old))
    (root / ".upload-1234").write_bytes(b"PK")
    os.utime(root / ".upload-1234", (old, old))
    with open(root / ".tmp-c-held" / ".lock", "rb") as held:  # a prepare still running
        fcntl.flock(held, fcntl.LOCK_EX)
        code, out, err = run(capsys, "datasets", "--data-root", root)
    assert (code, err) == (0, "")
    assert out.splitlines()[-2:] == [
        "invalid (1; not usable: prepare them again or remove them):",
        f"  half: {root / 'half'}: no manifest.json (not a prepared dataset)"]
    assert sorted(p.name for p in root.iterdir()) == [".tmp-c-held", ".tmp-d-fresh", "blobs",
                                                      "half"]
    dfx.tiny_rgb_model(tmp_path / "m.onnx")
    code, _, err = run(capsys, "train", tmp_path / "m.onnx", "--data", "nosuch", "--data-root",
                       root, "--device", "cpu", "--out", tmp_path / "run")
    assert (code, err.splitlines()[-1]) == (2, (
        f"error: no dataset nosuch in {root} (no {root / 'nosuch' / 'manifest.json'}; prepared "
        f"there: blobs; invalid there: half ({root / 'half'}: no manifest.json (not a prepared "
        "dataset))): prepare it with `webgpu-trainer data --source ...`"))
    json.loads((root / "blobs" / "manifest.json").read_text())  # untouched, still valid

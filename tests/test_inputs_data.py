"""Issue 9, data files nobody here made (tests/fixtures/hostile/data,
scripts/make_hostile_fixtures.py): a user's own IDX / CSV digits are accepted (checksums only
for what claims to be MNIST); every bad file is refused with an error naming the file, the line
or index and the value; a label outside the classes never reaches a loss kernel, and the
kernels ignore and flag one if it did.
"""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import make_graph, node, run
from harness import one_step

from webgpu_trainer.host import data
from webgpu_trainer.cpu.losses import criterion
from webgpu_trainer.engine.train.data import Split
from webgpu_trainer.engine.train.gpu_engine import GpuEngine
from webgpu_trainer.engine.train.loop import Trainer

ROOT = pathlib.Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "fixtures" / "hostile" / "data"
OWN_IDX, OWN_CSV = HOSTILE / "own_idx", HOSTILE / "own_csv"


@pytest.mark.parametrize("folder,form", [(OWN_IDX, "IDX"), (OWN_CSV, "CSV")])
def test_own_dataset_accepted_and_kept(tmp_path, folder, form):
    cache = tmp_path / "cache"
    manifest = data.prepare(cache, folder, log=lambda m: None)
    assert manifest["dataset"] == "own" and manifest["source"] == f"{form} folder {folder}"
    assert {s: manifest["splits"][s]["count"] for s in ("train", "test")} == \
        {"train": 12, "test": 5}
    images, labels = data.load(cache, "train")
    assert images.shape == (12, 28, 28) and sorted(set(labels.tolist())) == list(range(10))
    # a later run without a source keeps it (no download over the user's data)
    again = data.prepare(cache, log=lambda m: None, fetchers=[])
    assert again == manifest


def test_idx_and_csv_own_data_agree(tmp_path):
    a = data.prepare(tmp_path / "a", OWN_IDX, log=lambda m: None)
    b = data.prepare(tmp_path / "b", OWN_CSV, log=lambda m: None)
    assert [a["splits"][s][k]["sha256"] for s in ("train", "test") for k in ("images", "labels")] \
        == [b["splits"][s][k]["sha256"] for s in ("train", "test") for k in ("images", "labels")]


@pytest.mark.parametrize("name,kind,message", [
    ("non_numeric.csv", "csv", "{p} line 3, field 101: 'x12' is not an integer"),
    ("short_row.csv", "csv", "{p} line 4: 700 fields, expected 785 (a label and 784 pixels)"),
    ("label11.csv", "csv", "{p} line 2: label 11 is outside 0..9"),
    ("label11-labels-idx1-ubyte", "labels", "{p}: label 11 at index 5 is outside 0..9"),
    ("wrong_magic-images-idx3-ubyte", "images",
     "{p}: bad IDX magic 0x00000804, expected 0x00000803 (IDX images: unsigned bytes, "
     "3 dimensions)"),
    ("truncated-images-idx3-ubyte", "images",
     "{p}: truncated: the header says 10 images (7,840 bytes after the header) but the file "
     "holds 7,448"),
    ("garbage-images-idx3-ubyte.gz", "images", "{p}: not a valid gzip file ("),
])
def test_hostile_file_named_error(name, kind, message):
    path = HOSTILE / name
    raw = path.read_bytes()
    with pytest.raises(data.DataError) as e:
        if kind == "csv":
            data.parse_csv(raw, str(path))
        else:
            data.parse_idx(raw, kind, str(path))
    want = message.format(p=path)
    assert str(e.value) == want if not want.endswith("(") else str(e.value).startswith(want)


# issue 16: CSV / IDX edge cases; 4 digits each (labels 1, 3, 2, 0), never a row lost
EDGE_LABELS = [1, 3, 2, 0]


@pytest.mark.parametrize("name", ["bom_no_header.csv", "space_first.csv", "crlf.csv",
                                  "trailing_blank.csv", "signed_labels.csv"])
def test_csv_edge_cases_keep_every_row(name):
    """A BOM, a first row starting with a space, CRLF, blank lines at the end, labels "+1" and
    " 3": every row is data (main kept 3 of 4 rows of the BOM, space and signed files)."""
    images, labels = data.parse_csv((HOSTILE / name).read_bytes(), name)
    assert labels.tolist() == EDGE_LABELS
    ref, _ = data.parse_csv((HOSTILE / "crlf.csv").read_bytes().replace(b"\r", b""))
    assert images.shape == (4, 784) and (images == ref).all() and images.any()


@pytest.mark.parametrize("name,message", [
    ("header_only.csv", "{p}: a header line and no rows"),
    ("nul.csv", "{p} line 3, field 10: a NUL byte (byte offset 3,254; not a text CSV file)"),
    ("mixed_first_line.csv", "{p} line 1 is neither a header (785 column names, none a "
     "number) nor a row (a label and 784 integers): field 301 is '0'"),
    ("lone_minus.csv", "{p} line 4, field 201: '-' is not an integer"),
])
def test_csv_edge_cases_refused(name, message):
    path = HOSTILE / name
    with pytest.raises(data.DataError) as e:
        data.parse_csv(path.read_bytes(), str(path))
    assert str(e.value) == message.format(p=path)


@pytest.mark.parametrize("header", [
    "\ufefflabel," + ",".join(f"pixel{k}" for k in range(784)),  # a BOM, then Kaggle's names
    "label," + ",".join(map(str, range(784))), "y," + ",".join(map(str, range(1, 785)))])
def test_csv_headers_recognised(header):
    row = ",".join(["7"] + ["3"] * 784)
    images, labels = data.parse_csv((header + "\r\n" + row + "\r\n").encode(), "x")
    assert labels.tolist() == [7] and images.tolist() == [[3] * 784]


def test_csv_refusals_in_memory():
    row = ",".join(["5"] + ["0"] * 784)
    cases = {b"": "x: no rows", b"\n\n": "x: no rows",
             b"label,p1\n" + row.encode(): "x line 1 is neither a header (785 column names, "
             "none a number) nor a row (a label and 784 integers): it has 2 fields",
             (row + "\n" + row.replace("5,", "12345678901,", 1)).encode():
             "x line 2: label 12345678901 is outside 0..9",
             (row.replace(",0", ",1234567890123456789012345", 1)).encode():
             "x line 1, field 2: pixel value 12345678901234567890... is outside 0..255",
             (row + "\n\n" + row).encode(): "x line 2: empty line"}
    for raw, message in cases.items():
        with pytest.raises(data.DataError) as e:
            data.parse_csv(raw, "x")
        assert str(e.value) == message


def test_gzip_bomb_refused_at_the_bound(tmp_path):
    """A valid IDX header for 400,000 images and 300 MiB of zeros in 305,791 gzip bytes:
    unpacking stops at 256 MiB; read_folder refuses a raw file past the bound unread."""
    path = HOSTILE / "bomb-images-idx3-ubyte.gz"
    with pytest.raises(data.DataError) as e:
        data.parse_idx(path.read_bytes(), "images", str(path))
    assert str(e.value) == (f"{path}: the gzip data (305,791 bytes) unpacks to more than "
                            "268,435,456 bytes (256 MiB, the bound for one data file): refused")
    src = tmp_path / "src"
    shutil.copytree(OWN_IDX, src)
    big = src / "train-images-idx3-ubyte.gz"
    with open(big, "r+b") as f:
        f.truncate((256 << 20) + 1)  # sparse: nothing written
    before = {p.name: p.stat().st_size for p in src.iterdir()}
    with pytest.raises(data.DataError) as e:
        data.prepare(tmp_path / "c", src, log=lambda m: None)
    assert str(e.value) == (f"{big}: 268,435,457 bytes, more than 268,435,456 bytes (256 MiB, "
                            "the bound for one data file)")
    assert {p.name: p.stat().st_size for p in src.iterdir()} == before
    assert not (tmp_path / "c").exists()


def test_gzip_members_and_trailing_bytes():
    import gzip
    one = data.idx_header("labels", 2) + bytes([4, 7])
    two = gzip.compress(one[:5]) + gzip.compress(one[5:])  # two members: one file
    assert data.parse_idx(two, "labels", "x").tolist() == [4, 7]
    with pytest.raises(data.DataError) as e:
        data.parse_idx(gzip.compress(one) + b"junk", "labels", "x")
    assert str(e.value) == ("x: 4 bytes that are not gzip data after the compressed data, at "
                            f"byte offset {len(gzip.compress(one)):,}")
    cut = gzip.compress(one)[:-9]
    with pytest.raises(data.DataError) as e:
        data.parse_idx(cut, "labels", "x")
    assert str(e.value) == ("x: not a valid gzip file (the compressed data ends early: "
                            f"truncated at byte offset {len(cut)})")


def _folder_with(tmp_path, base, replace: dict) -> pathlib.Path:
    """A copy of the own dataset ``base`` with some files replaced by hostile ones."""
    src = tmp_path / "src"
    shutil.copytree(base, src)
    for old, new in replace.items():
        (src / old).unlink()
        shutil.copy(HOSTILE / new, src / new if old.endswith(".csv") else src / old)
    return src


@pytest.mark.parametrize("base,replace,message", [
    (OWN_CSV, {"digits_train.csv": "label11.csv"}, "line 2: label 11 is outside 0..9"),
    (OWN_IDX, {"train-images-idx3-ubyte.gz": "garbage-images-idx3-ubyte.gz"},
     "train-images-idx3-ubyte.gz: not a valid gzip file"),
    (OWN_IDX, {"t10k-labels-idx1-ubyte.gz": "label11-labels-idx1-ubyte"},
     "t10k-labels-idx1-ubyte.gz: label 11 at index 5 is outside 0..9"),
])
def test_prepare_refuses_before_writing(tmp_path, base, replace, message):
    src = _folder_with(tmp_path, base, replace)
    if "label11.csv" in replace.values():  # named train... so that it is the train split
        (src / "label11.csv").rename(src / "train-label11.csv")
    cache = tmp_path / "cache"
    with pytest.raises(data.DataError, match=message.replace(".", r"\.")):
        data.prepare(cache, src, log=lambda m: None)
    assert not cache.exists()


def test_images_and_labels_counts_differ(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(OWN_IDX, src)
    (src / "t10k-labels-idx1-ubyte.gz").unlink()
    labels = np.arange(4, dtype=np.uint8)
    (src / "t10k-labels-idx1-ubyte").write_bytes(data.idx_header("labels", 4) + labels.tobytes())
    with pytest.raises(data.DataError) as e:
        data.prepare(tmp_path / "c", src, log=lambda m: None)
    assert str(e.value) == (f"{src / 't10k-images-idx3-ubyte.gz'}: 5 images but "
                            f"{src / 't10k-labels-idx1-ubyte'} holds 4 labels")


def test_ambiguous_and_missing_files(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(OWN_CSV, src)
    shutil.copy(src / "digits_train.csv", src / "more_train.csv")
    with pytest.raises(data.DataError, match=r"2 files could be the train CSV "
                                             r"\(digits_train\.csv, more_train\.csv\); keep one"):
        data.prepare(tmp_path / "c", src, log=lambda m: None)


def test_data_cli_error_names_file_no_traceback(tmp_path):
    src = _folder_with(tmp_path, OWN_CSV, {"digits_test.csv": "non_numeric.csv"})
    (src / "non_numeric.csv").rename(src / "test_digits.csv")
    proc = subprocess.run([sys.executable, "-m", "webgpu_trainer.cli", "data", "--source",
                           str(src), "--cache", str(tmp_path / "c")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (f"error: {src / 'test_digits.csv'} line 3, field 101: 'x12' "
                                   "is not an integer")


# ----------------------------------------------------------------------------- labels vs kernels

def _tiny():
    w = np.random.default_rng(0).standard_normal((10, 784)).astype(np.float32) * 0.01
    return make_graph([node("Gemm", ["input", "fc.w"], ["logits"], transB=1)],
                      [("fc.w", w, "param")], [("input", ["N", 784])], [("logits", ["N", 10])])


def test_trainer_refuses_label_11_before_gpu_work():
    graph, blob = _tiny()
    good = Split(bytes(784 * 8), bytes(8), 8, bytes(8))
    labels = bytes([1, 2, 3, 11, 4, 5, 6, 7])
    bad = Split(bytes(784 * 8), labels, 8, labels)
    with pytest.raises(ValueError) as e:
        run(Trainer(GpuEngine(None), graph, blob, {"batch_size": 4, "val_images": 0}, bad,
                    good).setup())
    assert str(e.value).startswith("training label 11 at index 3 is outside 0..9 (the model "
                                   "has 10 classes)")
    with pytest.raises(ValueError, match="test label 11 at index 3 is outside 0..9"):
        run(Trainer(GpuEngine(None), graph, blob, {"batch_size": 4, "val_images": 0}, good,
                    bad).setup())


def test_numpy_loss_refuses_label_11():
    with pytest.raises(ValueError) as e:
        criterion({"loss": "cross_entropy", "reduction": "mean", "label_smoothing": 0.0,
                   "weight": None}, np.zeros((3, 10)), [1, 11, 2])
    assert str(e.value).startswith("label 11 at index 1 of the batch is outside 0..9")


@pytest.mark.parametrize("loss", ["cross_entropy", "nll", "mse", "bce_with_logits"])
def test_gpu_loss_kernels_ignore_and_flag_label_11(device, loss):
    """Were a label 11 to reach shaders/loss.wgsl, its sample is left out of the loss, its
    gradient row is 0 and the accuracy slot holds minus the count of such labels."""
    graph, blob = _tiny()
    x = np.random.default_rng(1).standard_normal((4, 784)).astype(np.float32)
    res = run(one_step(device, graph, blob, x, [1, 11, 3, 11], loss=loss))
    assert res["acc"] == -2.0
    plan = res["plan"]
    # the gradient the loss writes: of what it reads, or through its LogSoftmax (the head's
    # backward in the loss's dispatch) of the scores
    d = res["dacts"][plan.scores if plan.loss_through is plan.head_node is not None
                     else plan.loss_input]
    assert not d[[1, 3]].any() and d[[0, 2]].any()
    assert np.isfinite(res["loss"]) and np.isfinite(res["grads"]["fc.w"]).all()
    ok = run(one_step(device, graph, blob, x[[0, 2]], [1, 3], loss=loss))
    if loss in ("cross_entropy", "nll"):  # the mean over the valid samples
        assert res["loss"] == pytest.approx(ok["loss"], rel=1e-5)

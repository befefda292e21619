"""host/datasets sources (CIFAR-10/100 binary and python, IDX of any size, folders and .tar.gz)
on files generated in exactly the official formats (scripts/make_data_fixtures.py), the
hostile variants (exact errors; the previous dataset untouched, no temp folder left, a pickle's
os.system never run), and the `data` / `datasets` commands."""

import gzip
import hashlib
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

from webgpu_trainer.cli.main import main
from webgpu_trainer.host.datafiles import DataError
from webgpu_trainer.host.datasets import idx, prepare_source, store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import make_data_fixtures as fx  # noqa: E402

QUIET = dict(log=lambda s: None)


def snapshot(root):
    """{relative path: bytes} of every file under ``root`` (hidden temp folders included)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def check_written(folder, manifest, arrays):
    """Every shard holds exactly the source's arrays; mean/std are numpy's float64 ones."""
    for split, (x, y) in arrays.items():
        ent = manifest["splits"][split]
        got = np.frombuffer((folder / ent["images"]["file"]).read_bytes(), np.uint8)
        assert np.array_equal(got.reshape(x.shape), x)
        labels = np.frombuffer((folder / ent["labels"]["file"]).read_bytes(), np.uint8)
        assert labels.tolist() == y.tolist()
    ref = arrays["train"][0].astype(np.float64) / 255
    axes = (0, 2, 3)
    assert manifest["mean"] == [round(float(v), 4) for v in ref.mean(axis=axes)]
    assert manifest["std"] == [round(float(v), 4) for v in ref.std(axis=axes)]


@pytest.mark.parametrize("version", ["binary", "python"])
@pytest.mark.parametrize("k", [10, 100])
@pytest.mark.parametrize("packed", [False, True])
def test_cifar(tmp_path, version, k, packed):
    src = tmp_path / "src"
    arrays = (fx.cifar_binary if version == "binary" else fx.cifar_python)(src, k=k)
    if packed:
        src = fx.tar_gz(src, tmp_path / "cifar.tar.gz", "cifar-batches")
    root = tmp_path / "root"
    m, folder = prepare_source(src, root, **QUIET)
    name = "cifar10" if k == 10 else "cifar100"
    assert folder == root / name and m == store.read_manifest(folder)
    assert (m["name"], m["title"], m["kind"], m["sample_shape"], m["source"]) == (
        name, "CIFAR-10" if k == 10 else "CIFAR-100", "image", [3, 32, 32],
        f"{src.name} ({version} version)")
    assert m["classes"] == (fx.CIFAR10 if k == 10 else fx.CIFAR100)
    assert m["notes"] == ([] if k == 10 else ["fine labels used (the 20 coarse ones are not)"])
    check_written(folder, m, arrays)
    assert sorted(p.name for p in root.iterdir()) == [name]


@pytest.mark.parametrize("shape,gz", [((1, 8, 6), False), ((3, 5, 7), True)])
def test_idx_any_size(tmp_path, shape, gz):
    arrays = fx.idx_folder(tmp_path / "My Set", shape=shape, gz=gz)
    (tmp_path / "My Set" / "classes.txt").write_text("cat\ndog\n\nbird\n")
    m, folder = prepare_source(tmp_path / "My Set", tmp_path / "root", **QUIET)
    assert (m["name"], m["title"], m["sample_shape"], m["classes"]) == (
        "my-set", "My Set", list(shape), ["cat", "dog", "bird"])
    check_written(folder, m, arrays)


def test_idx_tar_named_and_default_classes(tmp_path):
    arrays = fx.idx_folder(tmp_path / "src", k=4, n=(8, 4))
    tar = fx.tar_gz(tmp_path / "src", tmp_path / "digits.tar.gz", "digits")
    m, folder = prepare_source(tar, tmp_path / "root", "mine", **QUIET)
    assert (folder.name, m["name"], m["classes"]) == ("mine", "mine", ["0", "1", "2", "3"])
    check_written(folder, m, arrays)


def _truncate(path, cut):
    path.write_bytes(path.read_bytes()[:-cut])


def _set_byte(path, offset, value):
    raw = bytearray(path.read_bytes())
    raw[offset] = value
    path.write_bytes(bytes(raw))


def _relabel_idx(folder, name, labels):
    (folder / name).write_bytes(fx.idx_bytes(np.asarray(labels, np.uint8)))


# (what, source builder -> (path, expected error)); {src} is the source folder
def hostile(kind, tmp):
    src = tmp / "src"
    if kind == "truncated cifar batch":
        fx.cifar_binary(src)
        _truncate(src / "data_batch_3.bin", 100)
        return src, (f"{src / 'data_batch_3.bin'}: truncated: record 9 (byte offset 27,657) "
                     "holds 2,973 of its 3,073 bytes")
    if kind == "cifar label out of range":
        fx.cifar_binary(src)
        _set_byte(src / "test_batch.bin", 2 * 3073, 10)
        return src, (f"{src / 'test_batch.bin'}: record 2 (byte offset 6,146): label 10 is "
                     "outside 0..9")
    if kind == "cifar-100 coarse label out of range":
        fx.cifar_binary(src, k=100)
        _set_byte(src / "train.bin", 3 * 3074, 20)
        return src, (f"{src / 'train.bin'}: record 3 (byte offset 9,222): coarse label 20 is "
                     "outside 0..19")
    if kind == "pickle that is not a batch":
        fx.cifar_python(src)
        (src / "data_batch_2").write_bytes(pickle.dumps([1, 2, 3], protocol=2))
        return src, (f"{src / 'data_batch_2'}: not a CIFAR batch: expected a dict with 'data' "
                     "and 'labels' (found a list)")
    if kind == "pickle with os.system":
        fx.cifar_python(src)
        (src / "data_batch_2").write_bytes(fx.evil_pickle(tmp / "PWNED"))
        return src, (f"{src / 'data_batch_2'}: not a CIFAR python batch: global posix.system "
                     "refused (only plain data and numpy arrays of numbers are read from a "
                     "pickle)")
    if kind == "batch missing":
        fx.cifar_binary(src)
        (src / "data_batch_4.bin").unlink()
        return src, (f"{src}: data_batch_4.bin missing (the CIFAR-10 binary version has "
                     "data_batch_1.bin, data_batch_2.bin, data_batch_3.bin, data_batch_4.bin, "
                     "data_batch_5.bin, test_batch.bin)")
    if kind in ("tar with ../ member", "tar with absolute member"):
        member = "../escape.bin" if "../" in kind else "/tmp/escape.bin"
        path = fx.tar_with_member(tmp / "bad.tar.gz", member)
        return path, f"{path}: member {member!r} has an absolute or '..' path: refused"
    if kind == "wrong idx magic":
        fx.idx_folder(src)
        (src / "t10k-labels-idx1-ubyte").write_bytes(
            fx.idx_bytes(np.zeros((4, 2, 2), np.uint8)))
        return src, (f"{src / 't10k-labels-idx1-ubyte'}: bad IDX magic 0x00000803, expected "
                     "0x00000801 (IDX labels: unsigned bytes, 1 dimensions)")
    if kind == "idx count mismatch":
        fx.idx_folder(src)
        _relabel_idx(src, "train-labels-idx1-ubyte", [0, 1, 2, 0, 1, 2, 0, 1])
        return src, (f"{src / 'train-images-idx3-ubyte'}: 9 images but "
                     f"{src / 'train-labels-idx1-ubyte'} holds 8 labels")
    if kind == "idx truncated":
        fx.idx_folder(src)
        _truncate(src / "train-images-idx3-ubyte", 50)
        return src, (f"{src / 'train-images-idx3-ubyte'}: truncated: the header says 9 images "
                     "(432 bytes after the header) but the file holds 382: record 7 is cut off "
                     "at byte offset 398 (the end of the file)")
    if kind == "idx labels beyond the class names":
        fx.idx_folder(src)
        _relabel_idx(src, "t10k-labels-idx1-ubyte", [0, 1, 5, 2])
        (src / "classes.txt").write_text("a\nb\nc\n")
        return src, f"{src / 'classes.txt'}: 3 class names, but the labels go up to 5 (6 classes)"
    if kind == "one class only":
        fx.idx_folder(src)
        _relabel_idx(src, "train-labels-idx1-ubyte", [0] * 9)
        _relabel_idx(src, "t10k-labels-idx1-ubyte", [0] * 4)
        return src, "1 class ('0'); at least 2 needed"
    if kind == "class without training images":
        fx.idx_folder(src)
        _relabel_idx(src, "t10k-labels-idx1-ubyte", [0, 1, 2, 3])
        return src, "1 of 4 classes have no training samples: '3'"
    raise AssertionError(kind)


HOSTILE = ["truncated cifar batch", "cifar label out of range",
           "cifar-100 coarse label out of range", "pickle that is not a batch",
           "pickle with os.system", "batch missing", "tar with ../ member",
           "tar with absolute member", "wrong idx magic", "idx count mismatch", "idx truncated",
           "idx labels beyond the class names", "one class only",
           "class without training images"]


@pytest.mark.parametrize("kind", HOSTILE)
def test_hostile_source_changes_nothing(tmp_path, kind):
    root = tmp_path / "root"
    fx.idx_folder(tmp_path / "good", k=2)
    prepare_source(tmp_path / "good", root, "victim", **QUIET)
    before = snapshot(root)
    path, message = hostile(kind, tmp_path)
    with pytest.raises(DataError) as err:
        prepare_source(path, root, "victim", **QUIET)
    assert str(err.value) == message
    assert snapshot(root) == before  # the previous dataset, byte for byte; no temp folder
    assert not (tmp_path / "PWNED").exists()  # the pickle's os.system never ran


def test_restricted_unpickler():
    """Python 3's own pickles of a batch load too; arrays of objects, calling numpy.ndarray
    and BUILD on anything but an array or a dtype are refused."""
    from webgpu_trainer.host.datasets.unpickle import load_plain
    batch = {b"data": np.arange(6, dtype=np.uint8).reshape(2, 3), "labels": [1, 2],
             "f": np.arange(3, dtype=">i4")}
    assert b"numpy.core.multiarray\n_reconstruct" in fx.py2_pickle(batch)  # as the originals
    for raw in [fx.py2_pickle(batch), *(pickle.dumps(batch, protocol=p) for p in (2, 3, 4))]:
        got = load_plain(raw, "b")
        assert got[b"data"].tolist() == [[0, 1, 2], [3, 4, 5]] and got["labels"] == [1, 2]
        assert got["f"].tolist() == [0, 1, 2]  # big-endian: the byte order was applied
    bad = {"object array": (pickle.dumps(np.array([None]), protocol=2),
                            "not a CIFAR python batch: dtype object refused (numbers only)"),
           "ndarray called": (b"\x80\x02cnumpy\nndarray\nK\x03\x85R.",
                              "not a readable pickle (TypeError: 'ndarray-marker' object is "
                              "not callable)"),
           "BUILD on a dict": (b"\x80\x02}}b.", "not a CIFAR python batch: BUILD on a dict "
                               "refused")}
    for raw, message in bad.values():
        with pytest.raises(DataError) as err:
            load_plain(raw, "f")
        assert str(err.value).startswith(f"f: {message}")


def test_tar_links_and_bounds(tmp_path, monkeypatch):
    """Link members are refused; a member or a whole archive past its bound is refused before
    it is read (bounds lowered here: the real ones are 256 MiB and 1 GiB)."""
    import tarfile
    from webgpu_trainer.host.datasets import archive
    link = tmp_path / "link.tar.gz"
    with tarfile.open(link, "w:gz") as tar:
        info = tarfile.TarInfo("cifar/data_batch_1.bin")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
    with pytest.raises(DataError) as err:
        prepare_source(link, tmp_path / "root", **QUIET)
    assert str(err.value) == (f"{link}: member 'cifar/data_batch_1.bin' is a link or device: "
                              "refused")
    fx.cifar_binary(tmp_path / "src")
    tar = fx.tar_gz(tmp_path / "src", tmp_path / "c.tar.gz", "c")
    monkeypatch.setattr(archive, "MAX_BYTES", 30_000)
    with pytest.raises(DataError) as err:
        prepare_source(tar, tmp_path / "root", **QUIET)
    assert str(err.value) == (f"{tar}: member 'c/data_batch_1.bin' is 30,730 bytes, more than "
                              "30,000 (256 MiB, the bound for one data file)")
    monkeypatch.setattr(archive, "MAX_BYTES", 1 << 28)
    monkeypatch.setattr(archive, "MAX_TOTAL", 100_000)
    with pytest.raises(DataError) as err:
        prepare_source(tar, tmp_path / "root", **QUIET)
    assert str(err.value) == (f"{tar}: unpacks to more than 100,000 bytes (1 GiB) or 10,000 "
                              "files: refused")
    assert not (tmp_path / "root").exists()


def test_cli_error_exit_and_message(tmp_path, capsys):
    path, message = hostile("truncated cifar batch", tmp_path)
    assert main(["data", "--source", str(path), "--data-root", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err
    assert err == f"error: {message}\n"
    assert not (tmp_path / "r").exists() or list((tmp_path / "r").iterdir()) == []
    assert main(["data", "--source", str(path), "--name", "Bad Name"]) == 1
    assert "dataset name 'Bad Name' is not valid" in capsys.readouterr().err
    assert main(["data", "--source", str(tmp_path / "nowhere")]) == 1
    assert capsys.readouterr().err == f"error: source {tmp_path / 'nowhere'} does not exist\n"


def test_cli_data_and_datasets_table(tmp_path, capsys):
    fx.cifar_binary(tmp_path / "cifar-10-batches-bin")
    root = str(tmp_path / "root")
    assert main(["data", "--source", str(tmp_path / "cifar-10-batches-bin"),
                 "--data-root", root]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "CIFAR-10 ready (train 50, test 10; 3x32x32, 10 classes) from cifar-10-batches-bin "
        "(binary version)")
    (tmp_path / "root" / "broken").mkdir()
    assert main(["datasets", "--data-root", root]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "name     title     kind   shape    classes  train  test    size",
        "cifar10  CIFAR-10  image  3x32x32       10     50    10  0.2 MB",
        "invalid (1; not usable: prepare them again or remove them):",
        f"  broken: {tmp_path / 'root' / 'broken'}: no manifest.json (not a prepared dataset)"]
    assert err == ""


FASHION = idx.FASHION_DIR
GZ_MD5 = {"train-images-idx3-ubyte.gz": "cf8536b0aa1a6ac5fa3f23001093305c",
          "train-labels-idx1-ubyte.gz": "10bea18fdb374794d4bb42e356e600c9",
          "t10k-images-idx3-ubyte.gz": "f78720b4224f21cce2f2ccf2d7a94c9a",
          "t10k-labels-idx1-ubyte.gz": "0d30e22e447f3c33dab9ed536400ac01"}


@pytest.mark.skipif(not FASHION.is_dir(), reason="Debian's dataset-fashion-mnist not installed")
def test_fashion_mnist_from_the_debian_package(tmp_path, capsys):
    assert {p.name: hashlib.md5(p.read_bytes()).hexdigest()
            for p in FASHION.glob("*.gz")} == GZ_MD5
    root = tmp_path / "root"
    assert main(["data", "--fashion-mnist", "--data-root", str(root)]) == 0
    m = store.read_manifest(root / "fashion-mnist")
    assert {s: m["splits"][s]["count"] for s in ("train", "test")} == {
        "train": 60000, "test": 10000}
    assert (m["name"], m["title"], m["sample_shape"], m["classes"]) == (
        "fashion-mnist", "Fashion-MNIST", [1, 28, 28],
        ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
         "Bag", "Ankle boot"])
    arrays = {}
    for split, stem in (("train", "train"), ("test", "t10k")):
        raw = [gzip.decompress((FASHION / f"{stem}-{p}-ubyte.gz").read_bytes())
               for p in ("images-idx3", "labels-idx1")]
        assert {p: m["splits"][split][p]["idx_md5"] for p in ("images", "labels")} == {
            p: hashlib.md5(r).hexdigest() for p, r in zip(("images", "labels"), raw)}
        arrays[split] = (np.frombuffer(raw[0], np.uint8, offset=16).reshape(-1, 1, 28, 28),
                         np.frombuffer(raw[1], np.uint8, offset=8))
    check_written(root / "fashion-mnist", m, arrays)
    assert (m["mean"], m["std"]) == ([0.286], [0.353])
    capsys.readouterr()
    assert main(["data", "--fashion-mnist", "--data-root", str(root)]) == 0  # kept, not redone
    assert capsys.readouterr().out.startswith(f"[data] cache ok: {root / 'fashion-mnist'}")


def test_digit_csv_folder_is_a_source(tmp_path):
    """The older MNIST-format CSV pair (tests/fixtures/hostile/data/own_csv) through SOURCES."""
    own = Path(__file__).resolve().parent / "fixtures" / "hostile" / "data" / "own_csv"
    m, folder = prepare_source(own, tmp_path, **QUIET)
    assert (folder.name, m["sample_shape"], m["classes"], m["splits"]["train"]["count"]) == (
        "own_csv", [1, 28, 28], [str(d) for d in range(10)], 12)


def test_mnist_idx_source_is_recognised_and_checked(tmp_path):
    """MNIST's own IDX files (from the real cache) -> 'mnist' with the idx md5s data.py's cache
    check wants; one changed pixel under the standard names -> refused, naming both md5s."""
    from webgpu_trainer.host import data
    data.prepare()
    src = tmp_path / "src"
    src.mkdir()
    for split, stem in (("train", "train"), ("test", "t10k")):
        images, labels = data.load(None, split)
        (src / f"{stem}-images-idx3-ubyte").write_bytes(fx.idx_bytes(images))
        (src / f"{stem}-labels-idx1-ubyte").write_bytes(fx.idx_bytes(labels))
    m, folder = prepare_source(src, tmp_path / "root", **QUIET)
    assert (folder.name, m["dataset"], m["mean"], m["std"]) == ("mnist", "MNIST", [0.1307],
                                                                [0.3081])
    assert data.check_cache(folder) == (m, "")
    _set_byte(src / "t10k-images-idx3-ubyte", 16 + 200, 7)
    with pytest.raises(DataError) as err:
        prepare_source(src, tmp_path / "root", **QUIET)
    assert str(err.value).startswith(
        f"checksum mismatch for test images from {src / 't10k-images-idx3-ubyte'}: md5 of the "
        "uncompressed IDX file is ")
    assert str(err.value).endswith(
        ", expected 2646ac647ad5339dbf082846283269ea (MNIST) or 8181f5470baa50b63fa0f6fddb340f0a"
        " (Fashion-MNIST); the files carry their standard names and counts but are corrupt or "
        "neither")


def test_a_built_in_name_is_kept_for_its_dataset(tmp_path):
    """``--name mnist`` for a CIFAR archive is refused (a plain ``train`` would then train on
    it as MNIST), nothing written; CIFAR-10 itself keeps its own name."""
    src = tmp_path / "src"
    fx.cifar_binary(src)
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(DataError, match=r"dataset name 'mnist' is a built-in dataset's and "
                                        r".* is not mnist: choose another --name"):
        prepare_source(src, root, "mnist", log=lambda s: None)
    assert list(root.iterdir()) == []
    manifest, folder = prepare_source(src, root, "cifar10", log=lambda s: None)
    assert folder == root / "cifar10" and manifest["name"] == "cifar10"


def test_a_manifest_nested_too_deep_is_a_bad_manifest(tmp_path):
    """JSON nested 100,000 deep (a RecursionError in json) is reported like any bad manifest."""
    folder = tmp_path / "deep"
    folder.mkdir()
    (folder / "manifest.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(DataError, match="manifest unreadable"):
        store.read_manifest(folder)

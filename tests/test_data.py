"""MNIST preparation: parsing IDX/CSV, checksum verification, cache reuse and rebuild.

Synthetic folders (a few random images) exercise every code path quickly; one test runs on
the real cache (prepared on demand, ~10 s the first time) and checks the IDX originals' md5.
"""

import gzip
import json

import numpy as np
import pytest

from webgpu_trainer.host import data


def synthetic(n_train=7, n_test=3, seed=0):
    rng = np.random.default_rng(seed)
    return {s: (rng.integers(0, 256, (n, 784), dtype=np.uint8),
                rng.integers(0, 10, n, dtype=np.uint8))
            for s, n in (("train", n_train), ("test", n_test))}


def md5s_of(arrays):
    return {(s, k): data.idx_md5(k, arr) for s, (im, lb) in arrays.items()
            for k, arr in (("images", im), ("labels", lb))}


def write_idx(folder, arrays, gz=False, dotted=False):
    folder.mkdir(parents=True, exist_ok=True)
    for (split, kind), stem in data.IDX_STEMS.items():
        arr = arrays[split][0 if kind == "images" else 1]
        raw = data.idx_header(kind, len(arr)) + arr.tobytes()
        name = stem.replace("-idx", ".idx") if dotted else stem
        if gz:
            (folder / (name + ".gz")).write_bytes(gzip.compress(raw))
        else:
            (folder / name).write_bytes(raw)


def write_csv(folder, arrays, header=True, crlf=False):
    folder.mkdir(parents=True, exist_ok=True)
    nl = "\r\n" if crlf else "\n"
    for split, (im, lb) in arrays.items():
        lines = (["label," + ",".join(f"p{i}" for i in range(784))] if header else [])
        lines += [",".join(map(str, [int(lb[i]), *im[i].tolist()])) for i in range(len(lb))]
        (folder / f"mnist_{split}.csv").write_text(nl.join(lines) + nl)


def check_cache_matches(cache, manifest, arrays):
    assert manifest["format"] == data.FORMAT
    for split, (im, lb) in arrays.items():
        ent = manifest["splits"][split]
        assert ent["count"] == len(lb)
        assert ent["images"]["shape"] == [len(lb), 1, 28, 28]
        assert ent["images"]["dtype"] == ent["labels"]["dtype"] == "uint8"
        for kind, arr in (("images", im), ("labels", lb)):
            e = ent[kind]
            assert e["file"] == f"{split}-{kind}-{e['sha256'][:12]}.u8"
            assert (cache / e["file"]).read_bytes() == arr.tobytes()
            assert e["bytes"] == arr.size
    assert json.loads((cache / "manifest.json").read_text()) == manifest


@pytest.mark.parametrize("gz,dotted", [(False, False), (True, False), (True, True)])
def test_idx_folder(tmp_path, gz, dotted):
    arrays = synthetic()
    write_idx(tmp_path / "src", arrays, gz=gz, dotted=dotted)
    cache = tmp_path / "cache"
    manifest = data.prepare(cache, tmp_path / "src", expected=md5s_of(arrays), log=print)
    check_cache_matches(cache, manifest, arrays)
    assert manifest["source"].startswith("IDX folder")
    images, labels = data.load(cache, "test")
    assert images.shape == (3, 28, 28) and (labels == arrays["test"][1]).all()


@pytest.mark.parametrize("header,crlf", [(True, False), (False, True)])
def test_csv_folder(tmp_path, header, crlf):
    arrays = synthetic()
    write_csv(tmp_path / "src", arrays, header=header, crlf=crlf)
    cache = tmp_path / "cache"
    manifest = data.prepare(cache, tmp_path / "src", expected=md5s_of(arrays))
    check_cache_matches(cache, manifest, arrays)
    assert manifest["source"].startswith("CSV folder")


def test_checksum_mismatch_is_reported(tmp_path, monkeypatch):
    """A folder that claims to be MNIST (standard names and sizes) must match its checksums;
    the sizes are patched down to the synthetic ones (7 + 3 images)."""
    arrays = synthetic()
    write_idx(tmp_path / "src", arrays)
    monkeypatch.setitem(data.SPLITS, "train", 7)
    monkeypatch.setitem(data.SPLITS, "test", 3)
    wrong = md5s_of(arrays) | {("train", "images"): "0" * 32}
    with pytest.raises(data.DataError, match=r"checksum mismatch for train images"):
        data.prepare(tmp_path / "cache", tmp_path / "src", expected=wrong)
    assert not (tmp_path / "cache" / "manifest.json").exists()
    # the real expected md5s reject synthetic data too
    with pytest.raises(data.DataError, match="not the standard MNIST"):
        data.prepare(tmp_path / "cache", tmp_path / "src")
    # other names: the user's own dataset, no checksum
    for p in (tmp_path / "src").iterdir():
        p.rename(p.with_name("my-" + p.name))
    manifest = data.prepare(tmp_path / "cache", tmp_path / "src")
    assert manifest["dataset"] == "own"


def test_bad_inputs(tmp_path):
    with pytest.raises(data.DataError, match="bad IDX magic"):
        data.parse_idx(b"\0\0\x08\x01" + bytes(12), "images")
    with pytest.raises(data.DataError, match="truncated"):
        data.parse_idx(data.idx_header("labels", 5) + bytes(4), "labels")
    with pytest.raises(data.DataError, match="3 fields, expected 785"):
        data.parse_csv(b"1,2,3\n4,5,6\n")
    with pytest.raises(data.DataError, match="0..255"):
        data.parse_csv(("3,300," + ",".join(["0"] * 783) + "\n").encode())
    (tmp_path / "empty").mkdir()
    with pytest.raises(data.DataError, match="no dataset found"):
        data.prepare(tmp_path / "cache", tmp_path / "empty")


def test_cache_reused_and_corruption_rebuilt(tmp_path, capsys):
    arrays = synthetic()
    calls = []

    def fetch(log):
        calls.append(1)
        return arrays, "synthetic"

    cache = tmp_path / "cache"
    kw = dict(expected=md5s_of(arrays), fetchers=[fetch], log=print)
    m1 = data.prepare(cache, **kw)
    assert len(calls) == 1
    m2 = data.prepare(cache, **kw)  # idempotent: cache hit, nothing fetched or rewritten
    assert len(calls) == 1 and m2 == m1
    assert "cache ok" in capsys.readouterr().out

    shard = cache / m1["splits"]["train"]["images"]["file"]
    raw = bytearray(shard.read_bytes())
    raw[100] ^= 0xFF  # corrupt one byte, same size
    shard.write_bytes(bytes(raw))
    m3 = data.prepare(cache, **kw)
    out = capsys.readouterr().out
    assert f"shard {shard.name} sha256" in out and "corrupt" in out and "rebuilding" in out
    assert len(calls) == 2 and m3 == m1
    check_cache_matches(cache, m3, arrays)

    shard.write_bytes(bytes(raw[:50]))  # partial write
    data.prepare(cache, **kw)
    assert "partial" in capsys.readouterr().out
    check_cache_matches(cache, m1, arrays)

    (cache / m1["splits"]["test"]["labels"]["file"]).unlink()  # missing shard
    data.prepare(cache, **kw)
    assert "is missing" in capsys.readouterr().out
    (cache / "manifest.json").write_text("{not json")
    data.prepare(cache, **kw)
    assert "manifest unreadable" in capsys.readouterr().out
    check_cache_matches(cache, m1, arrays)
    assert len(calls) == 5
    # each shard and its gzip copy (served to browsers that accept gzip), nothing else
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [m1["splits"][s][k]["file"] + ext for s in ("train", "test")
         for k in ("images", "labels") for ext in ("", ".gz")] + ["manifest.json"])
    import gzip
    for shard in cache.glob("*.u8"):
        assert gzip.decompress(shard.with_name(shard.name + ".gz").read_bytes()) == \
            shard.read_bytes()


def test_failing_sources_fall_through(tmp_path, capsys):
    arrays = synthetic()

    def broken(log):
        raise data.DataError("offline")

    def corrupt(log):
        return synthetic(seed=1), "wrong data"

    def good(log):
        return arrays, "good"

    m = data.prepare(tmp_path / "c", expected=md5s_of(arrays), fetchers=[broken, corrupt, good])
    assert m["source"] == "good"
    out = capsys.readouterr().out
    assert "offline" in out and "checksum mismatch" in out
    with pytest.raises(data.DataError, match="no MNIST source worked"):
        data.prepare(tmp_path / "d", expected=md5s_of(arrays), fetchers=[broken])


def test_earlier_cache_is_moved_without_a_download(tmp_path, monkeypatch, capsys):
    """A valid old-format cache in .cache/mnist (webgpu-trainer/mnist@1) fills the new
    .cache/datasets/mnist: no fetcher runs; the new manifest is dataset@1."""
    from webgpu_trainer.host.datasets import store
    arrays = synthetic()
    monkeypatch.setattr(store, "default_root", lambda: tmp_path / "datasets")
    old = tmp_path / "mnist"
    data.prepare(old, expected=md5s_of(arrays), fetchers=[lambda log: (arrays, "synthetic")])
    m = json.loads((old / "manifest.json").read_text())
    m["format"] = "webgpu-trainer/mnist@1"  # as the earlier versions wrote it
    for k in ("name", "title", "kind", "sample_shape", "classes", "mean", "std", "notes"):
        del m[k]
    (old / "manifest.json").write_text(json.dumps(m))
    assert data.check_cache(old, md5s_of(arrays))[0]["name"] == "mnist"

    def offline(log):
        raise AssertionError("downloaded")

    monkeypatch.setattr(data, "read_pypi", offline)
    monkeypatch.setattr(data, "read_urls", offline)
    new = data.prepare(data.default_cache_dir(), expected=md5s_of(arrays))
    assert data.default_cache_dir() == tmp_path / "datasets" / "mnist"
    assert (new["format"], new["source"]) == ("webgpu-trainer/dataset@1", "synthetic")
    assert f"reading the earlier cache {old}" in capsys.readouterr().out
    check_cache_matches(tmp_path / "datasets" / "mnist", new, arrays)


def test_csv_parse_round_trip():
    """6,000 CSV rows parse back to the same images and labels (vectorised parser; its speed is
    a benchmark's business, not a timed test's: a loaded CI machine would make it flaky)."""
    arrays = synthetic(n_train=6000, n_test=1)
    im, lb = arrays["train"]
    text = "\n".join(",".join(map(str, [int(lb[i]), *im[i].tolist()])) for i in range(6000))
    im2, lb2 = data.parse_csv(text.encode())
    assert im2.shape == im.shape and (im2 == im).all() and (lb2 == lb).all()


def test_real_mnist_cache():
    """The real cache (prepared if missing) matches the IDX originals byte for byte."""
    manifest = data.prepare()
    assert {s: manifest["splits"][s]["count"] for s in ("train", "test")} == {
        "train": 60000, "test": 10000}
    assert data.default_cache_dir().parts[-3:] == (".cache", "datasets", "mnist")
    # computed over the training split (exact sums), rounded: the well-known numbers
    assert (manifest["format"], manifest["name"], manifest["dataset"], manifest["mean"],
            manifest["std"], manifest["classes"]) == (
        "webgpu-trainer/dataset@1", "mnist", "MNIST", [0.1307], [0.3081],
        [str(d) for d in range(10)])
    for split in ("train", "test"):
        images, labels = data.load(None, split)
        assert images.shape == (data.SPLITS[split], 28, 28)
        assert data.idx_md5("images", images.reshape(len(images), -1)) == \
            data.EXPECTED_MD5[(split, "images")]
        assert data.idx_md5("labels", labels) == data.EXPECTED_MD5[(split, "labels")]
        assert np.bincount(labels, minlength=10).min() > data.SPLITS[split] // 20
    assert data.EXPECTED_MD5[("train", "images")] == "6bbc9ace898e44ae57da46a324031adb"
    assert data.EXPECTED_MD5[("test", "images")] == "2646ac647ad5339dbf082846283269ea"
    _, labels = data.load(None, "test")
    assert labels[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]

"""POST /api/datasets and /api/datasets/scan (issue 18): a .zip of class folders or a CSV is
prepared by the server (201 + summary); every refusal is a 400/413 JSON error naming the
problem, the previous dataset stays byte for byte, and the server keeps answering."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("make_hostile_images",
                                               REPO / "scripts" / "make_hostile_images.py")
fx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fx)


def _files(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _alive(c) -> None:
    r = c.get("/api/models")
    assert r.status_code == 200 and isinstance(r.json(), list)


def test_zip_upload_prepared_then_replaced_atomically(dataset_client, tmp_path):
    c, root, _ = dataset_client
    body = fx.make_good_zip(tmp_path).read_bytes()
    r = c.post("/api/datasets?name=pets&size=16&color=auto&test=0.2&title=My%20pets",
               content=body)
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["dataset"]["name"] == "pets" and out["dataset"]["kind"] == "image"
    assert out["dataset"]["title"] == "My pets"
    assert out["dataset"]["classes"] == ["cat", "dog", "fox"]
    assert out["dataset"]["sample_shape"] == [3, 16, 16]
    assert (out["dataset"]["train"], out["dataset"]["test"]) == (12, 3)
    assert out["source"].startswith("upload.zip (15 images in 3 class folders")
    first = _files(root / "pets")
    assert "manifest.json" in first and len(first) == 5
    # a second upload replaces it (grey now)
    r = c.post("/api/datasets?name=pets&size=8&color=grey", content=body)
    assert r.status_code == 201, r.text
    assert r.json()["dataset"]["sample_shape"] == [1, 8, 8]
    assert _files(root / "pets") != first
    assert sorted(p.name for p in root.iterdir()) == ["pets"]  # no temp files left


@pytest.mark.parametrize("maker,status,message", [
    ("make_traversal_zip", 400, "zip member '../evil/x.png': names with '..' are refused"),
    ("make_symlink_zip", 400, "zip member 'cat/link.png' is a symbolic link: refused (a zip "
                              "of images holds files only)"),
    ("make_one_class_zip", 400, "the upload: 1 class folder ('cat'): a classifier needs at "
                                "least 2, one subfolder per class"),
    ("make_pixel_bomb_zip", 400, "'dog/huge.png': 10000x10000 = 100,000,000 pixels, more than "
                                 "Pillow's limit of 89,478,485: refused as a decompression "
                                 "bomb"),
])
def test_hostile_upload_400_previous_dataset_intact(dataset_client, tmp_path, maker, status,
                                                   message):
    c, root, _ = dataset_client
    good = fx.make_good_zip(tmp_path).read_bytes()
    assert c.post("/api/datasets?name=pets&size=8", content=good).status_code == 201
    before = _files(root)
    r = c.post("/api/datasets?name=pets&size=8", content=getattr(fx, maker)(tmp_path)
               .read_bytes())
    assert r.status_code == status and r.json() == {"error": message}
    assert _files(root) == before
    _alive(c)


def test_csv_upload_and_bad_csv(dataset_client, tmp_path):
    c, root, _ = dataset_client
    text = "a,b,label\n" + "".join(f"{i},{i % 3},{'xy'[i % 2]}\n" for i in range(20))
    r = c.post("/api/datasets?name=tab&test=0.25", content=text.encode())
    assert r.status_code == 201, r.text
    assert r.json()["dataset"] | {"bytes": 0} == {
        "name": "tab", "title": "tab", "kind": "table", "sample_shape": [2],
        "classes": ["x", "y"], "train": 14, "test": 6, "bytes": 0}  # 0.25 * 10 -> 3 each
    before = _files(root)
    r = c.post("/api/datasets?name=tab", content=b"a,b,label\n1,2,x\n3,oops,y\n")
    assert r.status_code == 400
    assert r.json() == {"error": "the upload, line 3, column 2 'b': 'oops' is not a number"}
    assert _files(root) == before
    _alive(c)


@pytest.mark.parametrize("query,message", [
    ("name=MNIST", "dataset name 'MNIST' is not valid: use 1-40 characters, lowercase "
                   "letters, digits, '-' or '_', starting with a letter or digit"),
    ("name=../x", "dataset name '../x' is not valid: use 1-40 characters, lowercase letters, "
                  "digits, '-' or '_', starting with a letter or digit"),
    ("name=cifar10", "dataset name 'cifar10' is a built-in dataset's: choose another name"),
    # one range and one message for the route and the CLI (images.check_size)
    ("name=ok&size=big", "size 'big': use a whole number of pixels from 8 to 256 (28 for "
                         "digits, 32 for CIFAR-like photos)"),
    ("name=ok&size=4", "size 4: use a whole number of pixels from 8 to 256 (28 for digits, "
                       "32 for CIFAR-like photos)"),
    ("name=ok&color=pink", "color 'pink': use one of auto, rgb, grey"),
    ("name=ok&test=2", "test fraction 2.0: use a number above 0 and at most 0.9"),
])
def test_bad_parameters_400(dataset_client, tmp_path, query, message):
    c, root, _ = dataset_client
    r = c.post(f"/api/datasets?{query}", content=fx.make_good_zip(tmp_path).read_bytes())
    assert r.status_code == 400 and r.json() == {"error": message}
    assert not root.exists() or not any(p.is_dir() for p in root.iterdir())


def test_413_before_reading_and_empty_body(dataset_client, tmp_path):
    c, root, app = dataset_client
    app.state.datasets.max_bytes = 1000
    body = fx.make_good_zip(tmp_path).read_bytes()
    r = c.post("/api/datasets?name=pets", content=body)
    assert r.status_code == 413
    assert r.json() == {"error": f"the upload for dataset 'pets' is {len(body):,} bytes; the "
                                 "upload limit is 1,000"}
    r = c.post("/api/datasets?name=pets", content=b"")
    assert r.status_code == 400 and r.json() == {
        "error": "the upload for dataset 'pets': the upload is empty (send a .zip of class "
                 "folders or a .csv table)"}
    assert not (root / "pets").exists() and list(root.iterdir()) == []
    _alive(c)


def test_scan_preview_writes_nothing(dataset_client, tmp_path):
    c, root, _ = dataset_client
    r = c.post("/api/datasets/scan", content=fx.make_mixed_zip(tmp_path).read_bytes())
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["kind"] == "image" and [k["count"] for k in out["classes"]] == [3, 3]
    assert out["ignored"] == 3 and len(out["refused"]) == 3
    r = c.post("/api/datasets/scan", content=b"a,label\n1,x\n2,y\n3,x\n4,y\n")
    assert r.status_code == 200 and r.json()["classes"] == [{"name": "x", "count": 2},
                                                            {"name": "y", "count": 2}]
    r = c.post("/api/datasets/scan", content=fx.make_bomb_zip(tmp_path).read_bytes())
    assert r.status_code == 400 and "refused as a zip bomb" in r.json()["error"]
    assert list(root.iterdir()) == []


def test_413_while_streaming_without_content_length(dataset_client, tmp_path):
    c, root, app = dataset_client
    app.state.datasets.max_bytes = 1000
    body = fx.make_good_zip(tmp_path).read_bytes()

    def chunks():  # a generator: httpx sends it chunked, with no Content-Length
        for i in range(0, len(body), 300):
            yield body[i:i + 300]
    r = c.post("/api/datasets?name=pets", content=chunks())
    assert r.status_code == 413 and r.json() == {
        "error": "the upload for dataset 'pets' is larger than the upload limit of 1,000 bytes"}
    assert list(root.iterdir()) == []  # the partial temp file is gone
    _alive(c)


_TABLE = ("a,b,label\n" + "".join(f"{i},{i % 3},{'xy'[i % 2]}\n" for i in range(20))).encode()


@pytest.mark.parametrize("kind,query,message", [
    ("zip", "name=pets&label=a", "label= applies to a CSV table only, and the upload is a "
                                 "folder or .zip of photos: leave it out"),
    ("csv", "name=pets&size=32", "size= applies to a folder or .zip of photos only, and the "
                                 "upload is a CSV table: leave it out"),
    ("csv", "name=pets&test=0.25&color=grey", "color= applies to a folder or .zip of photos "
                                              "only, and the upload is a CSV table: leave it "
                                              "out"),
])
def test_option_the_source_does_not_take_422(dataset_client, tmp_path, kind, query, message):
    """The rule of `webgpu-trainer data --source` (datasets.refused_option): an option the
    upload's kind does not take is refused, the dataset there stays byte for byte."""
    c, root, _ = dataset_client
    assert c.post("/api/datasets?name=pets&size=8",
                  content=fx.make_good_zip(tmp_path).read_bytes()).status_code == 201
    before = _files(root)
    body = fx.make_good_zip(tmp_path).read_bytes() if kind == "zip" else _TABLE
    for route in ("/api/datasets", "/api/datasets/scan"):
        r = c.post(f"{route}?{query}", content=body)
        assert r.status_code == 422 and r.json() == {"error": message}
    assert _files(root) == before and sorted(p.name for p in root.iterdir()) == ["pets"]
    _alive(c)


def test_seed_is_used_as_the_cli_uses_it(dataset_client, tmp_path):
    """seed= (ignored before) splits as `webgpu-trainer data --seed` does."""
    from webgpu_trainer.host.datasets import prepare_source
    c, root, _ = dataset_client
    (tmp_path / "t.csv").write_bytes(_TABLE)
    shards = {}
    for seed in (0, 3):
        assert c.post(f"/api/datasets?name=s{seed}&seed={seed}", content=_TABLE) \
            .status_code == 201
        shards[seed] = {k: v for k, v in _files(root / f"s{seed}").items() if k != "manifest.json"}
    cli_root = tmp_path / "cli"
    prepare_source(tmp_path / "t.csv", cli_root, "s3", lambda _m: None, seed=3)
    assert shards[3] == {k: v for k, v in _files(cli_root / "s3").items()
                         if k != "manifest.json"}
    assert shards[3] != shards[0]
    r = c.post("/api/datasets?name=s1&seed=-1", content=_TABLE)
    assert r.status_code == 400
    assert r.json() == {"error": "seed -1: use a whole number from 0 to 4,294,967,295"}


_LONG_KEY = "k" * 10_000
_TAKES = "name, title, file, label, size, color, test, seed"


@pytest.mark.parametrize("query,message", [
    ("__proto__=1", "unknown query parameter '__proto__'"),
    ("constructor=x", "unknown query parameter 'constructor'"),
    ("s%D1%96ze=8", "unknown query parameter 's\\u0456ze'"),      # Cyrillic і in "size"
    ("size%EF%BC%9D8=1", "unknown query parameter 'size\\uff1d8'"),  # fullwidth '='
    ("sizes=8", "unknown query parameter 'sizes'"),
    (f"{_LONG_KEY}=1", "unknown query parameter '" + "k" * 39 + "... (10,000 characters)"),
])
def test_unknown_query_key_400_names_it(dataset_client, tmp_path, query, message):
    """A query key neither route takes was ignored before (a typo like sizes=8 gave a 28-pixel
    dataset without a word); now 400 naming the key (ascii: a look-alike shows its code point;
    a 10 kB key cut, its length named) and what the route takes. Nothing written, the
    dataset there stays byte for byte."""
    c, root, _ = dataset_client
    assert c.post("/api/datasets?name=pets&size=8",
                  content=fx.make_good_zip(tmp_path).read_bytes()).status_code == 201
    before = _files(root)
    for route in ("/api/datasets", "/api/datasets/scan"):
        name = "name=pets&" if route == "/api/datasets" else ""
        r = c.post(f"{route}?{name}{query}", content=_TABLE)
        assert r.status_code == 400 and r.json() == {
            "error": f"POST {route}: {message}; it takes {_TAKES}"}
    assert _files(root) == before and sorted(p.name for p in root.iterdir()) == ["pets"]
    _alive(c)


@pytest.mark.parametrize("query,key,times", [
    ("name=pets&name=other", "name", 2), ("name=pets&size=8&size=16&size=8", "size", 3)])
def test_repeated_query_key_400(dataset_client, tmp_path, query, key, times):
    """A key given twice (which one counted was Starlette's choice: the last) is refused."""
    c, root, _ = dataset_client
    r = c.post(f"/api/datasets?{query}", content=fx.make_good_zip(tmp_path).read_bytes())
    assert r.status_code == 400 and r.json() == {
        "error": f"POST /api/datasets: query parameter {key!r} is given {times} times; give it "
                 "once"}
    assert not root.exists() or list(root.iterdir()) == []
    _alive(c)

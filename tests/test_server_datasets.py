"""``GET /api/datasets`` and ``/data/<name>/...`` (host/data_routes.py) with the default
(``--data-dir``, old MNIST format) dataset and prepared ones under the data root, including
hostile names and broken manifests: each answer is a JSON error naming the problem, and the
server keeps serving the good datasets afterwards."""

import hashlib
import json

import numpy as np
import pytest
from starlette.testclient import TestClient

from dataset_fixtures import RGB_CLASSES, colour_blobs, write_image_dataset
from test_server import raw_get
from webgpu_trainer.host import data, server


GOOD = {"format": "webgpu-trainer/dataset@1", "name": "broken", "kind": "image",
        "sample_shape": [3, 8, 8], "classes": RGB_CLASSES, "mean": [0.5] * 3,
        "std": [0.2] * 3}


@pytest.fixture()
def env(tmp_path):
    rng = np.random.default_rng(1)
    arrays = {s: (rng.integers(0, 256, (n, 784), dtype=np.uint8),
                  rng.integers(0, 10, n, dtype=np.uint8)) for s, n in (("train", 5), ("test", 2))}
    ddir = tmp_path / "mnist-cache"
    mnist = data.prepare(ddir, expected=None, fetchers=[lambda log: (arrays, "synthetic")],
                         log=lambda m: None)
    droot = tmp_path / "datasets"
    rgb = write_image_dataset(droot, "blobs", {"train": colour_blobs(12), "test":
                                               colour_blobs(6, seed=1)}, RGB_CLASSES,
                              title="Colour blobs")
    app = server.create_app(tmp_path, tmp_path / "models", ddir, tmp_path / "wheels",
                            data_root=droot)
    return {"client": TestClient(app), "app": app, "root": droot, "mnist": mnist, "rgb": rgb,
            "arrays": arrays, "ddir": ddir}


def good_still_served(env):
    """The server still answers both good datasets, bytes intact."""
    c = env["client"]
    r = c.get("/data/blobs/" + env["rgb"]["splits"]["test"]["labels"]["file"])
    assert r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == \
        env["rgb"]["splits"]["test"]["labels"]["sha256"]
    r = c.get("/data/mnist/" + env["mnist"]["splits"]["test"]["labels"]["file"])
    assert r.status_code == 200 and r.content == env["arrays"]["test"][1].tobytes()


def test_list(env):
    body = env["client"].get("/api/datasets").json()
    assert body["default"] == "mnist"
    assert [d["name"] for d in body["datasets"]] == ["blobs", "mnist"]
    blobs, mnist = body["datasets"]
    assert blobs == {"name": "blobs", "title": "Colour blobs", "kind": "image",
                     "sample_shape": [3, 8, 8], "classes": ["red", "green", "blue"],
                     "train": 12, "test": 6, "bytes": 12 * 192 + 12 + 6 * 192 + 6}
    assert mnist["sample_shape"] == [1, 28, 28] and mnist["classes"] == list("0123456789")
    assert (mnist["train"], mnist["test"], mnist["bytes"]) == (5, 2, 7 * 785)
    assert "problems" not in body


def test_manifest_and_shards(env):
    c = env["client"]
    assert c.get("/data/blobs/manifest.json").json() == env["rgb"]
    x, y = colour_blobs(12)
    ent = env["rgb"]["splits"]["train"]["images"]
    r = c.get("/data/blobs/" + ent["file"], headers={"Accept-Encoding": "identity"})
    assert r.status_code == 200 and r.content == x.tobytes()
    assert "immutable" in r.headers["cache-control"]
    r = c.get("/data/blobs/" + ent["file"], headers={"Range": "bytes=192-195"})
    assert r.status_code == 206 and r.content == x.tobytes()[192:196]
    assert c.get("/data/mnist/manifest.json").json() == env["mnist"]


@pytest.mark.parametrize("path,status,error", [
    ("/data/%2e%2e/manifest.json", 400, "bad dataset name '..'"),
    ("/data/..%2fmnist-cache/manifest.json", 400, "bad dataset name '..'"),
    ("/data/__proto__/manifest.json", 400, "bad dataset name '__proto__'"),
    ("/data/constructor/manifest.json", 404, "dataset 'constructor' not found"),
    ("/data/MNIST/manifest.json", 400, "bad dataset name 'MNIST'"),
    ("/data/mn%D1%96st/manifest.json", 400, "bad dataset name 'mnіst'"),  # Cyrillic і
    ("/data/blobs%0A/manifest.json", 400, "bad dataset name 'blobs\\n'"),
    ("/data/" + "a" * 41 + "/manifest.json", 400, "bad dataset name '" + "a" * 41 + "'"),
    ("/data/" + "a" * 5000 + "/manifest.json", 400, "bad dataset name '" + "a" * 45 + "...'"),
    ("/data/nothing/x.u8", 404, "dataset 'nothing' not found"),
    ("/data/blobs/a/b.u8", 400, "bad shard name: 'a/b.u8'"),
    ("/data/blobs/manifest.jsonx", 404, "shard manifest.jsonx is not in the blobs manifest"),
])
def test_hostile_names(env, path, status, error):
    r = env["client"].get(path)
    assert r.status_code == status, r.text
    assert r.json()["error"].startswith(error), r.json()
    assert len(r.text) < 400
    good_still_served(env)


@pytest.mark.parametrize("path,status,error", [
    ("/data/blobs/../mnist-cache/manifest.json", 400, "bad shard name: '../mnist-cache/"),
    ("/data/../mnist-cache/manifest.json", 400, "bad dataset name '..'"),
    ("/data/./manifest.json", 400, "bad dataset name '.'"),
])
def test_raw_dotdot_not_normalised(env, path, status, error):
    code, body = raw_get(env["app"], path)
    assert code == status and json.loads(body)["error"].startswith(error), body
    good_still_served(env)


@pytest.mark.parametrize("text,problem", [
    ("{not json", "broken: Expecting property name enclosed in double quotes"),
    ("[1, 2]", "broken: dataset manifest must be a JSON object, got [1, 2]"),
    ('{"splits": {"train": {}}}', "broken: dataset manifest: format None is not "
                                  "'webgpu-trainer/dataset@1'"),
    (json.dumps({**GOOD, "classes": ["only one"]}), "broken: dataset manifest: classes must "
                                                     "be 2 to 256 names, got ['only one']"),
    (json.dumps({**GOOD, "splits": {"train": {}}}), "broken: manifest.json has no 'splits' "
                                                     "with 'train' and 'test'"),
])
def test_broken_manifest(env, text, problem):
    (env["root"] / "broken").mkdir()
    (env["root"] / "broken" / "manifest.json").write_text(text)
    body = env["client"].get("/api/datasets").json()
    assert [d["name"] for d in body["datasets"]] == ["blobs", "mnist"]
    assert len(body["problems"]) == 1 and body["problems"][0].startswith(problem), body
    r = env["client"].get("/data/broken/manifest.json")
    assert r.status_code == 500 and r.json()["error"].startswith("dataset " + problem)
    assert (env["root"] / "broken" / "manifest.json").read_text() == text
    good_still_served(env)


def test_shard_path_escaping_the_folder(env, tmp_path):
    (tmp_path / "secret.u8").write_bytes(b"SECRET")
    m = json.loads((env["root"] / "blobs" / "manifest.json").read_text())
    m["splits"]["test"]["labels"]["file"] = "../secret.u8"
    (env["root"] / "evil").mkdir()
    (env["root"] / "evil" / "manifest.json").write_text(json.dumps(m))
    body = env["client"].get("/api/datasets").json()
    assert body["problems"] == ["evil: manifest.json: splits.test.labels.file is not a file "
                                "name in the dataset's folder: '../secret.u8'"]
    for path in ("/data/evil/manifest.json", "/data/evil/..%2fsecret.u8"):
        r = env["client"].get(path)
        assert r.status_code in (400, 500) and b"SECRET" not in r.content, r.text
    good_still_served(env)


def test_corrupt_shard_is_500_naming_it(env):
    ent = env["rgb"]["splits"]["train"]["labels"]
    path = env["root"] / "blobs" / ent["file"]
    path.write_bytes(b"\x07" + path.read_bytes()[1:])
    r = env["client"].get("/data/blobs/" + ent["file"])
    assert r.status_code == 500
    assert r.json()["error"].startswith(f"shard {ent['file']} is corrupt: sha256 ")
    good_still_served(env)


def test_root_dataset_named_like_default_is_shadowed(env):
    """A data-root folder named like the --data-dir dataset: the --data-dir one is served."""
    write_image_dataset(env["root"], "mnist", {"train": colour_blobs(3), "test":
                                               colour_blobs(3)}, RGB_CLASSES)
    body = env["client"].get("/api/datasets").json()
    assert [d["sample_shape"] for d in body["datasets"]] == [[3, 8, 8], [1, 28, 28]]
    assert env["client"].get("/data/mnist/manifest.json").json() == env["mnist"]


def test_no_data_root(tmp_path, env):
    app = server.create_app(tmp_path, tmp_path / "models", env["ddir"], tmp_path / "wheels",
                            data_root=tmp_path / "absent")
    body = TestClient(app).get("/api/datasets").json()
    assert [d["name"] for d in body["datasets"]] == ["mnist"] and body["default"] == "mnist"


def test_validate_counts_the_configs_dataset(env):
    """The settings check counts the training images of the config's dataset (blobs: 12)."""
    c = env["client"]
    r = c.post("/api/config/validate", json={"config": {"dataset": "blobs", "val_images": 2,
                                                        "batch_size": 4}}).json()
    assert r["ok"] and r["steps"]["train_images"] == 10, r
    r = c.post("/api/config/validate", json={"config": {"dataset": "blobs"}}).json()
    # the default holds out a tenth (1 image): a batch of 64 does not fit the other 11
    assert r["errors"] == [["batch_size", "must be an integer in [2, 11] (at most the 11 "
                                          "training images), got 64"]], r
    r = c.post("/api/config/validate", json={"config": {"val_images": 2, "batch_size": 2}})
    assert r.json()["steps"]["train_images"] == 3  # mnist here: 5 training images


SEEDNET_MISFIT = ("model input 'input' [N, 1, 28, 28] does not fit dataset blobs (3x8x8 images): "
                  "it takes [1, 28, 28] per sample (784 values), the dataset gives [3, 8, 8] "
                  "(192 values); use a model with input [N, 3, 8, 8] or [N, 192]")


def test_validate_reports_the_misfit_before_the_batch_size(env):
    """A 1x28x28 model on the 3x8x8 blobs with a batch larger than their 11 training images:
    the answer was the batch size's error, which sends the user to the wrong field; now the
    model's misfit alone (the batch size is checked once the model fits)."""
    import shutil
    from pathlib import Path
    models = env["root"].parent / "models"
    models.mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "models" / "seednet.onnx", models)
    c = env["client"]
    r = c.post("/api/config/validate", json={"config": {"dataset": "blobs", "batch_size": 64},
                                             "model": "seednet"}).json()
    assert r == {"ok": False, "errors": [["model", SEEDNET_MISFIT]]}, r
    # on MNIST (the default dataset) it fits: then the batch size is the problem
    r = c.post("/api/config/validate", json={"config": {"batch_size": 64},
                                             "model": "seednet"}).json()
    assert r["errors"] == [["batch_size", "must be an integer in [2, 5] (at most the 5 "
                                          "training images), got 64"]], r


def test_validate_names_a_missing_dataset_before_the_models_fit(env):
    """A config naming a dataset the server lacks: answered as the dataset's error, not as a
    misfit against the default dataset the counts would fall back to."""
    import shutil
    from pathlib import Path
    models = env["root"].parent / "models"
    models.mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "models" / "seednet.onnx", models)
    r = env["client"].post("/api/config/validate", json={
        "config": {"dataset": "ghost", "batch_size": 64}, "model": "seednet"}).json()
    assert not r["ok"] and len(r["errors"]) == 1, r
    field, message = r["errors"][0]
    assert field == "dataset" and "ghost" in message and "not found" in message, r

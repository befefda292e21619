"""GET /api/models/{name}/memory (host/memory_route.py): the estimate the trainer checks before
any work, at the page's batch, and the largest batch within the adapter's buffer limits; every
bad query value refused naming the parameter, nothing else disturbed."""

import pathlib
import shutil

import pytest
from starlette.testclient import TestClient

from webgpu_trainer import onnx_io
from webgpu_trainer.engine.train import memory
from webgpu_trainer.host import server

ROOT = pathlib.Path(__file__).resolve().parents[1]
SEEDNET = ROOT / "models" / "seednet.onnx"
URL = "/api/models/seednet/memory"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("memory_route")
    (tmp / "root" / "web").mkdir(parents=True)
    models = tmp / "models"
    models.mkdir()
    shutil.copy(SEEDNET, models / "seednet.onnx")
    (models / "broken.onnx").write_bytes(b"not an onnx file")
    app = server.create_app(tmp / "root", models, tmp / "mnist", tmp / "wheels",
                            uploads_dir=tmp / "uploads")
    return TestClient(app)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_bytes_are_the_plans_counted_buffers(client, optimizer):
    graph, _ = onnx_io.load_bundle(SEEDNET)
    want = memory.estimate(graph, 64, optimizer=optimizer)
    r = client.get(URL, params={"batch": 64, "optimizer": optimizer})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["bytes"] == want["bytes"] and got["parts"] == want["parts"]
    assert got["max_batch"] is None and got["problems"] == []
    assert sum(got["parts"].values()) == got["bytes"]
    # Adam keeps two moments, SGD without momentum none
    assert (got["parts"]["optimizer"] >= 2 * got["parts"]["params"]) == (optimizer == "adam")


def test_largest_batch_within_the_adapters_limits(client):
    limits = {"max_storage_buffer_binding_size": 8 << 20, "max_buffer_size": 16 << 20}
    graph, _ = onnx_io.load_bundle(SEEDNET)
    top = memory.largest_batch(graph, limits, optimizer="adam")
    assert 1 < top < 1000
    r = client.get(URL, params={"batch": top, **limits}).json()
    assert r["max_batch"] == top and r["problems"] == []
    over = client.get(URL, params={"batch": top + 1, **limits}).json()
    assert over["max_batch"] == top
    assert over["problems"] and "maxStorageBufferBindingSize" in over["problems"][0]
    # the named tensor is the model's, not a shared buffer's number
    assert not over["largest"]["name"].startswith("pool.")


@pytest.mark.parametrize("query,says", [
    ({}, "batch is required"),
    ({"batch": "0"}, "batch must be a whole number from 1 to 65,536, got '0'"),
    ({"batch": "65537"}, "batch must be a whole number from 1 to 65,536"),
    ({"batch": "-5"}, "got '-5'"),
    ({"batch": "1e3"}, "got '1e3'"),
    ({"batch": " 64"}, "got ' 64'"),
    ({"batch": "\u0666\u0664"}, "got '\\u0666\\u0664'"),  # Arabic-Indic digits
    ({"batch": "9" * 400}, "..."),
    ({"batch": "64", "optimizer": "toString"}, "optimizer must be one of"),
    ({"batch": "64", "optimizer": "__proto__"}, "optimizer must be one of"),
    ({"batch": "64", "max_buffer_size": "0"}, "max_buffer_size must be a whole number"),
    ({"batch": "64", "max_buffer_size": str(1 << 60)}, "max_buffer_size must be"),
    ({"batch": "64", "batch_size": "64"}, "unknown query parameter 'batch_size'"),
])
def test_bad_query_values_are_refused_naming_them(client, query, says):
    r = client.get(URL, params=query)
    assert r.status_code == 400, r.text
    assert says in r.json()["error"]


def test_a_repeated_parameter_is_refused(client):
    r = client.get(URL + "?batch=64&batch=128")
    assert r.status_code == 400 and "given 2 times" in r.json()["error"]


def test_unknown_and_broken_models(client):
    assert client.get("/api/models/nope/memory", params={"batch": 8}).status_code == 404
    r = client.get("/api/models/broken/memory", params={"batch": 8})
    assert r.status_code == 400 and "broken.onnx" in r.json()["error"]
    assert client.get(URL, params={"batch": 8}).status_code == 200  # still serving


def test_limits_beyond_any_adapter_give_a_batch_not_an_error(client):
    """2^53-byte limits: the largest batch stops where a kernel's u32 element count would
    overflow (refused as not fitting), not with a 422 (the reviewer's case)."""
    huge = 1 << 53
    r = client.get(URL, params={"batch": 64, "max_storage_buffer_binding_size": huge,
                                "max_buffer_size": huge})
    assert r.status_code == 200, r.text
    top = r.json()["max_batch"]
    assert 1000 < top <= 65536

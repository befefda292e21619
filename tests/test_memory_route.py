"""GET /api/models/{name}/memory (host/memory_route.py): the estimate the trainer checks before
any work, at the page's batch, and the largest batch within the adapter's buffer limits; every
bad query value refused naming the parameter, nothing else disturbed."""

import pathlib
import shutil

import pytest
from starlette.testclient import TestClient

from webgpu_trainer import onnx_io
from webgpu_trainer.engine import config
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
    ({"batch": "-5"}, "batch must be a whole number, got '-5'"),
    ({"batch": "1e3"}, "got '1e3'"),
    ({"batch": " 64"}, "got ' 64'"),
    ({"batch": "\u0666\u0664"}, "got '\\u0666\\u0664'"),  # Arabic-Indic digits
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


# the run settings' batch_size range, read from the config schema (2 - 65,536; before: batch 1
# was counted, which no run takes)
RANGE = "batch: must be an integer in [2, 65,536] (the run settings' batch_size), got "


@pytest.mark.parametrize("batch,says", [
    ("1", RANGE + "'1'"), ("0", RANGE + "'0'"), ("65537", RANGE + "'65537'"),
    ("9" * 400, RANGE + "'" + "9" * 24 + "'..."),
])
def test_a_batch_the_run_settings_refuse_is_refused_naming_the_bound(client, batch, says):
    r = client.get(URL, params={"batch": batch})
    assert (r.status_code, r.json()) == (422, {"error": says})
    bounds = config.BY_NAME["batch_size"]
    assert (bounds.min, bounds.max) == (2, 65_536)
    for ok in (bounds.min, bounds.max):  # the bounds themselves are counted
        assert client.get(URL, params={"batch": ok}).status_code == 200


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


# ~15M parameters (the Build route's limit is 16M): a 64-channel 3x3 conv on 3x64x64 images,
# 2x2 max-pool, Linear(65,536 -> 228), Linear(228 -> 10). Its conv output's gradient holds
# 64 * 64 * 64 = 262,144 values a sample: at batch 16,384 that is 2 ** 32, one more than the
# pool's backward kernel can count in u32.
BIG = [{"op": "conv", "out_channels": 64, "kernel_size": 3, "padding": 1}, {"op": "relu"},
       {"op": "maxpool"}, {"op": "flatten"}, {"op": "linear", "out_features": 228},
       {"op": "relu"}, {"op": "linear", "out_features": "classes"}]
PER_SAMPLE = 64 * 64 * 64
GIB4 = {"max_storage_buffer_binding_size": 4 << 30, "max_buffer_size": 4 << 30}


def offsets_problem(batch: int) -> str:
    values = PER_SAMPLE * batch
    return (f"batch {batch:,} is too large for 32-bit buffer offsets: tensor "
            f"'d/layers.0/output_1' needs {4 * values:,} bytes and a kernel over it counts "
            f"{values:,} values, more than the 4,294,967,295 a 32-bit offset holds; use a "
            "smaller batch")


@pytest.fixture(scope="module")
def big_model(client):
    body = client.post("/api/models/build", json={"layers": BIG, "input": [3, 64, 64],
                                                  "classes": 10, "save": True}).json()
    assert body["totals"]["params"] == 64 * 27 + 64 + PER_SAMPLE // 4 * 228 + 228 + 2290
    return f"/api/models/{body['name']}/memory"


def test_a_batch_too_large_for_32_bit_offsets_does_not_fit_naming_the_tensor(client,
                                                                            big_model):
    """Was a 422 "shader 'pool': field 'total' (u32) cannot hold '5242880000'" (and the page's
    hint vanished): now the answer of any batch that does not fit, the tensor and its bytes
    named, with the largest batch within the adapter's 4 GiB (4 * 262,144 * 4,096 bytes)."""
    r = client.get(big_model, params={"batch": 20000, **GIB4})
    assert r.status_code == 200, r.text
    assert r.json() == {"batch": 20000, "bytes": None, "parts": {},
                        "largest": {"name": "d/layers.0/output_1",
                                    "bytes": 4 * PER_SAMPLE * 20000},
                        "problems": [offsets_problem(20000)], "max_batch": 4096}
    fits = client.get(big_model, params={"batch": 4096, **GIB4}).json()
    assert fits["problems"] == [] and fits["largest"]["bytes"] == 4 << 30
    over = f"tensor '/layers.0/output_1' needs {4 * PER_SAMPLE * 4097:,} bytes at batch 4097"
    assert client.get(big_model, params={"batch": 4097, **GIB4}).json()["problems"] == [
        f"{over}, more than the adapter's maxStorageBufferBindingSize of 4,294,967,296 bytes",
        f"{over}, more than the adapter's maxBufferSize of 4,294,967,296 bytes"]


def test_the_32_bit_boundary_is_exact(client, big_model):
    """Without adapter limits: batch 16,383 is counted (262,144 * 16,383 < 2 ** 32 values),
    16,384 (2 ** 32 values) is the offsets problem."""
    below = client.get(big_model, params={"batch": 16383}).json()
    assert below["problems"] == [] and below["bytes"] > 4 * PER_SAMPLE * 16383
    at = client.get(big_model, params={"batch": 16384}).json()
    assert at["problems"] == [offsets_problem(16384)] and at["max_batch"] is None

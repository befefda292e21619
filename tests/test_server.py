"""Server routes (Starlette TestClient): page, vendor files, wheel, models, export, MNIST shards.

Corrupt shard policy (tested here): the server checks a shard's sha256 against the manifest the
first time it serves each file version and answers 500 JSON naming the shard on a mismatch
(``webgpu-trainer data`` then rebuilds the cache).
"""

import asyncio
import hashlib
import io
import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from starlette.testclient import TestClient

from webgpu_trainer.host import data
from webgpu_trainer.host import server
from webgpu_trainer.host import wheel

REPO = Path(__file__).resolve().parents[1]


def tiny_model(path: Path) -> None:
    """input [N,784] -> Gemm(10x784, transB) -> Relu -> LogSoftmax, opset 16 (MNIST-shaped)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((10, 784)).astype(np.float32), "fc.weight")
    b = numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "fc.bias")
    nodes = [helper.make_node("Gemm", ["input", "fc.weight", "fc.bias"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("LogSoftmax", ["r"], ["output"], axis=1)]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 784])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 10])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)


@pytest.fixture()
def env(tmp_path):
    root = tmp_path / "root"
    web = root / "web"
    for rel, text in {"page/index.html": "<!doctype html><title>t</title>",
                      "page/app.js": "//app", "lib/worker.js": "//worker",
                      "lib/style.css": "body{}", "package.json": "{}",
                      "node_modules/pyodide/pyodide.mjs": "export {}",
                      "node_modules/pyodide/pyodide-lock.json": "{}",
                      "node_modules/uplot/dist/uPlot.min.css": ".u{}",
                      "node_modules/idb-keyval/dist/index.js": "export {}"}.items():
        (web / rel).parent.mkdir(parents=True, exist_ok=True)
        (web / rel).write_text(text)
    (web / "node_modules/pyodide/pyodide.asm.wasm").write_bytes(b"\0asm\1\0\0\0")
    (root / "secret.txt").write_text("SECRET")
    models = tmp_path / "models"
    models.mkdir()
    tiny_model(models / "tiny.onnx")
    rng = np.random.default_rng(1)
    arrays = {s: (rng.integers(0, 256, (n, 784), dtype=np.uint8),
                  rng.integers(0, 10, n, dtype=np.uint8)) for s, n in (("train", 5), ("test", 2))}
    ddir = tmp_path / "mnist"
    manifest = data.prepare(ddir, expected=None, fetchers=[lambda log: (arrays, "synthetic")],
                            log=lambda m: None)
    app = server.create_app(root, models, ddir, tmp_path / "wheels")
    return {"client": TestClient(app), "app": app, "root": root, "models": models,
            "data": ddir, "manifest": manifest, "arrays": arrays}


def shard_url(env, split="train", kind="images"):
    return "/data/mnist/" + env["manifest"]["splits"][split][kind]["file"]


def raw_get(app, path: str, method: str = "GET") -> tuple[int, bytes]:
    """GET (or ``method``) with the path exactly as given (no client-side normalisation of
    ``..``)."""
    msgs = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(m):
        msgs.append(m)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "headers": [(b"host", b"testserver")],
             "client": ("127.0.0.1", 1), "server": ("testserver", 80)}
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in msgs if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in msgs if m["type"] == "http.response.body")


def test_page_and_vendor(env):
    c = env["client"]
    r = c.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert r.headers["cross-origin-opener-policy"] == "same-origin"
    assert r.headers["cross-origin-embedder-policy"] == "require-corp"
    assert c.get("/index.html").text == r.text == "<!doctype html><title>t</title>"
    for path, mime in [("/page/app.js", "application/javascript"),
                       ("/lib/worker.js", "application/javascript"),
                       ("/lib/style.css", "text/css"),
                       ("/vendor/pyodide/pyodide.mjs", "application/javascript"),
                       ("/vendor/pyodide/pyodide.asm.wasm", "application/wasm"),
                       ("/vendor/pyodide/pyodide-lock.json", "application/json"),
                       ("/vendor/uplot/uPlot.min.css", "text/css"),
                       ("/vendor/idb-keyval/index.js", "application/javascript")]:
        r = c.get(path)
        assert r.status_code == 200, path
        assert r.headers["content-type"].split(";")[0] == mime, path
    assert c.head("/page/app.js").headers["content-length"] == "5"


@pytest.mark.parametrize("path", ["/missing.js", "/vendor/pyodide/nope.mjs", "/package.json",
                                  "/app.js", "/page/missing.js",  # web/'s files are by app
                                  "/node_modules/uplot/dist/uPlot.min.css",  # no app's folder
                                  "/vendor/uplot/", "/api/nothing", "/wheels/x.whl",
                                  "/api/models/nope/graph.json", "/data/mnist/other.u8"])
def test_missing_is_404_json(env, path):
    r = env["client"].get(path)
    assert r.status_code == 404 and "error" in r.json()


@pytest.mark.parametrize("path", [
    "/vendor/pyodide/../../secret.txt", "/vendor/pyodide/%2e%2e/%2e%2e/secret.txt",
    "/vendor/pyodide/..%2f..%2f..%2fsecret.txt", "/vendor/pyodide/%2E%2E/%2E%2E/secret.txt",
    "/vendor/uplot/..%5c..%5c..%5csecret.txt", "/vendor/pyodide//etc/passwd",
    "/..%2fsecret.txt", "/data/mnist/..%2fmanifest.json", "/data/mnist/%2e%2e/mnist/x.u8",
    "/wheels/..%2f..%2froot%2fsecret.txt", "/api/models/..%2fmodels%2ftiny/graph.json"])
def test_traversal_rejected(env, path):
    r = env["client"].get(path)
    assert r.status_code in (400, 404) and "error" in r.json()
    assert b"SECRET" not in r.content and b"root:" not in r.content
    status, body = raw_get(env["app"], path.replace("%2f", "/").replace("%2e", "."))
    assert status in (400, 404) and b"SECRET" not in body


def test_raw_dotdot_not_normalised(env):
    status, body = raw_get(env["app"], "/vendor/pyodide/../../secret.txt")
    assert status == 400 and b"bad path" in body


def test_manifest_and_shard(env):
    c = env["client"]
    m = c.get("/data/mnist/manifest.json")
    assert m.status_code == 200 and m.json() == env["manifest"]
    url = shard_url(env)
    expected = env["arrays"]["train"][0].tobytes()
    r = c.get(url)
    assert r.status_code == 200 and r.content == expected
    assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert r.headers["accept-ranges"] == "bytes"
    assert r.headers["content-type"] == "application/octet-stream"
    etag = r.headers["etag"]
    r304 = c.get(url, headers={"If-None-Match": etag})
    assert r304.status_code == 304 and r304.content == b""
    assert c.get(url, headers={"If-None-Match": '"other"'}).status_code == 200


@pytest.mark.parametrize("rng,lo,hi", [("bytes=0-9", 0, 9), ("bytes=100-", 100, None),
                                       ("bytes=-16", -16, None), ("bytes=3900-99999", 3900, None)])
def test_range(env, rng, lo, hi):
    full = env["arrays"]["train"][0].tobytes()
    r = env["client"].get(shard_url(env), headers={"Range": rng})
    assert r.status_code == 206
    want = full[lo:] if hi is None else full[lo:hi + 1]
    assert r.content == want
    start = lo % len(full)
    assert r.headers["content-range"] == f"bytes {start}-{start + len(want) - 1}/{len(full)}"
    assert r.headers["content-length"] == str(len(want))


def test_range_unsatisfiable_and_junk(env):
    c = env["client"]
    r = c.get(shard_url(env), headers={"Range": "bytes=999999-"})
    assert r.status_code == 416 and r.headers["content-range"] == "bytes */3920"
    r = c.get(shard_url(env), headers={"Range": "pages=1-2"})  # Starlette: only bytes ranges
    assert r.status_code == 400 and b"range" in r.content.lower()


def test_corrupt_shard_is_500_naming_it(env):
    c = env["client"]
    good = shard_url(env, "test", "labels")
    assert c.get(good).status_code == 200  # verified once, then corrupted on disk
    for url in (shard_url(env), good):
        path = env["data"] / url.rsplit("/", 1)[1]
        raw = bytearray(path.read_bytes())
        raw[0] ^= 0xFF
        path.write_bytes(bytes(raw))
        r = c.get(url)
        assert r.status_code == 500
        assert path.name in r.json()["error"] and "corrupt" in r.json()["error"]
    missing = env["data"] / env["manifest"]["splits"]["test"]["images"]["file"]
    missing.unlink()
    r = c.get("/data/mnist/" + missing.name)
    assert r.status_code == 404 and missing.name in r.json()["error"]
    (env["data"] / "manifest.json").unlink()
    r = c.get("/data/mnist/manifest.json")
    assert r.status_code == 404 and "webgpu-trainer data" in r.json()["error"]


def test_models_bundle_and_export(env):
    c = env["client"]
    models = c.get("/api/models").json()
    assert models == [{"name": "tiny", "file": "tiny.onnx",
                       "bytes": (env["models"] / "tiny.onnx").stat().st_size, "params": 7850,
                       "uploaded": False}]
    graph = c.get("/api/models/tiny/graph.json").json()
    assert graph["format"] == "webgpu-trainer/graph@1"
    weights = c.get("/api/models/tiny/weights.bin").content
    assert len(weights) == graph["weights_nbytes"]
    new = bytearray(weights)
    off = next(t["offset"] for t in graph["tensors"] if t["name"] == "fc.bias")
    new[off:off + 40] = np.arange(1, 11, dtype="<f4").tobytes()
    prov = {"dataset": "mnist", "epochs": 1, "final_accuracy": 0.5}
    r = c.post("/api/models/tiny/export", content=bytes(new),
               headers={"X-Provenance": json.dumps(prov)})
    assert r.status_code == 200, r.text
    assert "tiny-trained.onnx" in r.headers["content-disposition"]
    model = onnx.load_from_string(r.content)
    onnx.checker.check_model(model, full_check=True)
    bias = next(t for t in model.graph.initializer if t.name == "fc.bias")
    assert numpy_helper.to_array(bias).tolist() == list(range(1, 11))
    props = {p.key: p.value for p in model.metadata_props}
    assert props["dataset"] == "mnist" and props["epochs"] == "1"


def test_export_errors(env):
    c = env["client"]
    n = len(c.get("/api/models/tiny/weights.bin").content)
    r = c.post("/api/models/tiny/export", content=b"\0" * (n - 4))
    assert r.status_code == 400
    assert f"expected {n} bytes" in r.json()["error"] and f"got {n - 4}" in r.json()["error"]
    r = c.post("/api/models/nope/export", content=b"\0" * n)
    assert r.status_code == 404 and "nope" in r.json()["error"]
    r = c.post("/api/models/tiny/export", content=b"\0" * n, headers={"X-Provenance": "{oops"})
    assert r.status_code == 400 and "X-Provenance" in r.json()["error"]
    assert c.get("/api/models/tiny/export").status_code in (404, 405)
    (env["models"] / "broken.onnx").write_bytes(b"not an onnx file")
    listing = {m["name"]: m for m in c.get("/api/models").json()}
    assert listing["broken"]["params"] is None and "broken" in listing["broken"]["error"]
    r = c.get("/api/models/broken/graph.json")
    assert r.status_code == 400 and "broken.onnx" in r.json()["error"]
    assert c.get("/").status_code == 200  # still alive


def test_real_seednet_export_roundtrip(tmp_path):
    """The default model: weights.bin posted back unchanged gives an .onnx onnx.load accepts."""
    if not (REPO / "models" / "seednet.onnx").is_file():
        pytest.skip("models/seednet.onnx not present")
    c = TestClient(server.create_app(REPO, REPO / "models", tmp_path, tmp_path / "w"))
    assert any(m["name"] == "seednet" for m in c.get("/api/models").json())
    w = c.get("/api/models/seednet/weights.bin").content
    r = c.post("/api/models/seednet/export", content=w, headers={"X-Provenance": "{}"})
    assert r.status_code == 200, r.text
    onnx.checker.check_model(onnx.load_from_string(r.content), full_check=True)


def test_wheel_route(tmp_path):
    c = TestClient(server.create_app(REPO, REPO / "models", tmp_path, tmp_path / "w"))
    url = c.get("/api/wheel").json()["url"]
    assert url == "/wheels/webgpu_trainer-0.1.0-py3-none-any.whl"
    r = c.get(url)
    assert r.status_code == 200 and r.headers["content-type"] == "application/zip"
    names = zipfile.ZipFile(io.BytesIO(r.content)).namelist()
    assert "webgpu_trainer/__init__.py" in names and "webgpu_trainer/host/server.py" in names
    for wgsl in (REPO / "shaders").glob("*.wgsl"):
        assert f"webgpu_trainer/shaders/{wgsl.name}" in names


def test_wheel_rebuilt_only_on_change(tmp_path):
    src = tmp_path / "src"
    (src / "py" / "webgpu_trainer").mkdir(parents=True)
    (src / "shaders").mkdir()
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / f, src / f)
    shutil.copy(REPO / "py/webgpu_trainer/__init__.py", src / "py/webgpu_trainer/__init__.py")
    (src / "shaders" / "a.wgsl").write_text("// v1\n")
    out = tmp_path / "out"
    logs = []
    p1 = wheel.ensure_wheel(out, src, log=logs.append)
    assert len(logs) == 2 and p1.name == wheel.wheel_name()
    digest = hashlib.sha256(p1.read_bytes()).hexdigest()
    assert wheel.ensure_wheel(out, src, log=logs.append) == p1 and len(logs) == 2
    (src / "shaders" / "a.wgsl").write_text("// v2\n")
    wheel.ensure_wheel(out, src, log=logs.append)
    assert len(logs) == 4 and hashlib.sha256(p1.read_bytes()).hexdigest() != digest
    assert zipfile.ZipFile(p1).read("webgpu_trainer/shaders/a.wgsl") == b"// v2\n"
    (src / "py" / "webgpu_trainer" / "__pycache__").mkdir()
    (src / "py" / "webgpu_trainer" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    wheel.ensure_wheel(out, src, log=logs.append)
    assert len(logs) == 4  # bytecode caches do not trigger a rebuild

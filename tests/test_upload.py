"""Model upload and summary routes (issue 4 item 5, server side): POST /api/models/upload keeps a
model only when it imports and the engine can train it; every refusal is a JSON error listing
the problems; GET /api/models/{name}/summary gives layers, shapes, parameters and multiply-adds.
"""

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from starlette.testclient import TestClient

from webgpu_trainer.host import server

REPO = Path(__file__).resolve().parents[1]
SEEDNET = REPO / "models" / "seednet.onnx"


@pytest.fixture()
def client(tmp_path):
    root = tmp_path / "root"
    (root / "web").mkdir(parents=True)
    models = tmp_path / "models"
    models.mkdir()
    app = server.create_app(root, models, tmp_path / "mnist", tmp_path / "wheels",
                            uploads_dir=tmp_path / "uploads", max_upload_bytes=4 << 20)
    return TestClient(app), tmp_path / "uploads", models


def _model_with(op_type, name="strange"):
    w = numpy_helper.from_array(np.ones((10, 784), np.float32), "fc.weight")
    nodes = [helper.make_node("Flatten", ["input"], ["f"], axis=1),
             helper.make_node("Gemm", ["f", "fc.weight"], ["h"], transB=1),
             helper.make_node(op_type, ["h"], ["output"], name="/head/" + op_type)]
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 28, 28])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 10])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_upload_seednet_then_listed_and_summarised(client):
    c, uploads, _ = client
    r = c.post("/api/models/upload?filename=My%20Net%20(v2).onnx", content=SEEDNET.read_bytes())
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["name"] == body["summary"]["name"] == "My-Net--v2"
    assert (uploads / "My-Net--v2.onnx").read_bytes() == SEEDNET.read_bytes()
    totals = body["summary"]["totals"]
    # SeedNet: 376,870 parameters (torch: sum(p.numel() for p in model.parameters()))
    assert totals["params"] == 376870 and totals["trainable"] == 376870
    assert totals["buffers"] == 68
    layers = {layer["name"]: layer for layer in body["summary"]["layers"]}
    assert layers["/conv1/Conv"]["output_shape"] == [1, 8, 26, 26]
    assert layers["/conv1/Conv"]["macs"] == 8 * 26 * 26 * 9
    assert layers["/fc1/Gemm"]["macs"] == 32 * 11616
    assert body["summary"]["head"] == ["fc2.weight", "fc2.bias", "norm2.weight", "norm2.bias"]
    listed = {m["name"]: m for m in c.get("/api/models").json()}
    assert listed["My-Net--v2"]["uploaded"] is True and "error" not in listed["My-Net--v2"]
    summary = c.get("/api/models/My-Net--v2/summary").json()
    assert summary["totals"] == totals and summary["name"] == "My-Net--v2"
    assert len(c.get("/api/models/My-Net--v2/weights.bin").content) > 376870 * 4


@pytest.mark.parametrize("payload,status,needle", [
    (b"", 400, "empty"),
    (b"this is not an onnx file at all", 400, "cannot be imported"),
    (SEEDNET.read_bytes()[:5000], 400, "cannot be imported"),
])
def test_bad_uploads_are_refused_and_not_kept(client, payload, status, needle):
    c, uploads, _ = client
    r = c.post("/api/models/upload?filename=bad.onnx", content=payload)
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]
    assert ".upload-" not in r.text, "the temporary file name leaks into the error"
    assert not list(uploads.glob("*.onnx")) and not list(uploads.glob(".upload-*"))


def test_unsupported_op_is_listed_by_node(client):
    c, uploads, _ = client
    r = c.post("/api/models/upload?filename=strange.onnx", content=_model_with("Hardmax"))
    assert r.status_code == 400, r.text
    err = r.json()
    assert "/head/Hardmax" in err["error"] and "Hardmax" in err["error"]
    assert err.get("problems"), err
    assert not list(uploads.glob("*.onnx"))


def test_too_large_upload(client):
    c, uploads, _ = client
    r = c.post("/api/models/upload?filename=big.onnx", content=b"\0" * (5 << 20))
    assert r.status_code == 413
    assert "upload limit" in r.json()["error"]
    assert not list(uploads.iterdir()) if uploads.exists() else True


def test_upload_does_not_shadow_a_builtin_model(client):
    c, uploads, models = client
    (models / "seednet.onnx").write_bytes(SEEDNET.read_bytes())
    r = c.post("/api/models/upload?filename=seednet.onnx", content=SEEDNET.read_bytes())
    assert r.status_code == 200 and r.json()["name"] == "seednet-upload"
    names = [m["name"] for m in c.get("/api/models").json()]
    assert names.count("seednet") == 1 and "seednet-upload" in names


# ---- DELETE /api/models/{name}: uploads only (issue 10) -------------------------------------

def _upload(c, filename="mine.onnx"):
    r = c.post(f"/api/models/upload?filename={filename}", content=SEEDNET.read_bytes())
    assert r.status_code == 200, r.text
    return r.json()["name"]


def test_delete_an_uploaded_model(client):
    c, uploads, _ = client
    name = _upload(c)
    assert c.get(f"/api/models/{name}/summary").status_code == 200  # its bundle is cached
    r = c.delete(f"/api/models/{name}")
    assert r.status_code == 200 and r.json() == {"deleted": name}
    assert name not in [m["name"] for m in c.get("/api/models").json()]
    assert not (uploads / f"{name}.onnx").exists() and not list(uploads.glob("*.onnx"))
    assert c.get(f"/api/models/{name}/summary").status_code == 404
    r = c.delete(f"/api/models/{name}")
    assert r.status_code == 404 and "no uploaded model named 'mine'" in r.json()["error"]


def test_a_builtin_model_cannot_be_deleted(client):
    c, uploads, models = client
    (models / "seednet.onnx").write_bytes(SEEDNET.read_bytes())
    assert _upload(c, "seednet.onnx") == "seednet-upload"
    r = c.delete("/api/models/seednet")
    assert r.status_code == 403
    assert r.json()["error"] == ("seednet is a built-in model (models/seednet.onnx) and cannot "
                                 "be deleted; only models uploaded from the page can")
    assert (models / "seednet.onnx").read_bytes() == SEEDNET.read_bytes()
    assert (uploads / "seednet-upload.onnx").is_file()
    assert {m["name"] for m in c.get("/api/models").json()} == {"seednet", "seednet-upload"}


def test_deleting_an_unknown_model_is_404(client):
    c, uploads, _ = client
    r = c.delete("/api/models/never-uploaded")
    assert r.status_code == 404 and "never-uploaded" in r.json()["error"]


@pytest.mark.parametrize("name", [
    "../victim", "..", ".", "uploads/../victim", "mine/..", "mine/../../victim", ".mine",
    "./mine", "mine\0", "mine\\..\\victim", "../models/seednet", "/etc/passwd", "mine.onnx",
    "MINE"])
def test_delete_refuses_path_tricks(client, name):
    """As a raw ASGI path (no normalisation of ``..``) and through the HTTP client (the name
    percent-encoded): 400 or 404, and no file anywhere is deleted."""
    from urllib.parse import quote

    from test_server import raw_get
    c, uploads, models = client
    (models / "seednet.onnx").write_bytes(SEEDNET.read_bytes())
    _upload(c)
    victim = uploads.parent / "victim.onnx"
    victim.write_bytes(b"keep me")
    files = sorted(p for p in uploads.parent.rglob("*") if p.is_file())
    status, body = raw_get(c.app, f"/api/models/{name}", method="DELETE")
    assert status in (400, 404), (name, status, body)
    if name not in (".", ".."):  # a client drops a bare dot segment itself
        r = c.delete(f"/api/models/{quote(name, safe='')}")
        assert r.status_code in (400, 404) and "error" in r.json(), (name, r.text)
    assert sorted(p for p in uploads.parent.rglob("*") if p.is_file()) == files
    assert victim.read_bytes() == b"keep me"

"""Issue 9, the upload route with hostile bodies (tests/fixtures/hostile/onnx and bytes made
here): each answer names the file and the problem exactly, says "cannot be imported" once, and
never holds an absolute server path (nor the temporary upload's name)."""
from __future__ import annotations

import json
import pathlib
import shutil
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from starlette.testclient import TestClient

from webgpu_trainer.host import server

ROOT = pathlib.Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "fixtures" / "hostile" / "onnx"


@pytest.fixture()
def env(tmp_path):
    root = tmp_path / "root"
    (root / "web").mkdir(parents=True)
    models = tmp_path / "models"
    models.mkdir()
    app = server.create_app(root, models, tmp_path / "mnist", tmp_path / "wheels",
                            uploads_dir=tmp_path / "uploads", max_upload_bytes=4 << 20)
    return TestClient(app), tmp_path


def _no_server_paths(text: str, tmp_path: pathlib.Path) -> None:
    assert str(tmp_path) not in text and str(ROOT) not in text, text
    assert ".upload-" not in text, text
    assert "cannot be imported: cannot be imported" not in text, text


def _post(c, name, body):
    return c.post(f"/api/models/upload?filename={name}", content=body)


def test_upload_softmax_head_summary_says_nll_log(env):
    c, tmp = env
    r = _post(c, "softmax_head.onnx", (HOSTILE / "softmax_head.onnx").read_bytes())
    assert r.status_code == 200, r.text
    loss = r.json()["summary"]["loss"]
    assert loss["loss"] == "nll_log" and loss["auto"] and loss["final_op"] == "Softmax"


def test_upload_dequantized_counts_its_weights(env):
    c, tmp = env
    r = _post(c, "dequantize.onnx", (HOSTILE / "dequantize.onnx").read_bytes())
    assert r.status_code == 200, r.text
    s = r.json()["summary"]
    assert s["totals"]["params"] == 12730
    assert [f["name"] for f in s["not_trained"]] == ["fc1.weight_quantized", "fc1.weight_scale",
                                                     "fc1.weight_zero_point"]
    assert any("dequantized into the float32 parameter 'fc1.weight'" in n for n in s["notes"])


def test_upload_opset_99_refused_once_by_name(env):
    c, tmp = env
    r = _post(c, "opset99.onnx", (HOSTILE / "opset99.onnx").read_bytes())
    assert r.status_code == 400
    problem = ("opset 99 is newer than the importer knows (it reads opsets 7-21, and the "
               "trained model is exported at the model's own opset): re-export with "
               "opset_version between 13 and 18")
    assert r.json() == {"error": f"opset99.onnx cannot be imported: {problem}",
                        "problems": [problem]}
    _no_server_paths(r.text, tmp)
    assert not list((tmp / "uploads").glob("*"))


def _several_problems() -> bytes:
    """Opset 99, an input that is not MNIST and a missing external-data file."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])
    w = numpy_helper.from_array(np.zeros((3072, 10), np.float32), "w")
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    for k, v in (("location", "weights.bin"), ("offset", "0"), ("length", str(3072 * 40))):
        e = w.external_data.add()
        e.key, e.value = k, v
    nodes = [helper.make_node("Flatten", ["x"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "w"], ["y"], name="fc")]
    m = helper.make_model(helper.make_graph(nodes, "bad", [x], [y], [w]),
                          opset_imports=[helper.make_opsetid("", 99)])
    m.ir_version = 8
    return m.SerializeToString()


def test_upload_several_problems_one_message_no_paths(env):
    c, tmp = env
    r = _post(c, "my model.onnx", _several_problems())
    assert r.status_code == 400
    body = r.json()
    _no_server_paths(r.text, tmp)
    assert body["error"].startswith(f"my-model.onnx cannot be imported ({len(body['problems'])} "
                                    "problems): ")
    assert body["problems"][0].startswith(
        "external data file 'weights.bin' is missing: the weights of 1 tensor(s) "
        "(initializer 'w') are stored in it, not in the .onnx file. Keep it next to the .onnx "
        "file, or make the model one file (what an upload needs): ")
    assert any(p.startswith("opset 99 is newer than the importer knows") for p in
               body["problems"])


@pytest.mark.parametrize("body,problem", [
    (b"", None),
    (b"\x08\x07" + bytes(30), "not a valid ONNX file (truncated or not ONNX)"),
    (b"\x1f\x8b\x08\x00garbage", "not a valid ONNX file (truncated or not ONNX)"),
])
def test_upload_junk_bodies(env, body, problem):
    c, tmp = env
    r = _post(c, "junk.onnx", body)
    assert r.status_code == 400
    _no_server_paths(r.text, tmp)
    if problem is None:
        assert r.json() == {"error": "junk.onnx: the upload is empty"}
    else:
        assert r.json()["error"].startswith(f"junk.onnx cannot be imported: {problem}")


def test_model_list_and_summary_errors_have_no_paths(env):
    c, tmp = env
    (tmp / "models" / "opset99.onnx").write_bytes((HOSTILE / "opset99.onnx").read_bytes())
    listed = {m["name"]: m for m in c.get("/api/models").json()}
    assert listed["opset99"]["error"].startswith("opset99.onnx cannot be imported: opset 99 is "
                                                 "newer than the importer knows")
    r = c.get("/api/models/opset99/summary")
    assert r.status_code == 400
    _no_server_paths(r.text + json.dumps(listed), tmp)


def test_missing_shard_error_has_no_path(env):
    c, tmp = env
    (tmp / "mnist").mkdir()

    def entry(split, kind, n):  # a complete (legacy-format) manifest whose shards are missing
        return {"file": f"{split}-{kind}-abc.u8", "shape": [n, 28, 28] if kind == "images"
                else [n], "dtype": "uint8", "bytes": n * (784 if kind == "images" else 1),
                "sha256": "0" * 64}
    (tmp / "mnist" / "manifest.json").write_text(json.dumps(
        {"format": "webgpu-trainer/mnist@1",
         "splits": {s: {"count": n, "images": entry(s, "images", n),
                        "labels": entry(s, "labels", n)} for s, n in (("train", 3), ("test", 2))}}))
    r = c.get("/data/mnist/train-images-abc.u8")
    assert r.status_code == 404
    assert r.json()["error"] == ("shard train-images-abc.u8 is missing from the mnist dataset; "
                                 "run `webgpu-trainer data` to prepare it again")
    assert str(tmp) not in r.text


def test_scrub_keeps_urls_and_cuts_paths(tmp_path):
    folders = [(tmp_path / "uploads", ""), (tmp_path, "")]
    text = (f"not found: /api/models/x; {tmp_path}/uploads/a.onnx (looked for "
            f"{tmp_path}/uploads/b.bin) and /tmp/elsewhere/c.onnx")
    assert server._scrub(text, folders) == ("not found: /api/models/x; a.onnx (looked for "
                                            "b.bin) and c.onnx")


def test_export_of_uploaded_softmax_head_loads_in_onnxruntime(env):
    import onnxruntime as ort
    c, tmp = env
    assert _post(c, "sm.onnx", (HOSTILE / "softmax_head.onnx").read_bytes()).status_code == 200
    blob = c.get("/api/models/sm/weights.bin").content
    r = c.post("/api/models/sm/export", content=blob,
               headers={"X-Provenance": json.dumps({"dataset": "MNIST"})})
    assert r.status_code == 200
    out = ort.InferenceSession(r.content).run(None, {"input": np.zeros((1, 1, 28, 28),
                                                                       np.float32)})[0]
    assert abs(float(out.sum()) - 1.0) < 1e-5
    assert onnx.load_from_string(r.content).graph.node[-1].op_type == "Softmax"


# ------------------------------------------------ issue 16: POST /api/config/validate, export
def _validate(c, raw: bytes):
    t0 = time.perf_counter()
    r = c.post("/api/config/validate", content=raw,
               headers={"Content-Type": "application/json"})
    return r, time.perf_counter() - t0


def _still_answers(c):
    r = c.post("/api/config/validate", json={"config": {"lr": 0.01}})
    assert r.status_code == 200 and r.json()["ok"] is True, r.text


def test_validate_10mb_of_unknown_keys_refused_by_size(env):
    c, _ = env
    big = "{" + ",".join(f'"k{i}":1' for i in range(700_000)) + "}"
    r, secs = _validate(c, ('{"config":' + big + "}").encode())
    assert r.status_code == 413 and secs < 2
    assert r.json() == {"error": f"the body is {len(big) + 11:,} bytes; the limit is 65,536"}
    _still_answers(c)


def test_validate_unknown_keys_under_the_cap_named_three_times(env):
    c, _ = env
    keys = {f"k{i}": 1 for i in range(5000)}
    r, secs = _validate(c, json.dumps({"config": keys}).encode())
    assert r.status_code == 200 and len(r.content) < 1000 and secs < 2, len(r.content)
    errors = r.json()["errors"]
    assert [e[0] for e in errors] == ["k0", "k1", "k2", "config"]
    assert errors[3] == ["config", "4,997 more unknown options (not listed)"]
    _still_answers(c)


def test_validate_long_string_not_echoed(env):
    c, _ = env
    r, _ = _validate(c, json.dumps({"config": {"optimizer": "x" * 60_000}}).encode())
    assert r.status_code == 200 and len(r.content) < 400, len(r.content)
    assert r.json()["errors"] == [["optimizer", "must be one of sgd, adam, adamw, adagrad, "
                                   "rmsprop, adadelta, got '" + "x" * 40 + "'... (60,000 "
                                   "characters)"]]
    r, _ = _validate(c, json.dumps({"config": {"optimizer": "x" * 10_000_000}}).encode())
    assert r.status_code == 413 and len(r.content) < 200
    _still_answers(c)


@pytest.mark.parametrize("raw, status, answer", [
    (b'{"config":{"lr":' + b"9" * 401 + b"}}", 200, {"ok": False, "errors": [[
        "lr", "must be a number > 0 and at most 3.403e+38 (the largest float32, which the GPU "
              "computes in), got an integer of 401 digits"]]}),
    (b'{"config":{"lr":1e308}}', 200, {"ok": False, "errors": [[
        "lr", "must be a number > 0 and at most 3.403e+38 (the largest float32, which the GPU "
              "computes in), got 1e+308"]]}),
    (b'{"config":{"weight_decay":1e308}}', 200, {"ok": False, "errors": [[
        "weight_decay", "must be a number >= 0 and at most 3.403e+38 (the largest float32, "
                        "which the GPU computes in), got 1e+308"]]}),
    (b'{"config":' + b"[" * 100_000 + b"]" * 100_000 + b"}", 413, {
        "error": "the body is 200,011 bytes; the limit is 65,536"}),
    (b'{"config":' + b"[" * 30_000 + b"]" * 30_000 + b"}", 400, {
        "error": "the body nests arrays or objects more than 32 levels deep"}),
    (b'{"config":' + b"[" * 33 + b"]" * 33 + b"}", 400, {
        "error": "the body nests arrays or objects more than 32 levels deep"}),
    (b'{"config":{"lr":' + b"9" * 5000 + b"}}", 400, {
        "error": "the body holds a number of more than 4,300 digits"}),
    (b'{"config": {"lr": 0.1', 400, {
        "error": "the body is not valid JSON: Expecting ',' delimiter: line 1 column 22 "
                 "(char 21)"}),
])
def test_validate_hostile_bodies(env, raw, status, answer):
    """A bad config is an answer (200, ok false, naming the field: the page's form marks it);
    a body that is no config at all is a 4xx naming the problem; never a 500."""
    c, _ = env
    r, secs = _validate(c, raw)
    assert (r.status_code, r.json()) == (status, answer) and secs < 2
    assert len(r.content) < 1000
    _still_answers(c)


def test_export_deep_provenance_and_streamed_body(env):
    c, tmp = env
    shutil.copy(ROOT / "tests" / "fixtures" / "models" / "mlp-ts17.onnx",
                tmp / "models" / "mlp-ts17.onnx")
    from webgpu_trainer import onnx_io
    _, blob = onnx_io.load_bundle(tmp / "models" / "mlp-ts17.onnx")
    r = c.post("/api/models/mlp-ts17/export", content=blob,
               headers={"X-Provenance": "[" * 5000 + "]" * 5000})
    assert r.status_code == 400 and r.json() == {
        "error": "X-Provenance nests arrays or objects more than 32 levels deep"}
    # no Content-Length (streamed): the body is still capped at the weights' size
    r = c.post("/api/models/mlp-ts17/export", content=iter([blob, blob]))
    assert r.status_code == 413 and r.json() == {
        "error": f"weights for model 'mlp-ts17' is larger than the limit of {len(blob):,} bytes"}
    r = c.post("/api/models/mlp-ts17/export", content=blob,
               headers={"X-Provenance": '{"lr": ' + "9" * 401 + "}"})
    assert r.status_code == 200 and onnx.load_from_string(r.content).metadata_props

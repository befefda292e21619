"""Issue 16, the classroom's routes with hostile inputs (SQLite; tests/test_classroom.py has the
class flow on both databases): display names that spoof or hide, session configs that could
never run, giant numbers, deep JSON, long strings and unknown keys on every POST / PATCH route,
all-NaN model uploads; and the per-student seed and the verdict on the teacher's roster. Each
refusal: the exact status and text, a short answer, nothing stored, the server still serving.
"""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import onnx
import pytest
from classroom_helpers import join, make_app, new_session, run_config, teacher, train
from starlette.testclient import TestClient

from webgpu_trainer.host.classroom.config import PINNABLE

JS = {"Content-Type": "application/json"}
INVISIBLE = ("The name has an invisible formatting character ({}) that can make it show "
             "differently from what was typed: type it again with visible characters only.")


@pytest.fixture()
def cls(tmp_path):
    app = make_app(tmp_path)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c, app, new_session(c, app), tmp_path


def _roster(c, app, sid):
    return c.get(f"/api/classroom/sessions/{sid}/roster", headers=teacher(app)).json()


@pytest.mark.parametrize("name, error", [
    ("Eve\u202egnp.exe", INVISIBLE.format("U+202E RIGHT-TO-LEFT OVERRIDE")),
    ("\u200b", INVISIBLE.format("U+200B ZERO WIDTH SPACE")),
    ("Ada\u2066", INVISIBLE.format("U+2066 LEFT-TO-RIGHT ISOLATE")),
    ("\u3164\u3164", "The name has no visible character: use at least one letter, digit or "
                     "symbol."),
    ("   ", "Type a name."),
    ("<b>Eve</b>", "The name may not contain < or >."),
    ("Eve\x07", "The name has a control character (U+0007): type it again with letters, "
                "digits and punctuation."),
    ("x" * 41, "The name is 41 characters long; at most 40 please."),
    ("x" * 60_000, "The name is 60,000 characters long; at most 40 please."),
])
def test_join_refuses_spoofed_and_invisible_names(cls, name, error):
    c, app, sid, _ = cls
    r = c.post(f"/api/classroom/join/{sid}", json={"name": name})
    assert r.status_code == 422 and r.json()["error"] == error, r.text
    assert len(r.content) < 600
    assert _roster(c, app, sid) == []  # nothing stored
    assert c.post(f"/api/classroom/join/{sid}", json={"name": "Ada"}).status_code == 200


@pytest.mark.parametrize("typed, shown", [
    ("Zoe\u0301", "Zo\u00e9"),                 # NFC: one code point, as the dashboard sorts it
    ("  Ada\u00a0\u2003 L. ", "Ada L."),         # any Unicode space, collapsed and trimmed
    ("\U0001f469\u200d\U0001f4bb Kim", "\U0001f469\u200d\U0001f4bb Kim"),  # ZWJ in an emoji
])
def test_join_normalises_names(cls, typed, shown):
    c, app, sid, _ = cls
    r = c.post(f"/api/classroom/join/{sid}", json={"name": typed})
    assert r.status_code == 200 and r.json()["name"] == shown
    assert [row["name"] for row in _roster(c, app, sid)] == [shown]


def _post_session(c, app, raw: bytes, method="POST", sid=None):
    path = "/api/classroom/sessions" + (f"/{sid}" if sid else "")
    return c.request(method, path, headers={**teacher(app), **JS}, content=raw)


LR_401 = ("lr: must be a number > 0 and at most 3.403e+38 (the largest float32, which the "
          "GPU computes in), got an integer of 401 digits")


@pytest.mark.parametrize("config, status, problems", [
    (b'{"model":"mlp-ts17","lr":' + b"9" * 401 + b"}", 422, [LR_401]),
    (b'{"model":"mlp-ts17","lr":1e308}', 422, [
        "lr: must be a number > 0 and at most 3.403e+38 (the largest float32, which the GPU "
        "computes in), got 1e+308"]),
    (b'{"model":"mlp-ts17","batch_size":60000}', 422, [
        "batch_size: must be an integer in [2, 55,000] (at most the 55,000 training images), "
        "got 60,000"]),
    (b'{"model":"mlp-ts17","loss":"cross_entropy","class_weights":[1,1,1]}', 422, [
        "class_weights: must be 10 numbers, each >= 0 (one per class of the model), got 3"]),
    (b'{"model":"mlp-ts17","val_images":59999}', 422, [
        "val_images: must be an integer in [0, 59,998] (the 60,000 training images less a "
        "batch of 2 to train on; 0 = no validation), got 59,999"]),
    (json.dumps({"model": "m" * 50_000}).encode(), 422, [
        "model: unknown model '" + "m" * 40 + "'... (50,000 characters) (this server has: "
        "mlp-ts17)"]),
    (json.dumps({"model": "mlp-ts17", **{f"k{i}": 1 for i in range(3000)}}).encode(), 422, [
        # the known options: the schema's names (the list itself: test_config.py)
        f"k0: unknown option (known: {', '.join(PINNABLE)})", "k1: unknown option",
        "k2: unknown option", "config: 2,997 more unknown options (not listed)"]),
])
def test_session_config_refused_naming_the_field(cls, config, status, problems):
    c, app, sid, _ = cls
    before = c.get("/api/classroom/sessions", headers=teacher(app)).json()
    r = _post_session(c, app, b'{"name":"x","config":' + config + b"}")
    assert r.status_code == status and r.json()["problems"] == problems, r.text[:500]
    assert len(r.content) < 3000
    r2 = _post_session(c, app, b'{"config":' + config + b"}", "PATCH", sid)
    assert r2.status_code == status and r2.json()["problems"] == problems
    assert c.get("/api/classroom/sessions", headers=teacher(app)).json() == before


@pytest.mark.parametrize("route", ["join", "report", "sessions", "patch"])
@pytest.mark.parametrize("raw, status, error", [
    (b"[" * 30_000 + b"]" * 30_000, 400,
     "the JSON body nests arrays or objects more than 32 levels deep"),
    (b'{"name":' + b"9" * 5000 + b"}", 400,
     "the JSON body holds a number of more than 4,300 digits"),
    (b'{"name":"' + b"x" * 70_000 + b'"}', 413, "the JSON body is 70,011 bytes; the limit is "
                                                "65,536"),
])
def test_every_json_route_caps_size_and_depth(cls, route, raw, status, error):
    c, app, sid, _ = cls
    ada = join(c, sid, "Ada")
    method, path, headers = {
        "join": ("POST", f"/api/classroom/join/{sid}", {}),
        "report": ("POST", "/api/classroom/report", ada),
        "sessions": ("POST", "/api/classroom/sessions", teacher(app)),
        "patch": ("PATCH", f"/api/classroom/sessions/{sid}", teacher(app)),
    }[route]
    r = c.request(method, path, headers={**headers, **JS}, content=raw)
    assert (r.status_code, r.json()) == (status, {"error": error})
    assert [row["name"] for row in _roster(c, app, sid)] == ["Ada"]
    assert len(c.get("/api/classroom/sessions", headers=teacher(app)).json()) == 1


def test_report_config_giant_number_and_unknown_body_keys(cls):
    c, app, sid, _ = cls
    ada = join(c, sid, "Ada")
    r = c.post("/api/classroom/report", headers={**ada, **JS},
               content=b'{"run":1,"config":{"model":"mlp-ts17","lr":' + b"9" * 401 + b"}}")
    assert r.status_code == 422 and r.json()["problems"] == [LR_401]
    r = c.post("/api/classroom/report", headers=ada,
               json={"run": 1, **{f"x{i}": 1 for i in range(2000)}})
    assert r.status_code == 422 and len(r.content) < 600, len(r.content)
    assert r.json() == {"error": "invalid Report: x0: Extra inputs are not permitted (and "
                                 "1,999 more)", "problems": [
        *[f"x{i}: Extra inputs are not permitted" for i in range(5)],
        "and 1,995 more problems"]}
    assert _roster(c, app, sid)[0]["run"] is None  # no run stored


def _bundle(tmp_path):
    from webgpu_trainer import onnx_io
    return onnx_io.load_bundle(tmp_path / "models" / "mlp-ts17.onnx")


def test_all_nan_model_refused_naming_the_tensor(cls):
    c, app, sid, tmp = cls
    ada = join(c, sid, "Ada")
    train(c, ada, acc=0.4)
    graph, blob = _bundle(tmp)
    nan = np.full(len(blob) // 4, np.nan, np.float32).tobytes()
    r = c.post("/api/classroom/model?run=1", headers=ada, content=nan)
    first = graph["tensors"][0]["name"]
    assert r.status_code == 400 and r.json() == {"error": (
        f"weights for model 'mlp-ts17': {first}[0] (flat index) is not a finite number (NaN "
        "or infinite): the run diverged; such a model is not kept")}
    # one infinity deep inside the last tensor is found too
    last = graph["tensors"][-1]
    weights = np.frombuffer(blob, np.float32).copy()
    weights[last["offset"] // 4 + 3] = np.inf
    r = c.post("/api/classroom/model?run=1", headers=ada, content=weights.tobytes())
    assert r.status_code == 400 and f"{last['name']}[3] (flat index)" in r.json()["error"]
    assert list((tmp / "state" / "models").glob("*.onnx")) == []
    assert _roster(c, app, sid)[0]["model_sha256"] is None


def test_provenance_and_csv_say_the_accuracy_was_reported(cls):
    c, app, sid, tmp = cls
    ada = join(c, sid, "Ada")
    train(c, ada, acc=0.81)
    _, blob = _bundle(tmp)
    r = c.post("/api/classroom/model?run=1", headers=ada, content=blob)
    assert r.status_code == 200, r.text
    model = onnx.load(tmp / "state" / "models" / f"{r.json()['sha256']}.onnx")
    props = {p.key: p.value for p in model.metadata_props}
    assert props["test_accuracy_reported_by_student"] == "0.81"
    assert "test_accuracy" not in props
    text = c.get(f"/api/classroom/sessions/{sid}/results.csv", headers=teacher(app)).text
    (row,) = csv.DictReader(io.StringIO(text))
    assert row["test_acc_reported"] == "0.81" and "test_acc" not in row


def test_each_student_gets_their_own_seed_unless_pinned(cls):
    c, app, sid, _ = cls  # new_session pins the seed
    seeds = [c.post(f"/api/classroom/join/{sid}", json={"name": n}).json()["session"]
             ["config"]["seed"] for n in ("Ada", "Bob")]
    assert seeds == [0, 0]
    r = c.post("/api/classroom/sessions", headers=teacher(app), json={
        "name": "6C", "config": run_config(seed=7)})  # the dialog's default: seed not pinned
    assert r.status_code == 201 and "seed" not in r.json()["pinned"]
    assert "lr" in r.json()["pinned"]
    sid2 = r.json()["id"]
    from webgpu_trainer.host.classroom.student import student_seed
    got = {}
    for name in ("Ada", "Bob"):
        j = c.post(f"/api/classroom/join/{sid2}", json={"name": name}).json()
        got[j["student"]] = j["session"]["config"]["seed"]
        assert got[j["student"]] == student_seed(7, j["student"])
        again = c.get(f"/api/classroom/join/{sid2}", headers={"X-Student-Key": j["key"]})
        assert again.json()["config"]["seed"] == got[j["student"]]  # a reload keeps it
    assert len(set(got.values())) == 2
    assert c.get(f"/api/classroom/join/{sid2}").json()["config"]["seed"] == 7


@pytest.mark.parametrize("result, verdict", [
    ({"test_acc": 0.092, "verdict": "ok"}, "chance"),      # chance: whatever was reported
    ({"test_acc": 0.092}, "chance"),
    ({"test_acc": 0.95, "verdict": "ok"}, "ok"),
    ({"test_acc": 0.5, "stopped": True}, "stopped"),
    ({"test_acc": 0.3, "verdict": "diverged", "reason": "training diverged: ..."}, "diverged"),
])
def test_roster_shows_the_verdict(cls, result, verdict):
    c, app, sid, _ = cls
    ada = join(c, sid, "Ada")
    r = c.post("/api/classroom/report", headers=ada, json={
        "run": 1, "config": run_config(), "points": [[1, 2.3, 0.1]],
        "result": {"test_loss": 2.3, "eval_images": 100, "steps": 5, **result}})
    assert r.status_code == 200, r.text
    (row,) = _roster(c, app, sid)
    assert row["verdict"] == verdict
    if verdict == "chance":
        assert row["reason"] == ("test accuracy 9.2% is no better than guessing (10% for 10 "
                                 "classes)")
    text = c.get(f"/api/classroom/sessions/{sid}/results.csv", headers=teacher(app)).text
    assert next(csv.DictReader(io.StringIO(text)))["verdict"] == verdict


def test_database_of_an_earlier_version_gets_the_verdict_columns(tmp_path):
    """A classroom.db made before runs had verdict / reason: opening it adds them (nothing
    else changes) and the roster works."""
    from webgpu_trainer.host.classroom.store import Store, sqlite_url
    url = sqlite_url(tmp_path / "classroom.db")
    store = Store(url, tmp_path)
    sid = store.create_session("old", {"model": "mlp-ts17"}, ["model"])
    with store.engine.connect() as c, c.begin():
        for col in ("verdict", "reason"):
            c.exec_driver_sql(f"ALTER TABLE runs DROP COLUMN {col}")
    store.close()
    store = Store(url, tmp_path)
    from sqlalchemy import inspect
    cols = {c["name"] for c in inspect(store.engine).get_columns("runs")}
    assert {"verdict", "reason"} <= cols
    assert store.session(sid)["name"] == "old" and store.roster(sid) == []
    store.close()

"""A class session that pins a dataset (issue 18, "In the page": the classroom), without a
browser: the teacher's session and the students' reported configs are checked against the
training images of the session's dataset, not the server's default (MNIST's 60,000). A small
prepared dataset (40 training images, tests/dataset_fixtures.py) in the server's data root:
a batch of 64 does not fit it, and the 422 names the field, the limit and the value, while
the same config on MNIST is accepted; a refused report stores nothing.

The browser side (the teacher's dialog pins it, a student downloads it once and trains) is
tests/test_classroom_dataset_e2e.py."""

from __future__ import annotations

import numpy as np
import pytest
from classroom_helpers import REPO, join, models_dir, teacher
from dataset_fixtures import write_image_dataset
from starlette.testclient import TestClient

from webgpu_trainer.host.data import default_cache_dir

TRAIN, TEST = 40, 12
# 40 training images less the default hold-out (train // 10 = 4): 36 to train on
GONE = ("This class trains on dataset 'bands', which is not on the server any more (dataset "
        "'bands' not found: prepare it with `webgpu-trainer data` (see `webgpu-trainer "
        "datasets`)): training cannot start until the teacher prepares it again or picks "
        "another dataset.")
TOO_BIG = "batch_size: must be an integer in [2, 36] (at most the 36 training images), got 64"


def tiny_grey(n: int, seed: int) -> tuple:
    """``(x uint8 [n, 1, 28, 28], y [n])``: 3 classes, a bright band at a class's rows."""
    rng = np.random.default_rng(seed)
    y = (np.arange(n) % 3).astype(np.uint8)
    x = rng.integers(0, 40, (n, 1, 28, 28)).astype(np.uint8)
    for i, k in enumerate(y):
        x[i, 0, 4 + 8 * k:10 + 8 * k] = 230
    return x, y


@pytest.fixture
def app(tmp_path):
    from webgpu_trainer.host.classroom.app import create_classroom_app
    root = tmp_path / "datasets"
    write_image_dataset(root, "bands", {"train": tiny_grey(TRAIN, 0), "test": tiny_grey(TEST, 1)},
                        ["top", "middle", "bottom"], title="Bands")
    return create_classroom_app(REPO, models_dir=models_dir(tmp_path),
                                data_dir=default_cache_dir(), wheels_dir=tmp_path / "wheels",
                                state_dir=tmp_path / "state", base_urls=["https://192.0.2.7:8443"],
                                uploads_dir=tmp_path / "uploads", data_root=root)


def session(client, app, **config):
    return client.post("/api/classroom/sessions", headers=teacher(app), json={
        "name": "4C", "pinned": ["model", "dataset"],
        "config": {"model": "mlp-ts17", "max_steps": 5, "batch_size": 64, **config}})


def test_session_checks_its_datasets_training_images(app):
    with TestClient(app) as c:
        r = session(c, app, dataset="bands")
        assert r.status_code == 422, r.text
        assert r.json()["problems"] == [TOO_BIG]
        assert c.get("/api/classroom/sessions", headers=teacher(app)).json() == []
        # the same config on the default dataset (60,000 images) is a session
        r = session(c, app, dataset="mnist")
        assert r.status_code == 201, r.text
        r = session(c, app, dataset="bands", batch_size=8)
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        assert r.json()["config"]["dataset"] == "bands"
        assert sorted(r.json()["pinned"]) == ["dataset", "model"]
        # PATCH: the batch checked against the session's dataset too; the session unchanged
        r = c.patch(f"/api/classroom/sessions/{sid}", headers=teacher(app),
                    json={"config": {"model": "mlp-ts17", "dataset": "bands", "batch_size": 64}})
        assert r.status_code == 422 and r.json()["problems"] == [TOO_BIG], r.text
        got = c.get(f"/api/classroom/sessions/{sid}", headers=teacher(app)).json()
        assert got["config"]["batch_size"] == 8


def test_student_report_checks_the_datasets_training_images(app):
    with TestClient(app) as c:
        sid = session(c, app, dataset="bands", batch_size=8).json()["id"]
        ada = join(c, sid, "Ada")
        cfg = {"model": "mlp-ts17", "dataset": "bands", "max_steps": 5}
        r = c.post("/api/classroom/report", headers=ada, json={
            "run": 1, "state": "training", "config": {**cfg, "batch_size": 64},
            "points": [[1, 2.3, 0.1]]})
        assert r.status_code == 422, r.text
        assert r.json()["error"] == f"config: {TOO_BIG}"
        roster = c.get(f"/api/classroom/sessions/{sid}/roster", headers=teacher(app)).json()
        assert [(x["name"], x["step"]) for x in roster] == [("Ada", None)]
        r = c.post("/api/classroom/report", headers=ada, json={
            "run": 1, "state": "training", "config": {**cfg, "batch_size": 8},
            "points": [[1, 2.3, 0.1]]})
        assert r.status_code == 200, r.text
        roster = c.get(f"/api/classroom/sessions/{sid}/roster", headers=teacher(app)).json()
        assert [(x["name"], x["step"]) for x in roster] == [("Ada", 1)]


GHOST = ("dataset: dataset 'ghost' not found: prepare it with `webgpu-trainer data` (see "
         "`webgpu-trainer datasets`)")


def test_session_refuses_a_dataset_the_server_does_not_have(app):
    """Before, a session could pin dataset 'ghost' (a valid name, no such dataset) and every
    student's Start failed on a 404; now creation and PATCH are refused naming it, and nothing
    is stored."""
    with TestClient(app) as c:
        r = session(c, app, dataset="ghost", batch_size=8)
        assert r.status_code == 422, r.text
        assert r.json()["problems"] == [GHOST]
        assert c.get("/api/classroom/sessions", headers=teacher(app)).json() == []
        sid = session(c, app, dataset="bands", batch_size=8).json()["id"]
        r = c.patch(f"/api/classroom/sessions/{sid}", headers=teacher(app),
                    json={"config": {"model": "mlp-ts17", "dataset": "ghost", "batch_size": 8}})
        assert r.status_code == 422 and r.json()["problems"] == [GHOST], r.text
        got = c.get(f"/api/classroom/sessions/{sid}", headers=teacher(app)).json()
        assert got["config"]["dataset"] == "bands" and got["problems"] == []


def test_dataset_deleted_after_the_session_is_named_to_both(app, tmp_path):
    """The session's dataset removed from the server afterwards: the student's session (before
    and after joining) and the teacher's carry one problem naming it (the pages show it)
    instead of a Start that fails on a 404."""
    import shutil
    with TestClient(app) as c:
        sid = session(c, app, dataset="bands", batch_size=8).json()["id"]
        assert c.get(f"/api/classroom/join/{sid}").json()["problems"] == []
        shutil.rmtree(tmp_path / "datasets" / "bands")
        want = [GONE]
        assert c.get(f"/api/classroom/join/{sid}").json()["problems"] == want
        r = c.post(f"/api/classroom/join/{sid}", json={"name": "Ada"})
        assert r.status_code == 200 and r.json()["session"]["problems"] == want
        got = c.get(f"/api/classroom/sessions/{sid}", headers=teacher(app)).json()
        assert got["problems"] == want and got["config"]["dataset"] == "bands"


def test_session_list_carries_each_sessions_problems(app, tmp_path):
    """``GET /api/classroom/sessions`` (the dashboard's list) names a deleted dataset on its
    session, as ``GET /api/classroom/sessions/{sid}`` does, and nothing on the others."""
    import shutil
    with TestClient(app) as c:
        gone = session(c, app, dataset="bands", batch_size=8).json()["id"]
        kept = session(c, app, batch_size=8).json()["id"]

        def problems():
            rows = c.get("/api/classroom/sessions", headers=teacher(app)).json()
            return {r["id"]: r["problems"] for r in rows}
        assert problems() == {gone: [], kept: []}
        shutil.rmtree(tmp_path / "datasets" / "bands")
        assert problems() == {gone: [GONE], kept: []}
        one = c.get(f"/api/classroom/sessions/{gone}", headers=teacher(app)).json()
        assert one["problems"] == [GONE]


MISFIT = ("model: seednet: model input 'input' [N, 1, 28, 28] does not fit dataset pairs "
          "(2 features): it takes [1, 28, 28] per sample (784 values), the dataset gives [2] "
          "(2 values); use a model with input [N, 2]")


def pairs(n: int, seed: int) -> tuple:
    """``(x float [n, 2], y [n])``: a CSV table's 2 features, 2 classes."""
    rng = np.random.default_rng(seed)
    y = (np.arange(n) % 2).astype(np.uint8)
    return rng.normal(0, 1, (n, 2)) + y[:, None] * 3, y


def test_session_refuses_a_model_that_does_not_fit_its_dataset(app, tmp_path):
    """Before, a session of model seednet (input [N, 1, 28, 28]) on a 2-feature table was
    made (201, problems []) and its students were stuck with Start disabled; now creation
    and PATCH are refused with the check of POST /api/config/validate, naming the model, its
    input, the dataset and its shape, and nothing is stored or changed."""
    import shutil
    from dataset_fixtures import write_table_dataset
    write_table_dataset(tmp_path / "datasets", "pairs",
                        {"train": pairs(40, 0), "test": pairs(12, 1)}, ["no", "yes"])
    shutil.copy(REPO / "models" / "seednet.onnx", tmp_path / "models" / "seednet.onnx")
    with TestClient(app) as c:
        r = session(c, app, model="seednet", dataset="pairs", batch_size=8)
        assert r.status_code == 422, r.text
        assert r.json() == {"error": f"session config: {MISFIT}", "problems": [MISFIT]}
        assert c.get("/api/classroom/sessions", headers=teacher(app)).json() == []
        r = session(c, app, dataset="pairs", batch_size=8)  # the other model: its own name
        assert r.status_code == 422 and r.json()["problems"] == [
            MISFIT.replace("seednet", "mlp-ts17", 1)], r.text
        # seednet on 1x28x28 images (bands; the default dataset, MNIST): sessions
        sid = session(c, app, model="seednet", dataset="bands", batch_size=8).json()["id"]
        r = session(c, app, model="seednet", batch_size=8)
        assert r.status_code == 201 and r.json()["problems"] == [], r.text
        # PATCH onto the table: refused, the session unchanged
        r = c.patch(f"/api/classroom/sessions/{sid}", headers=teacher(app),
                    json={"config": {"model": "seednet", "dataset": "pairs", "batch_size": 8}})
        assert r.status_code == 422 and r.json()["problems"] == [MISFIT], r.text
        got = c.get(f"/api/classroom/sessions/{sid}", headers=teacher(app)).json()
        assert got["config"]["dataset"] == "bands" and got["config"]["model"] == "seednet"
        assert len(c.get("/api/classroom/sessions", headers=teacher(app)).json()) == 2

"""The students' routes: look at a session, join it with a display name, report metrics (one
batch every 2 s), send the final model. A student's own routes need ``X-Student-Key: id.key``
(the key ``join`` returned); nothing here reaches another student's data or a teacher action.

| route | what |
|---|---|
| ``GET /api/classroom/join/{sid}`` | the session: ``{id, name, open, config, pinned}`` |
| ``POST /api/classroom/join/{sid}`` | ``{name}`` -> ``{student, key, session}`` |
| ``POST /api/classroom/report`` | a metrics batch (``common.Report``) -> ``{ok, run, points}`` |
| ``POST /api/classroom/model?run=N`` | the run's trained weights (bundle layout) -> ``{sha256}`` |
| ``GET /classroom/ca.pem`` | the classroom's CA certificate (to trust the HTTPS server) |
"""

from __future__ import annotations

import hashlib

import numpy as np
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..bodies import read_body
from ..server import ApiError, file_response
from .common import (JoinBody, Report, call, client_ip, dataset_problems, json_body, same_origin,
                     student_of)
from .config import ConfigError, check_config


def student_seed(seed: int, student: str) -> int:
    """A student's own seed: derived from the session's ``seed`` and the student's id (the
    same student always gets the same one), in [0, 2**32 - 1]."""
    digest = hashlib.sha256(f"{seed}/{student}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def public_session(row: dict, student: str | None = None, problems: list | None = None) -> dict:
    """What a student sees of a session; with ``student`` (their id) and the seed not pinned,
    the config's ``seed`` is their own (``student_seed``), so each student's run differs.
    ``problems``: why the session cannot train now (``dataset_problems``), shown by the page."""
    out = {k: row[k] for k in ("id", "name", "open", "config", "pinned")}
    out["problems"] = list(problems or [])
    if student and "seed" not in row["pinned"] and "seed" in row["config"]:
        out["config"] = {**row["config"],
                         "seed": student_seed(int(row["config"]["seed"]), student)}
    return out


async def get_session(request) -> Response:
    """The session; a joined student (``X-Student-Key``) gets their own seed in it."""
    st = request.app.state.classroom
    st.views.check(client_ip(request), "session look-ups")
    row = await call(st.store.session, request.path_params["sid"])
    student = None
    if request.headers.get("x-student-key"):
        try:
            found = await call(st.store.check_student, *student_of(request))
            student = found["id"] if found["session_id"] == row["id"] else None
        except ApiError:
            student = None
    return JSONResponse(public_session(row, student, dataset_problems(request, row["config"])),
                        headers={"Cache-Control": "no-store"})


async def join(request) -> Response:
    st = request.app.state.classroom
    same_origin(request)
    st.joins.check(client_ip(request), "joins from this address")
    body = await json_body(request, JoinBody)
    sid = request.path_params["sid"]
    student, key = await call(st.store.join, sid, body.name)
    st.changes.bump(sid)
    session = await call(st.store.session, sid)
    return JSONResponse({"student": student, "key": f"{student}.{key}", "name": body.name,
                         "session": public_session(session, student,
                                                    dataset_problems(request, session["config"]))},
                        headers={"Cache-Control": "no-store"})


def _pinned_violations(session: dict, config: dict) -> list[str]:
    return [k for k in session["pinned"]
            if k in session["config"] and k in config and config[k] != session["config"][k]]


async def report(request) -> Response:
    st = request.app.state.classroom
    same_origin(request)
    sid, key = student_of(request)
    st.reports.check(sid, "metrics reports: send one batch every 2 s")
    body = await json_body(request, Report)
    student = await call(st.store.check_student, sid, key)
    batch = body.model_dump()
    if body.config is not None:
        cfg = {k: v for k, v in body.config.items() if k in st.config_keys}
        try:
            cfg = check_config(cfg, train_images=request.app.state.train_images(
                cfg.get("dataset")), classes_of=st.models.classes)
        except ConfigError as exc:
            raise ApiError(422, f"config: {exc}", [f"{f}: {m}" for f, m in exc.errors]) \
                from None
        session = await call(st.store.session, student["session_id"])
        bad = _pinned_violations(session, cfg)
        if bad:
            raise ApiError(409, "this class pins " + ", ".join(
                f"{k} = {session['config'][k]!r}" for k in bad) + "; train with those")
        batch["config"] = cfg
    if body.adapter is None:
        batch.pop("adapter")
    if batch.get("result"):
        batch["result"] = await _checked_verdict(request, student, body.run, batch)
    out = await call(st.store.report, student, batch)
    st.changes.bump(student["session_id"])
    return JSONResponse({"ok": True, **out}, headers={"Cache-Control": "no-store"})


async def _checked_verdict(request, student: dict, run_no: int | None, batch: dict) -> dict:
    """The result with the verdict the student's page reported (engine/train/verdict.py's kind and
    words), checked where the server can: Stop makes it "stopped" unless it diverged, and a
    test accuracy at most ``CHANCE_FACTOR`` / classes is "chance" whatever was reported."""
    from ...engine.train.verdict import CHANCE_FACTOR
    st = request.app.state.classroom
    res = dict(batch["result"])
    model = (batch.get("config") or {}).get("model")
    if not model and run_no:
        try:
            model = ((await call(st.store.run, student["id"], run_no))["config"] or {}) \
                .get("model")
        except ApiError:
            model = None
    classes = await run_in_threadpool(st.models.classes, model) if model else None
    kind = res.get("verdict") or "ok"
    if res.get("stopped") and kind != "diverged":
        kind = "stopped"
    acc = res.get("test_acc")
    if kind == "ok" and classes and acc is not None and acc <= CHANCE_FACTOR / classes:
        kind = "chance"
        res["reason"] = (f"test accuracy {100 * acc:.1f}% is no better than guessing "
                         f"({100 / classes:.0f}% for {classes} classes)")
    res["verdict"] = kind
    return res


def first_nonfinite(graph: dict, weights: bytes) -> tuple[str, int] | None:
    """``(tensor name, flat index)`` of the first NaN or infinite weight (bundle layout:
    float32 at each tensor's offset), or None when every weight is finite."""
    for spec in graph["tensors"]:
        arr = np.frombuffer(weights, "<f4", count=spec["nbytes"] // 4, offset=spec["offset"])
        bad = np.flatnonzero(~np.isfinite(arr))
        if bad.size:
            return spec["name"], int(bad[0])
    return None


async def model(request) -> Response:
    """The trained weights of a finished run, exported to .onnx on the server (so the file is
    a valid model of the session's architecture: nothing else is accepted), stored under its
    sha256."""
    st = request.app.state.classroom
    same_origin(request)
    sid, key = student_of(request)
    st.uploads.check(sid, "model uploads")
    try:
        run_no = int(request.query_params.get("run", ""))
    except ValueError:
        raise ApiError(400, "give the run number: ?run=N") from None
    student = await call(st.store.check_student, sid, key)
    run = await call(st.store.run, sid, run_no)
    name = (run["config"] or {}).get("model")
    if not name:
        raise ApiError(409, f"run {run_no} reported no config, so its model is unknown")
    models = request.app.state.models
    path = models.path(name)
    graph, blob = await run_in_threadpool(models.bundle, path)
    body = await read_body(request, len(blob), "the model's weights")
    if len(body) != len(blob):
        raise ApiError(400, f"weights for model {name!r}: expected {len(blob)} bytes "
                            f"(bundle layout), got {len(body)}")
    bad = await run_in_threadpool(first_nonfinite, graph, body)
    if bad:
        raise ApiError(400, f"weights for model {name!r}: {bad[0]}[{bad[1]}] (flat index) is "
                            "not a finite number (NaN or infinite): the run diverged; such a "
                            "model is not kept")
    prov = {"dataset": "MNIST", "classroom_session": student["session_id"],
            "student": student["name"], "run": run_no,
            "test_accuracy_reported_by_student": run["test_acc"],
            **{k: v for k, v in (run["config"] or {}).items() if k != "model"}}
    from ... import onnx_io
    async with st.exports:  # a few exports at a time: the CPU stays free for the rest
        try:
            onnx_bytes = await run_in_threadpool(onnx_io.export_onnx, path, body, prov)
        except ValueError as exc:
            raise ApiError(400, f"the weights do not make a valid model: {exc}") from None
    digest = await call(st.store.attach_model, student, run_no, onnx_bytes)
    st.changes.bump(student["session_id"])
    return JSONResponse({"sha256": digest, "bytes": len(onnx_bytes)})


async def ca_cert(request) -> Response:
    st = request.app.state.classroom
    if not st.ca_path:
        raise ApiError(404, "this server runs without its own certificate authority")
    return file_response(request, st.ca_path, media_type="application/x-x509-ca-cert")


ROUTES = [
    Route("/api/classroom/join/{sid}", get_session, methods=["GET"]),
    Route("/api/classroom/join/{sid}", join, methods=["POST"]),
    Route("/api/classroom/report", report, methods=["POST"]),
    Route("/api/classroom/model", model, methods=["POST"]),
    Route("/classroom/ca.pem", ca_cert, methods=["GET", "HEAD"]),
]

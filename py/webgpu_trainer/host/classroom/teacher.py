"""The teacher's routes (every one needs ``Authorization: Bearer <teacher token>``, else 403):
sessions, the live roster as Server-Sent Events, the results as CSV, the students' models.

| route | what |
|---|---|
| ``GET /teacher`` | the dashboard page (web/teacher/teacher.html; the token in the URL fragment) |
| ``GET /api/classroom/info`` | join URLs, HTTPS details (CA fingerprint), models |
| ``GET/POST /api/classroom/sessions`` | list / create (``{name, config, pinned}``) |
| ``GET/PATCH /api/classroom/sessions/{sid}`` | a session, its join URLs and QR codes / change it |
| ``GET .../{sid}/roster`` | one row per student (latest run, state, best test accuracy) |
| ``GET .../{sid}/curves`` | each student's latest loss curve |
| ``GET .../{sid}/events`` | SSE: ``roster`` (changed rows) and ``points`` (new curve points) |
| ``GET .../{sid}/results.csv`` | every run of every student |
| ``GET /api/classroom/models/{sha256}.onnx`` | a submitted model |

The live stream reads the database when a student route of this process wrote to the session
(``changes.Changes``; at most once per ``TICK_S``) and otherwise every ``SLOW_POLL_S``, which is
how it sees what another server process wrote to a shared database.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import time

from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..files import TEACHER_PAGE
from ..server import ApiError, file_response
from .common import (SessionBody, SessionPatch, call, dataset_problems, json_body, same_origin,
                     teacher_only)
from .config import DEFAULTS, PINNABLE, ConfigError, check_config, check_pinned
from .tls import qr_svg

TICK_S = 1.0                 # the live stream reads the database at most this often
SLOW_POLL_S = 5.0            # ... and at least this often (writes of other server processes)
PING_S = 15.0                # a comment line when nothing changed (keeps proxies from closing)
STREAM_MAX_S = 3600.0        # a stream ends after an hour; the page reconnects
MAX_STREAMS = 32             # live streams per process
POINTS_MARGIN_S = 10.0       # re-read points this far back (a late commit is not missed)


def _checked(request, config: dict, pinned) -> tuple[dict, list]:
    """The session's config checked against the server's models, the model's classes and the
    training images of its dataset (``check_config``) and its pinned keys; 422 naming each bad
    field (a dataset this server does not have among them). A model that does not fit the
    dataset (its input against the dataset's sample shape, its outputs against the classes:
    ``app.state.model_misfit``, the check of ``POST /api/config/validate``) is refused
    before the options, naming both: its students could never press Start."""
    st = request.app.state.classroom
    dataset = config.get("dataset") if isinstance(config, dict) else None
    missing = request.app.state.dataset_missing(dataset) if isinstance(dataset, str) else None
    if missing:  # a session must not pin what no student can load
        raise ApiError(422, f"session config: dataset: {missing}", [f"dataset: {missing}"])
    model = config.get("model", DEFAULTS["model"]) if isinstance(config, dict) else None
    misfit = request.app.state.model_misfit(model, dataset) \
        if isinstance(model, str) and model in st.model_names() \
        and (dataset is None or isinstance(dataset, str)) else None
    if misfit:
        why = f"{model}: {misfit}"
        raise ApiError(422, f"session config: model: {why}", [f"model: {why}"])
    try:
        return (check_config(config, st.model_names(),
                             train_images=request.app.state.train_images(dataset),
                             classes_of=st.models.classes),
                check_pinned([k for k in PINNABLE if k != "seed"] if pinned is None
                             else pinned))
    except ConfigError as exc:
        raise ApiError(422, f"session config: {exc}", [f"{f}: {m}" for f, m in exc.errors]) \
            from None


def _session_out(request, st, row: dict) -> dict:
    """The session for the dashboard: its join links and ``problems`` (its dataset deleted
    since it was made: ``dataset_problems``)."""
    join = [{"url": f"{base}/?class={row['id']}", "qr_svg": qr_svg(f"{base}/?class={row['id']}")}
            for base in st.base_urls]
    return {**{k: row[k] for k in ("id", "name", "open", "config", "pinned", "created_at")},
            "join": join, "problems": dataset_problems(request, row["config"])}


async def info(request) -> Response:
    await teacher_only(request)
    st = request.app.state.classroom
    return JSONResponse({"base_urls": st.base_urls, "tls": bool(st.ca_path),
                         "ca_sha256": st.ca_sha256, "ca_url": "/classroom/ca.pem"
                         if st.ca_path else None, "models": sorted(st.model_names()),
                         "defaults": DEFAULTS, "pinnable": list(PINNABLE)})


async def sessions(request) -> Response:
    await teacher_only(request)
    st = request.app.state.classroom
    if request.method == "GET":  # each with its problems, as GET /sessions/{sid}
        return JSONResponse([{**row, "problems": dataset_problems(request, row["config"])}
                             for row in await call(st.store.sessions)])
    same_origin(request)
    body = await json_body(request, SessionBody)
    config, pinned = _checked(request, body.config, body.pinned)
    sid = await call(st.store.create_session, body.name, config, pinned)
    return JSONResponse(_session_out(request, st, await call(st.store.session, sid)), 201)


async def session(request) -> Response:
    await teacher_only(request)
    st = request.app.state.classroom
    sid = request.path_params["sid"]
    if request.method == "PATCH":
        same_origin(request)
        body = await json_body(request, SessionPatch)
        change = body.model_dump(exclude_none=True)
        if "config" in change or "pinned" in change:
            old = await call(st.store.session, sid)
            change["config"], change["pinned"] = _checked(
                request, change.get("config", old["config"]),
                change.get("pinned", old["pinned"]))
        row = await call(st.store.update_session, sid, **change)
    else:
        row = await call(st.store.session, sid)
    return JSONResponse(_session_out(request, st, row))


async def roster(request) -> Response:
    await teacher_only(request)
    st = request.app.state.classroom
    await call(st.store.session, request.path_params["sid"])
    return JSONResponse(await call(st.store.roster, request.path_params["sid"]))


async def curves(request) -> Response:
    await teacher_only(request)
    st = request.app.state.classroom
    await call(st.store.session, request.path_params["sid"])
    return JSONResponse(await call(st.store.curves, request.path_params["sid"]))


def _sse(event: str, data) -> str:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def events(request) -> Response:
    """Server-Sent Events: first the whole roster and every latest-run curve, then, when a
    write of this process woke the stream (or ``SLOW_POLL_S`` passed), the rows that changed
    and the points that are new. Bounded per connection: the last row sent per student and
    the last step sent per run."""
    await teacher_only(request)
    st = request.app.state.classroom
    sid = request.path_params["sid"]
    await call(st.store.session, sid)
    if st.streams >= MAX_STREAMS:
        raise ApiError(503, f"too many live dashboards open ({MAX_STREAMS}); close one")

    async def stream():
        st.streams += 1
        sent_rows: dict = {}
        sent_step: dict = {}  # (student, run) -> last step sent
        last_runs: dict = {}  # student -> run shown
        since, quiet, t_end = 0.0, time.monotonic(), time.monotonic() + STREAM_MAX_S
        try:
            yield "retry: 2000\n\n"
            while time.monotonic() < t_end:
                now, read_at, seen = time.time(), time.monotonic(), st.changes.version(sid)
                rows = await call(st.store.roster, sid)
                changed = []
                for r in rows:
                    text = json.dumps(r, sort_keys=True, default=str)
                    if sent_rows.get(r["id"]) != text:
                        sent_rows[r["id"]] = text
                        changed.append(r)
                    last_runs[r["id"]] = r["last_run"]
                out = []
                if changed:
                    out.append(_sse("roster", changed))
                fresh: dict = {}
                for student, run, step, loss, acc in await call(
                        st.store.points_since, sid, since - POINTS_MARGIN_S if since else 0.0):
                    if run != last_runs.get(student) or step <= sent_step.get((student, run),
                                                                              -1):
                        continue
                    sent_step[(student, run)] = step
                    fresh.setdefault(student, {"run": run, "points": []})["points"].append(
                        [step, loss, acc])
                since = now
                if fresh:
                    out.append(_sse("points", fresh))
                if out:
                    quiet = time.monotonic()
                    yield "".join(out)
                elif time.monotonic() - quiet > PING_S:
                    quiet = time.monotonic()
                    yield ": ping\n\n"
                await st.changes.wait(sid, seen, min(SLOW_POLL_S, t_end - time.monotonic()))
                await asyncio.sleep(max(0.0, read_at + TICK_S - time.monotonic()))
        finally:
            st.streams -= 1

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


# test_acc / test_loss are what the student's page reported (the server does not re-measure)
CSV_COLUMNS = ["student", "student_id", "run", "state", "verdict", "model", "optimizer", "lr",
               "batch_size", "epochs", "seed", "init", "step", "total_steps", "epoch", "loss",
               "acc", "val_loss", "val_acc", "test_acc_reported", "test_loss_reported",
               "eval_images",
               "images_per_s", "adapter", "started_at", "finished_at", "model_sha256", "error"]


def _cell(v) -> str:
    """A CSV cell; text that a spreadsheet would run as a formula gets a leading quote."""
    if v is None:
        return ""
    s = str(v)
    return "'" + s if s[:1] in ("=", "+", "-", "@", "\t", "\r") and not _is_number(s) else s


def _is_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def _iso(t) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if t else ""


async def results_csv(request) -> Response:
    await teacher_only(request)
    st = request.app.state.classroom
    sid = request.path_params["sid"]
    sess = await call(st.store.session, sid)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(CSV_COLUMNS)
    for r in await call(st.store.results, sid):
        cfg = r["config"] or {}
        row = {**{k: cfg.get(k) for k in ("model", "optimizer", "lr", "batch_size", "epochs",
                                         "seed", "init")}, **r, "student": r["name"],
               "started_at": _iso(r["started_at"]), "finished_at": _iso(r["finished_at"]),
               "test_acc_reported": r["test_acc"], "test_loss_reported": r["test_loss"]}
        w.writerow([_cell(row.get(c)) for c in CSV_COLUMNS])
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in sess["name"])[:40]
    return Response(buf.getvalue(), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition":
                             f'attachment; filename="class-{safe or sid}-results.csv"',
                             "Cache-Control": "no-store"})


async def model_file(request) -> Response:
    await teacher_only(request)
    st = request.app.state.classroom
    digest = request.path_params["sha"]
    path = await call(st.store.model_path, digest)
    resp = file_response(request, path, etag=f'"{digest}"', cache="private, max-age=31536000, "
                         "immutable", media_type="application/octet-stream")
    resp.headers["Content-Disposition"] = f'attachment; filename="{digest[:12]}.onnx"'
    return resp


async def page(request) -> Response:
    return file_response(request, request.app.state.classroom.web / TEACHER_PAGE)


ROUTES = [
    Route("/teacher", page, methods=["GET", "HEAD"]),
    Route("/api/classroom/info", info),
    Route("/api/classroom/sessions", sessions, methods=["GET", "POST"]),
    Route("/api/classroom/sessions/{sid}", session, methods=["GET", "PATCH"]),
    Route("/api/classroom/sessions/{sid}/roster", roster),
    Route("/api/classroom/sessions/{sid}/curves", curves),
    Route("/api/classroom/sessions/{sid}/events", events),
    Route("/api/classroom/sessions/{sid}/results.csv", results_csv),
    Route("/api/classroom/models/{sha}.onnx", model_file, methods=["GET", "HEAD"]),
]

"""Classroom mode without a browser (issue 11): the routes through Starlette's TestClient on
SQLite and on a real PostgreSQL started by the test; durability across a restart; every bad
request a clean 4xx while the server keeps serving; the HTTPS certificate; the limits.

The browser side (two students and a teacher in Chromium, a restart mid-class) is
tests/test_classroom_e2e.py.
"""

from __future__ import annotations

import csv
import io
import json
import ssl

import pytest
from classroom_helpers import (Postgres, join, make_app, new_session, run_config, teacher,
                               train)
from starlette.testclient import TestClient
from webgpu_trainer.host.data import default_cache_dir


@pytest.fixture(scope="module")
def postgres():
    pg = Postgres()
    try:
        yield pg
    finally:
        pg.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return None  # the default: <state>/classroom.db
    pg = request.getfixturevalue("postgres")
    # a fresh database per test on the shared cluster
    import sqlalchemy
    name = f"t{abs(hash(tmp_path)) % 10 ** 9}"
    eng = sqlalchemy.create_engine(pg.url, isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        c.exec_driver_sql(f"CREATE DATABASE {name}")
    eng.dispose()
    return pg.url.rsplit("/", 1)[0] + f"/{name}"


def test_class_flow(tmp_path, db_url):
    """Join, report, roster, leaderboard order, curves, CSV, model upload; on both DBs."""
    app = make_app(tmp_path, db_url)
    assert app.state.classroom.store.dialect == ("sqlite" if db_url is None else "postgresql")
    with TestClient(app) as c:
        sid = new_session(c, app)
        info = c.get(f"/api/classroom/join/{sid}").json()
        assert info["config"]["model"] == "mlp-ts17" and "lr" in info["pinned"]
        ada, bob = join(c, sid, "Ada"), join(c, sid, "Bob")
        train(c, ada, acc=0.81)
        out = train(c, bob, acc=0.93)
        assert out == {"ok": True, "run": 1, "points": 5}
        roster = c.get(f"/api/classroom/sessions/{sid}/roster", headers=teacher(app)).json()
        assert [(r["name"], r["state"], r["step"], r["best_acc"]) for r in roster] == [
            ("Ada", "finished", 5, 0.81), ("Bob", "finished", 5, 0.93)]
        assert roster[0]["adapter"] == "test GPU" and roster[0]["val_acc"] == 0.81
        curves = c.get(f"/api/classroom/sessions/{sid}/curves", headers=teacher(app)).json()
        assert sorted(len(v["points"]) for v in curves.values()) == [5, 5]
        # the final model: weights in bundle layout, exported and stored by sha256
        from webgpu_trainer import onnx_io
        _, blob = onnx_io.load_bundle(tmp_path / "models" / "mlp-ts17.onnx")
        r = c.post("/api/classroom/model?run=1", headers=bob, content=blob)
        assert r.status_code == 200, r.text
        digest = r.json()["sha256"]
        assert (tmp_path / "state" / "models" / f"{digest}.onnx").is_file()
        r = c.get(f"/api/classroom/models/{digest}.onnx", headers=teacher(app))
        assert r.status_code == 200 and "immutable" in r.headers["cache-control"]
        import hashlib
        assert hashlib.sha256(r.content).hexdigest() == digest
        text = c.get(f"/api/classroom/sessions/{sid}/results.csv", headers=teacher(app)).text
        rows = list(csv.DictReader(io.StringIO(text)))
        assert [(r["student"], r["test_acc_reported"], r["model"]) for r in rows] == [
            ("Ada", "0.81", "mlp-ts17"), ("Bob", "0.93", "mlp-ts17")]
        assert rows[1]["model_sha256"] == digest


def test_leaderboard_verdict_is_the_best_runs(tmp_path, db_url):
    """The roster's ``best_verdict`` is the verdict of the run that gave ``best_acc`` (issue
    16: a chance-level best was shown in green): not the latest run's."""
    app = make_app(tmp_path, db_url)
    with TestClient(app) as c:
        sid = new_session(c, app)
        ada, bob, cy = join(c, sid, "Ada"), join(c, sid, "Bob"), join(c, sid, "Cy")
        train(c, ada, acc=0.95)
        train(c, bob, acc=0.08)              # 10 classes: <= 15% is "chance" (server side)
        train(c, cy, acc=0.6)
        train(c, cy, acc=0.09, run=2)        # the latest run is at chance, the best is not
        roster = c.get(f"/api/classroom/sessions/{sid}/roster", headers=teacher(app)).json()
    assert [(r["name"], r["best_acc"], r["best_verdict"], r["verdict"]) for r in roster] == [
        ("Ada", 0.95, "ok", "ok"), ("Bob", 0.08, "chance", "chance"),
        ("Cy", 0.6, "ok", "chance")]


def test_restart_keeps_acknowledged(tmp_path, db_url):
    """Everything a 200 acknowledged is there after the server (its engine, its process
    state) is gone; the teacher token survives too (its hash: the new process does not know
    the token, yet accepts it); a student keeps reporting after it."""
    app = make_app(tmp_path, db_url)
    token = app.state.classroom.teacher_token
    assert len(token) == 43  # 32 random bytes, URL-safe base64
    with TestClient(app) as c:
        sid = new_session(c, app)
        ada = join(c, sid, "Ada")
        train(c, ada, acc=0.5)
        r = c.post("/api/classroom/report", headers=ada, json={
            "run": 2, "config": run_config(), "points": [[1, 2.0, 0.2], [2, 1.9, 0.3]]})
        assert r.status_code == 200
    app.state.classroom.store.close()
    app2 = make_app(tmp_path, db_url)
    assert app2.state.classroom.teacher_token is None
    assert token not in app2.state.classroom.teacher_hash
    with TestClient(app2) as c:
        wrong = {"Authorization": f"Bearer {token[:-1]}x"}
        assert c.get("/api/classroom/sessions", headers=wrong).status_code == 403
        r = c.post("/api/classroom/report", headers=ada, json={"run": 2, "points": [[3, 1.8,
                                                                                      0.4]]})
        assert r.status_code == 200 and r.json()["points"] == 3
        res = c.get(f"/api/classroom/sessions/{sid}/results.csv",
                    headers={"Authorization": f"Bearer {token}"}).text
        rows = list(csv.DictReader(io.StringIO(res)))
        assert [(r["run"], r["state"], r["test_acc_reported"]) for r in rows] == [
            ("1", "finished", "0.5"), ("2", "training", "")]


def test_two_processes_share_one_database(tmp_path, db_url):
    """Two app instances (as two server processes) on one database: a student who joins on
    one is seen, with their points, by the teacher on the other; same teacher token."""
    a = make_app(tmp_path / "a", db_url, token="shared-token-for-this-test-0123456789")
    url = db_url or a.state.classroom.store.url
    b = make_app(tmp_path / "b", url)
    assert b.state.classroom.teacher_token is None  # b keeps a's: it knows only its hash
    with TestClient(a) as ca, TestClient(b) as cb:
        sid = new_session(ca, a)
        ada = join(ca, sid, "Ada")
        train(cb, ada, acc=0.7)  # reports go to the other process
        assert cb.get(f"/api/classroom/sessions/{sid}", headers=teacher(a)).status_code == 200
        roster = ca.get(f"/api/classroom/sessions/{sid}/roster", headers=teacher(a)).json()
        assert roster[0]["state"] == "finished" and roster[0]["points"] == 5


def test_retried_batch_is_idempotent(tmp_path):
    app = make_app(tmp_path)
    with TestClient(app) as c:
        sid = new_session(c, app)
        ada = join(c, sid, "Ada")
        batch = {"run": 1, "config": run_config(), "points": [[1, 2.0, 0.1], [2, 1.9, 0.2]]}
        for _ in range(3):  # the client did not see the answer and sends it again
            assert c.post("/api/classroom/report", headers=ada, json=batch).json()["points"] == 2


def test_student_cannot_reach_teacher_routes(tmp_path):
    from webgpu_trainer.host.classroom.limits import RateLimiter
    app = make_app(tmp_path)
    app.state.classroom.auth_failures = RateLimiter(rate=1000, burst=1000)  # see limits test
    with TestClient(app) as c:
        sid = new_session(c, app)
        ada = join(c, sid, "Ada")
        digest = "0" * 64
        routes = [("GET", "/api/classroom/info"), ("GET", "/api/classroom/sessions"),
                  ("POST", "/api/classroom/sessions"), ("GET", f"/api/classroom/sessions/{sid}"),
                  ("PATCH", f"/api/classroom/sessions/{sid}"),
                  ("GET", f"/api/classroom/sessions/{sid}/roster"),
                  ("GET", f"/api/classroom/sessions/{sid}/curves"),
                  ("GET", f"/api/classroom/sessions/{sid}/events"),
                  ("GET", f"/api/classroom/sessions/{sid}/results.csv"),
                  ("GET", f"/api/classroom/models/{digest}.onnx")]
        bad = [ada, {}, {"Authorization": "Bearer wrong"},
               {"Authorization": f"Bearer {ada['X-Student-Key']}"},
               {"Authorization": teacher(app)["Authorization"][:-1]}]
        for method, path in routes:
            for headers in bad:
                r = c.request(method, path, headers=headers, json={})
                assert r.status_code == 403, (method, path, headers, r.status_code)
                assert "teacher" in r.json()["error"]
        assert c.get(f"/api/classroom/sessions/{sid}/roster",
                     headers=teacher(app)).status_code == 200


def test_bad_requests_are_clean_4xx(tmp_path):
    app = make_app(tmp_path)
    with TestClient(app, raise_server_exceptions=False) as c:
        sid = new_session(c, app)
        ada = join(c, sid, "Ada")
        T = teacher(app)
        js = {"Content-Type": "application/json"}
        cases = [
            # (status, method, path, kwargs)
            (413, "POST", "/api/classroom/report", dict(headers={**ada, **js},
                                                          content=b"[" + b"1," * 40000 + b"1]")),
            (400, "POST", "/api/classroom/report", dict(headers={**ada, **js}, content=b"{x")),
            (400, "POST", f"/api/classroom/join/{sid}", dict(headers=js,
                                                             content=b"\xff\xfe{")),
            (415, "POST", f"/api/classroom/join/{sid}", dict(content=b"name=Eve")),
            (422, "POST", f"/api/classroom/join/{sid}", dict(json={"name": ""})),
            (422, "POST", f"/api/classroom/join/{sid}", dict(json={"name": "x" * 41})),
            (422, "POST", f"/api/classroom/join/{sid}", dict(json={"name": "<script>"})),
            (422, "POST", f"/api/classroom/join/{sid}", dict(json={"name": "a", "admin": 1})),
            (422, "POST", f"/api/classroom/join/{sid}", dict(json=["Eve"])),
            (422, "POST", "/api/classroom/report", dict(headers=ada, json={"run": "one"})),
            (422, "POST", "/api/classroom/report", dict(headers=ada, json={
                "run": 1, "points": [[1, 2.0, 0.1]] * 2001})),
            (422, "POST", "/api/classroom/report", dict(headers=ada, json={
                "run": 1, "config": run_config(batch_size=0)})),
            (409, "POST", "/api/classroom/report", dict(headers=ada, json={
                "run": 1, "config": run_config(lr=0.5)})),  # lr is pinned
            (404, "GET", "/api/classroom/join/does-not-exist", {}),
            (404, "POST", "/api/classroom/join/does-not-exist", dict(json={"name": "Eve"})),
            (404, "GET", "/api/classroom/sessions/does-not-exist/roster", dict(headers=T)),
            (404, "POST", "/api/classroom/report", dict(
                headers={"X-Student-Key": ada["X-Student-Key"][:-2] + "xx"}, json={})),
            (404, "POST", "/api/classroom/report", dict(
                headers={"X-Student-Key": "nobody.nokey"}, json={})),
            (403, "POST", "/api/classroom/report", dict(json={})),
            (403, "POST", "/api/classroom/report", dict(
                headers={**ada, "Sec-Fetch-Site": "cross-site"}, json={})),
            (400, "POST", "/api/classroom/model?run=x", dict(headers=ada, content=b"")),
            (404, "POST", "/api/classroom/model?run=7", dict(headers=ada, content=b"")),
            (404, "GET", "/api/classroom/models/..%2f..%2fetc%2fpasswd.onnx", dict(headers=T)),
            (404, "GET", "/api/classroom/models/" + "g" * 64 + ".onnx", dict(headers=T)),
            (404, "GET", "/api/classroom/models/../../../etc/passwd", dict(headers=T)),
            ((400, 404), "GET", "/..%2f..%2fetc%2fpasswd", {}),
            ((400, 404), "GET", "/..%2f..%2fpyproject.toml.js", {}),
            ((400, 404), "GET", "/vendor/pyodide/..%2f..%2f..%2fpyproject.toml", {}),
            ((400, 404), "GET", "/vendor/pyodide/%2e%2e/%2e%2e/%2e%2e/pyproject.toml", {}),
            (405, "DELETE", f"/api/classroom/sessions/{sid}", dict(headers=T)),
            (422, "POST", "/api/classroom/sessions", dict(headers=T, json={
                "name": "x", "config": {"model": "nope", "lr": -1, "colour": "red"}})),
            (422, "PATCH", f"/api/classroom/sessions/{sid}", dict(headers=T, json={
                "pinned": ["model", "everything"]})),
        ]
        for status, method, path, kw in cases:
            r = c.request(method, path, **kw)
            want = status if isinstance(status, tuple) else (status,)
            assert r.status_code in want, (method, path, r.status_code, r.text[:300])
            body = r.json()
            assert isinstance(body.get("error"), str) and "Traceback" not in r.text, r.text
        # the 422 names the fields
        r = c.post("/api/classroom/sessions", headers=T, json={
            "name": "x", "config": {"model": "nope", "lr": -1, "colour": "red"}})
        problems = " ".join(r.json()["problems"])
        assert "model" in problems and "lr" in problems and "colour" in problems
        # a model upload of the wrong size is refused before export
        train(c, ada, acc=0.4)
        r = c.post("/api/classroom/model?run=1", headers=ada, content=b"\0" * 12)
        assert r.status_code == 400 and "expected" in r.json()["error"]
        # and the server still serves everyone
        bob = join(c, sid, "Bob")
        assert train(c, bob, acc=0.6)["points"] == 5
        assert len(c.get(f"/api/classroom/sessions/{sid}/roster", headers=T).json()) == 2


def test_closed_session_and_rate_limits(tmp_path):
    app = make_app(tmp_path)
    with TestClient(app) as c:
        sid = new_session(c, app)
        ada = join(c, sid, "Ada")
        codes = [c.post("/api/classroom/report", headers=ada, json={}).status_code
                 for _ in range(14)]
        assert codes[:10] == [200] * 10 and 429 in codes[10:]
        r = c.post("/api/classroom/report", headers=ada, json={})
        assert r.status_code == 429 and "retry in" in r.json()["error"]
        r = c.patch(f"/api/classroom/sessions/{sid}", headers=teacher(app), json={"open": False})
        assert r.status_code == 200 and r.json()["open"] is False
        r = c.post(f"/api/classroom/join/{sid}", json={"name": "Late"})
        assert r.status_code == 409 and "closed" in r.json()["error"]
        # wrong teacher tokens are limited per address: 20 tries, then 429
        codes = {c.get("/api/classroom/sessions", headers={"Authorization": "Bearer x"})
                 .status_code for _ in range(25)}
        assert codes == {403, 429}


def test_security_headers_and_no_cors(tmp_path):
    app = make_app(tmp_path)
    with TestClient(app) as c:
        for path in ("/teacher", "/"):
            r = c.get(path)
            assert r.status_code == 200
            csp = r.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in csp and "http" not in csp
            assert r.headers["x-content-type-options"] == "nosniff"
            assert r.headers["referrer-policy"] == "no-referrer"
        r = c.options("/api/classroom/sessions", headers={
            "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
        assert r.status_code in (403, 405) and "access-control-allow-origin" not in r.headers
        r = c.get(f"/api/classroom/join/{new_session(c, app)}",
                  headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in r.headers


def test_static_caching(tmp_path):
    """Shards and the Pyodide runtime: immutable under content-addressed / versioned names,
    strong ETags, 304 on revalidation, Range; the page's own files revalidate."""
    app = make_app(tmp_path)
    with TestClient(app) as c:
        meta = c.get("/api/wheel").json()
        assert meta["pyodide"].startswith("/vendor/pyodide@")
        r = c.get(meta["pyodide"] + "pyodide-lock.json")
        assert r.status_code == 200 and "immutable" in r.headers["cache-control"]
        etag = r.headers["etag"]
        assert c.get(meta["pyodide"] + "pyodide-lock.json",
                     headers={"If-None-Match": etag}).status_code == 304
        assert c.get("/vendor/pyodide@0.0.0-0/pyodide-lock.json").status_code == 404
        assert c.get(meta["pyodide"] + "..%2f..%2fpackage.json").status_code in (400, 404)
        shard = next(e["file"] for e in c.get("/data/mnist/manifest.json").json()["splits"]
                     ["test"].values() if isinstance(e, dict))
        r = c.get(f"/data/mnist/{shard}", headers={"Range": "bytes=0-99"})
        assert r.status_code == 206 and len(r.content) == 100
        assert "immutable" in r.headers["cache-control"]
        r = c.get("/page/classroom.js")
        assert r.headers["cache-control"] == "no-cache" and r.headers["etag"]


def test_sse_stream_sends_roster_and_points(tmp_path):
    from webgpu_trainer.host.classroom import teacher as teacher_mod
    app = make_app(tmp_path)
    with TestClient(app) as c:
        sid = new_session(c, app)
        ada = join(c, sid, "Ada")
        train(c, ada, acc=0.9)
        teacher_mod.STREAM_MAX_S = 0.5  # one round, then the stream ends by itself
        try:
            text = c.get(f"/api/classroom/sessions/{sid}/events", headers=teacher(app)).text
        finally:
            teacher_mod.STREAM_MAX_S = 3600.0
    events = {}
    for block in text.split("\n\n"):
        lines = dict(ln.split(": ", 1) for ln in block.splitlines() if ": " in ln)
        if "event" in lines:
            events[lines["event"]] = json.loads(lines["data"])
    assert events["roster"][0]["name"] == "Ada" and events["roster"][0]["state"] == "finished"
    (pts,) = events["points"].values()
    assert [p[0] for p in pts["points"]] == [1, 2, 3, 4, 5]


def test_certificate_chain_and_names(tmp_path):
    """The server certificate verifies against the classroom CA for 127.0.0.1 and localhost
    (OpenSSL, the same checks a browser makes: chain, SAN, name constraints, key usage)."""
    import socket
    import threading

    from webgpu_trainer.host.classroom import tls
    made = tls.ensure_certificate(tmp_path / "tls", ["192.0.2.7"])
    again = tls.ensure_certificate(tmp_path / "tls", ["192.0.2.7"])
    assert again["ca_sha256"] == made["ca_sha256"]
    assert (tmp_path / "tls" / "ca-key.pem").stat().st_mode & 0o077 == 0
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(made["cert"], made["key"])
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve():
        for _ in range(2):
            conn, _ = srv.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as s:
                    s.recv(1)
            except (ssl.SSLError, OSError):
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    client = ssl.create_default_context(cafile=str(made["ca"]))
    for name in ("127.0.0.1", "localhost"):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with client.wrap_socket(raw, server_hostname=name) as s:
                assert s.getpeercert()["subjectAltName"]
                s.send(b"x")
    srv.close()
    from cryptography import x509
    cert = x509.load_pem_x509_certificate(made["cert"].read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "192.0.2.7" in {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    ca = x509.load_pem_x509_certificate(made["ca"].read_bytes())
    nc = ca.extensions.get_extension_for_class(x509.NameConstraints).value
    assert "localhost" in {n.value for n in nc.permitted_subtrees}


def test_join_urls_and_qr(tmp_path):
    from webgpu_trainer.host.classroom import tls
    assert tls.base_urls("127.0.0.1", 8443, True) == ["https://127.0.0.1:8443"]
    assert all(u.startswith("http://") for u in tls.base_urls("0.0.0.0", 80, False))
    svg = tls.qr_svg("https://192.0.2.7:8443/?class=abc")
    assert svg.startswith("<svg") and "path" in svg
    assert "█" in tls.qr_terminal("https://192.0.2.7:8443/?class=abc")
    app = make_app(tmp_path)
    with TestClient(app) as c:
        sid = new_session(c, app)
        s = c.get(f"/api/classroom/sessions/{sid}", headers=teacher(app)).json()
        assert s["join"][0]["url"] == f"https://192.0.2.7:8443/?class={sid}"
        assert len(sid) >= 16  # 96 random bits


def test_quiet_student_reads_disconnected_and_csv_is_safe(tmp_path):
    from webgpu_trainer.host.classroom.store import DISCONNECTED_AFTER_S
    app = make_app(tmp_path)
    store = app.state.classroom.store
    with TestClient(app) as c:
        sid = new_session(c, app)
        eve = join(c, sid, "=HYPERLINK(\"x\")")
        c.post("/api/classroom/report", headers=eve, json={"run": 1, "config": run_config(),
                                                            "points": [[1, 2.0, 0.1]]})
        import time
        later = time.time() + DISCONNECTED_AFTER_S + 1
        assert [r["state"] for r in store.roster(sid)] == ["training"]
        assert [r["state"] for r in store.roster(sid, now=later)] == ["disconnected"]
        text = c.get(f"/api/classroom/sessions/{sid}/results.csv", headers=teacher(app)).text
        assert "'=HYPERLINK" in text  # a spreadsheet shows it, never runs it


def test_two_worker_processes_on_postgresql(tmp_path, postgres):
    """``classroom --workers 2 --db postgresql...``: two server processes behind one port
    (uvicorn's factory, ``app.from_env``); a class's requests on fresh connections land on
    both and the teacher sees one consistent roster."""
    import subprocess
    import sys

    import httpx
    import sqlalchemy
    from classroom_helpers import REPO, _free_port, models_dir, wait_until
    eng = sqlalchemy.create_engine(postgres.url, isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        c.exec_driver_sql("CREATE DATABASE workers")
    eng.dispose()
    url = postgres.url.rsplit("/", 1)[0] + "/workers"
    port, token = _free_port(), "workers-test-token-0123456789abcdef"
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "webgpu_trainer.cli.main", "classroom", "--port", str(port),
         "--workers", "2", "--db", url, "--state-dir", str(tmp_path / "state"),
         "--models-dir", str(models_dir(tmp_path)), "--teacher-token", token,
         "--data-dir", str(default_cache_dir())],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    base, T = f"https://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}

    def get(path, **kw):  # a new connection each time: the kernel spreads them
        return httpx.request(kw.pop("method", "GET"), base + path, verify=False, timeout=20,
                             **kw)
    try:
        def up():
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
            try:
                return get("/api/classroom/info", headers=T).status_code == 200
            except httpx.HTTPError:
                return False
        wait_until(up, 120, "two workers")
        import psutil
        assert len(psutil.Process(proc.pid).children(recursive=True)) >= 2
        sid = get("/api/classroom/sessions", method="POST", headers=T, json={
            "name": "w", "config": {"model": "mlp-ts17"}, "pinned": ["model"]}).json()["id"]
        keys = [get(f"/api/classroom/join/{sid}", method="POST", json={"name": f"s{i}"})
                .json()["key"] for i in range(6)]
        for k in keys:
            for step in range(1, 4):
                r = get("/api/classroom/report", method="POST", headers={"X-Student-Key": k},
                        json={"run": 1, "config": {"model": "mlp-ts17"},
                              "points": [[step, 2.0, 0.5]]})
                assert r.status_code == 200, r.text
        roster = get(f"/api/classroom/sessions/{sid}/roster", headers=T).json()
        assert sorted(r["points"] for r in roster) == [3] * 6
    finally:
        proc.terminate()
        proc.wait(timeout=30)

"""Classroom serving (issue 16): the MNIST shards gzipped for clients that accept it, the
dashboard stream woken by writes instead of reading the database every second, and the
teacher token kept only as a salted hash."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil

import pytest
from classroom_helpers import REPO, wait_until
from starlette.testclient import TestClient
from webgpu_trainer.host.data import default_cache_dir

MNIST = default_cache_dir()


@pytest.fixture
def test_split(tmp_path):
    """A data folder with MNIST's manifest and its test split only (7.8 MB of images)."""
    if not (MNIST / "manifest.json").is_file():
        pytest.fail("MNIST cache missing: run `./run setup` (webgpu-trainer data)")
    data = tmp_path / "mnist"
    data.mkdir()
    manifest = json.loads((MNIST / "manifest.json").read_text())
    shutil.copy(MNIST / "manifest.json", data / "manifest.json")
    for kind in ("images", "labels"):
        shutil.copy(MNIST / manifest["splits"]["test"][kind]["file"], data)
    return data, manifest["splits"]["test"]


def _app(tmp_path, data):
    from webgpu_trainer.host.server import create_app
    return create_app(REPO, data_dir=data, wheels_dir=tmp_path / "wheels",
                      uploads_dir=tmp_path / "uploads")


def test_shards_gzipped_when_accepted(tmp_path, test_split):
    """``Accept-Encoding: gzip``: the gzip copy, ``Content-Encoding: gzip``, ``Vary``, its own
    ETag; the bytes decode to the raw shard (sha256 of the manifest). Without gzip, or with a
    Range, the raw bytes as before; a 304 per encoding's ETag."""
    data, split = test_split
    ent = split["images"]
    raw = (data / ent["file"]).read_bytes()
    url = f"/data/mnist/{ent['file']}"
    with TestClient(_app(tmp_path, data)) as c:
        # the first request gets the raw shard at once; the copy is made meanwhile
        first = c.get(url, headers={"Accept-Encoding": "gzip"})
        assert "content-encoding" not in first.headers and first.content == raw
        wait_until(lambda: c.head(url, headers={"Accept-Encoding": "gzip"}).headers.get(
            "content-encoding") == "gzip", 120, "the gzip copy")
        with c.stream("GET", url, headers={"Accept-Encoding": "gzip, deflate, br"}) as r:
            wire = b"".join(r.iter_raw())
            headers = r.headers
        assert r.status_code == 200
        assert headers["content-encoding"] == "gzip" and headers["vary"] == "Accept-Encoding"
        assert int(headers["content-length"]) == len(wire) < len(raw) // 3
        assert hashlib.sha256(gzip.decompress(wire)).hexdigest() == ent["sha256"]
        assert headers["etag"] == f'"{ent["sha256"][:32]}-gzip"'
        assert "immutable" in headers["cache-control"]
        r = c.get(url, headers={"Accept-Encoding": "gzip"})  # httpx decodes, as fetch() does
        assert r.content == raw
        plain = c.get(url, headers={"Accept-Encoding": "identity"})
        assert "content-encoding" not in plain.headers and plain.content == raw
        assert plain.headers["vary"] == "Accept-Encoding"
        assert plain.headers["etag"] == f'"{ent["sha256"][:32]}"'
        # a Range is of the raw bytes, whatever the client accepts
        r = c.get(url, headers={"Accept-Encoding": "gzip", "Range": "bytes=784-1567"})
        assert r.status_code == 206 and "content-encoding" not in r.headers
        assert r.content == raw[784:1568]
        # revalidation: each encoding's own ETag
        r = c.get(url, headers={"Accept-Encoding": "gzip", "If-None-Match": headers["etag"]})
        assert r.status_code == 304 and r.content == b""
        assert r.headers["etag"] == headers["etag"] and r.headers["vary"] == "Accept-Encoding"
        r = c.get(url, headers={"Accept-Encoding": "identity",
                                "If-None-Match": headers["etag"]})
        assert r.status_code == 200 and r.content == raw
        r = c.head(url, headers={"Accept-Encoding": "gzip"})
        assert r.headers["content-length"] == str(len(wire))


def test_bad_gzip_copy_is_replaced(tmp_path, test_split):
    """A gzip copy that is not the shard (garbage written later, so newer than the shard) is
    rebuilt before anything is served from it; the shard itself is untouched."""
    data, split = test_split
    ent = split["labels"]
    raw = (data / ent["file"]).read_bytes()
    copy = data / (ent["file"] + ".gz")
    copy.write_bytes(gzip.compress(b"\x07" * len(raw)))  # valid gzip, wrong bytes
    url, gzipped = f"/data/mnist/{ent['file']}", {"Accept-Encoding": "gzip"}
    with TestClient(_app(tmp_path, data)) as c:
        assert c.get(url, headers=gzipped).content == raw  # raw while the copy is checked
        wait_until(lambda: c.head(url, headers=gzipped).headers.get("content-encoding")
                   == "gzip", 60, "the gzip copy")
        with c.stream("GET", url, headers=gzipped) as r:
            wire = b"".join(r.iter_raw())
    assert r.headers["content-encoding"] == "gzip"
    assert gzip.decompress(wire) == raw and gzip.decompress(copy.read_bytes()) == raw
    assert (data / ent["file"]).read_bytes() == raw


class _Served:
    """``app`` served by uvicorn on a free port in a thread of this process (a real socket:
    the stream arrives event by event)."""

    def __init__(self, app):
        import threading

        import uvicorn
        from classroom_helpers import _free_port
        self.port = _free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="warning", lifespan="off",
                                                    timeout_graceful_shutdown=1))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        import time
        self.thread.start()
        t0 = time.monotonic()
        while not self.server.started:
            assert time.monotonic() - t0 < 30, "uvicorn did not start"
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _events(url: str, headers: dict, out):
    """Read the SSE stream at ``url`` into ``out`` (a queue) as ``(monotonic time, event,
    data)`` until the server closes it."""
    import time

    import httpx
    try:
        with httpx.stream("GET", url, headers=headers, timeout=30) as r:
            event = None
            for line in r.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    out.put((time.monotonic(), event, json.loads(line[6:])))
    except httpx.HTTPError:  # the server stopped at the end of the test
        pass


def test_dashboard_woken_by_writes_and_idle_without_queries(tmp_path):
    """A report wakes the live stream at once (well before the next slow poll, 5 s after the
    last read); an idle stream does not read the database every second (SQLAlchemy's
    statements counted), only at the slow poll."""
    import queue
    import threading
    import time

    import httpx
    from classroom_helpers import make_app, run_config, teacher
    from sqlalchemy import event
    from webgpu_trainer.host.classroom import teacher as teacher_mod
    assert teacher_mod.SLOW_POLL_S >= 5.0
    app = make_app(tmp_path)
    statements = []
    event.listen(app.state.classroom.store.engine, "before_cursor_execute",
                 lambda *a: statements.append(time.monotonic()))
    with _Served(app) as base:
        r = httpx.post(f"{base}/api/classroom/sessions", headers=teacher(app), json={
            "name": "5B", "config": {"model": "mlp-ts17"}, "pinned": ["model"]}, timeout=60)
        sid = r.json()["id"]
        r = httpx.post(f"{base}/api/classroom/join/{sid}", json={"name": "Ada"}, timeout=60)
        ada = {"X-Student-Key": r.json()["key"]}
        got: queue.Queue = queue.Queue()
        threading.Thread(target=_events, daemon=True, args=(
            f"{base}/api/classroom/sessions/{sid}/events", teacher(app), got)).start()
        _, kind, rows = got.get(timeout=30)
        assert kind == "roster" and rows[0]["state"] == "joined"
        time.sleep(1.5)  # past the first read and its TICK_S
        idle_from = time.monotonic()
        time.sleep(3.0)
        idle = [t for t in statements if t >= idle_from]
        assert idle == [], f"{len(idle)} statements while nobody wrote (3 s)"
        # the slow poll (how writes of other processes are seen) comes 5 s after the read
        wait_until(lambda: [t for t in statements if t >= idle_from], 10, "the slow poll",
                   every=0.05)
        time.sleep(1.2)  # past TICK_S; the next slow poll is almost 4 s away
        r = httpx.post(f"{base}/api/classroom/report", headers=ada, json={
            "run": 1, "config": run_config(), "state": "training",
            "points": [[1, 2.3, 0.1], [2, 2.2, 0.2]]}, timeout=60)
        assert r.status_code == 200, r.text
        t_post = time.monotonic()
        seen = {}
        while {"roster", "points"} - seen.keys():
            t, kind, data = got.get(timeout=10)
            seen[kind] = (t, data)
        assert seen["roster"][1][0]["state"] == "training"
        assert [p[0] for p in seen["points"][1][ada["X-Student-Key"].split(".")[0]]
                ["points"]] == [1, 2]
        assert seen["roster"][0] - t_post < 2.0, "the write did not wake the stream"


def _db_bytes(state) -> bytes:
    """The SQLite database as on disk: the main file and its WAL."""
    return b"".join(p.read_bytes() for p in sorted(state.glob("classroom.db*")))


def test_teacher_token_stored_as_hash_only(tmp_path):
    """The database holds a salted scrypt hash of the teacher token, not the token (not in any
    row, not in the file's bytes); the token works after a restart that does not know it;
    ``renew`` makes a new one and the old one stops working."""
    from classroom_helpers import make_app
    from webgpu_trainer.host.classroom.store import Store
    given = "given-token-for-this-test-0123456789"
    app = make_app(tmp_path, token=given)
    stored = app.state.classroom.teacher_hash
    assert stored.startswith("scrypt$16384$8$1$") and given not in stored
    app.state.classroom.store.close()
    assert given.encode() not in _db_bytes(tmp_path / "state")
    app = make_app(tmp_path)  # a restart without the token
    assert app.state.classroom.teacher_token is None
    assert app.state.classroom.teacher_hash == stored
    with TestClient(app) as c:
        assert c.get("/api/classroom/sessions",
                     headers={"Authorization": f"Bearer {given}"}).status_code == 200
    app.state.classroom.store.close()
    store = Store(app.state.classroom.store.url, tmp_path / "state")
    fresh = store.teacher_token(renew=True)
    store.close()
    assert len(fresh) == 43 and fresh != given
    app = make_app(tmp_path)
    with TestClient(app) as c:
        for token, code in ((given, 403), (fresh, 200)):
            r = c.get("/api/classroom/sessions", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == code, r.text
    assert fresh.encode() not in _db_bytes(tmp_path / "state")


def test_plain_token_of_an_older_database_is_migrated(tmp_path):
    """A database from before (``settings.teacher_token`` holding the token itself) is
    rewritten to the hash when opened; the token keeps working; its text is gone from the
    rows and from the file."""
    from classroom_helpers import make_app
    from sqlalchemy import create_engine, text
    make_app(tmp_path).state.classroom.store.close()
    old = "old-plain-teacher-token-0123456789abcdef"
    url = f"sqlite:///{tmp_path / 'state' / 'classroom.db'}"
    eng = create_engine(url)
    with eng.begin() as c:
        c.execute(text("UPDATE settings SET value = :v WHERE key = 'teacher_token'"),
                  {"v": old})
    eng.dispose()
    assert old.encode() in _db_bytes(tmp_path / "state")
    app = make_app(tmp_path)
    assert app.state.classroom.teacher_token == old  # known once more: printed at this start
    with TestClient(app) as c:
        assert c.get("/api/classroom/sessions",
                     headers={"Authorization": f"Bearer {old}"}).status_code == 200
    app.state.classroom.store.close()
    eng = create_engine(url)
    with eng.connect() as c:
        rows = [tuple(r) for r in c.execute(text("SELECT key, value FROM settings"))]
    eng.dispose()
    assert [k for k, _ in rows] == ["teacher_token"]
    assert rows[0][1].startswith("scrypt$") and old not in rows[0][1]
    assert old.encode() not in _db_bytes(tmp_path / "state")


def test_plain_http_on_the_https_port_is_redirected(tmp_path):
    """``http://`` to the classroom's HTTPS port (a student typed the address without
    https://): a 301 to the same address over https and a sentence, not a dropped connection;
    the same port still serves HTTPS."""
    import socket
    import ssl
    import threading
    import time

    import httpx
    import uvicorn
    from classroom_helpers import _free_port, make_app, teacher
    from webgpu_trainer.host.classroom import https_only, tls
    made = tls.ensure_certificate(tmp_path / "tls", ["127.0.0.1"])
    app, port = make_app(tmp_path), _free_port()
    srv = https_only.server(uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="off",
        ssl_certfile=str(made["cert"]), ssl_keyfile=str(made["key"])))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: srv.started, 30, "the server")
        r = httpx.get(f"http://127.0.0.1:{port}/?class=abc", timeout=20)
        assert r.status_code == 301
        assert r.headers["location"] == f"https://127.0.0.1:{port}/?class=abc"
        assert r.text == f"This classroom server speaks HTTPS only: open " \
                         f"https://127.0.0.1:{port}/?class=abc\n"
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:  # no Host
            s.sendall(b"GET /teacher HTTP/1.0\r\n\r\n")
            time.sleep(0.5)
            head = s.recv(4096)
        assert head.startswith(b"HTTP/1.1 301 ") and \
            f"Location: https://127.0.0.1:{port}/teacher\r\n".encode() in head
        https_only.SILENT_S = 0.5  # a connection that says nothing is closed, not kept
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
                assert s.recv(10) == b""
        finally:
            https_only.SILENT_S = 20.0
        r = httpx.get(f"https://127.0.0.1:{port}/api/classroom/info", headers=teacher(app),
                      verify=ssl.create_default_context(cafile=str(made["ca"])), timeout=20)
        assert r.status_code == 200 and r.url.scheme == "https"
    finally:
        srv.should_exit = True
        thread.join(timeout=10)


def test_restart_without_the_token_says_how_to_get_a_link(capsys):
    """A start that does not know the token (only its hash is stored) prints no link but
    that the first one still works and how to make a new one."""
    from webgpu_trainer.cli.classroom import _print_start
    sess = {"name": "Class", "id": "abc123"}
    tls = {"on": True, "ca": None, "ca_sha256": None}
    _print_start(["https://192.0.2.7:8443"], None, tls, sess, False)
    out = capsys.readouterr().out
    assert "#token=" not in out and "the link printed at the first start still works" in out
    assert "Restart with --new-teacher-token for a new link" in out
    _print_start(["https://192.0.2.7:8443"], "https://127.0.0.1:8443/teacher#token=t0k", tls,
                 sess, False)
    assert "    https://127.0.0.1:8443/teacher#token=t0k\n" in capsys.readouterr().out

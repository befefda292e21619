"""Helpers of the classroom tests: an app on a temporary state folder with the tiny MLP model,
a PostgreSQL server started for the test, and one class's worth of API calls."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from webgpu_trainer.host.data import default_cache_dir

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "fixtures" / "models" / "mlp-ts17.onnx"


def models_dir(tmp: Path) -> Path:
    """A models folder holding only the tiny MLP (the page lists every model it finds)."""
    d = tmp / "models"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(TINY, d / "mlp-ts17.onnx")
    return d


def make_app(tmp: Path, db_url: str | None = None, token: str | None = None):
    from webgpu_trainer.host.classroom.app import create_classroom_app
    return create_classroom_app(REPO, models_dir=models_dir(tmp),
                                data_dir=default_cache_dir(), wheels_dir=tmp / "wheels",
                                state_dir=tmp / "state",
                                db_url=db_url, base_urls=["https://192.0.2.7:8443"],
                                teacher_token=token, uploads_dir=tmp / "uploads")


def teacher(app) -> dict:
    return {"Authorization": f"Bearer {app.state.classroom.teacher_token}"}


def new_session(client, app, **config) -> str:
    cfg = {"model": "mlp-ts17", "max_steps": 5, "eval_images": 100, **config}
    r = client.post("/api/classroom/sessions", headers=teacher(app),
                    json={"name": "5B", "config": cfg, "pinned": ["model", "lr", "seed"]})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def join(client, sid: str, name: str) -> dict:
    r = client.post(f"/api/classroom/join/{sid}", json={"name": name})
    assert r.status_code == 200, r.text
    return {"X-Student-Key": r.json()["key"]}


def run_config(**over) -> dict:
    return {"model": "mlp-ts17", "lr": 0.001, "seed": 0, "max_steps": 5, "eval_images": 100,
            **over}


def train(client, student: dict, acc: float, steps: int = 5, run: int = 1):
    """One whole run reported the way web/classroom.js does: config, points, result."""
    r = client.post("/api/classroom/report", headers=student, json={
        "run": run, "adapter": "test GPU", "config": run_config(), "state": "training",
        "progress": {"step": 2, "total_steps": steps, "epoch": 1, "epochs": 1,
                     "images_per_s": 123.0},
        "points": [[s, 2.3 - 0.1 * s, 0.1 * s] for s in range(1, 3)]})
    assert r.status_code == 200, r.text
    r = client.post("/api/classroom/report", headers=student, json={
        "run": run, "points": [[s, 2.3 - 0.1 * s, 0.1 * s] for s in range(3, steps + 1)],
        "evals": [[1, 1.5, acc]],
        "result": {"test_acc": acc, "test_loss": 1.5, "eval_images": 100, "steps": steps}})
    assert r.status_code == 200, r.text
    return r.json()


# ------------------------------------------------------------------------- PostgreSQL

def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    hits = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return hits[-1] if hits else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """A throw-away PostgreSQL cluster: initdb into a temporary folder, pg_ctl start on a free
    loopback port, as the ``postgres`` user when run as root (initdb refuses root). ``url``:
    the SQLAlchemy URL of its ``postgres`` database (trust authentication, loopback only)."""

    def __init__(self):
        initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
        if not initdb or not pg_ctl:
            raise RuntimeError("PostgreSQL's initdb/pg_ctl not found: install the Debian "
                               "package postgresql (./run installs it)")
        self.dir = Path(tempfile.mkdtemp(prefix="wgt-pg-"))
        self.port = _free_port()
        self.run_as = []
        user = "postgres" if os.geteuid() != 0 else None
        if os.geteuid() == 0:
            self.run_as = ["runuser", "-u", "postgres", "--"]
            user = "postgres"
            shutil.chown(self.dir, "postgres")
        else:
            import getpass
            user = getpass.getuser()
        data = self.dir / "data"
        self._run([initdb, "-D", str(data), "-U", user, "-A", "trust", "--no-sync",
                   "-E", "UTF8"])
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run([pg_ctl, "-D", str(data), "-o", opts, "-l", str(self.dir / "log"), "-w",
                   "-t", "60", "start"])
        self.pg_ctl, self.data = pg_ctl, data
        self.url = f"postgresql+psycopg://{user}@127.0.0.1:{self.port}/postgres"

    def _run(self, cmd):
        out = subprocess.run(self.run_as + cmd, capture_output=True, text=True, timeout=120)
        if out.returncode:
            log = (self.dir / "log").read_text() if (self.dir / "log").exists() else ""
            raise RuntimeError(f"{' '.join(cmd[:2])} failed: {out.stderr or out.stdout}{log}")

    def stop(self):
        try:
            self._run([self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop"])
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def wait_until(fn, timeout: float, what: str, every: float = 0.5):
    """Poll ``fn()`` until it returns something truthy; AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")

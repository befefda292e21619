"""The classroom database's tables (SQLAlchemy Core) and engine: SQLite in WAL mode with
``synchronous=FULL`` and ``BEGIN IMMEDIATE`` for writes, or PostgreSQL; limits per row kind."""

from __future__ import annotations

import hashlib
import math
import secrets
from pathlib import Path

from sqlalchemy import (JSON, Boolean, Column, Float, ForeignKey, Index, Integer, MetaData,
                        String, Table, Text, create_engine, event)
from sqlalchemy.engine import Engine, make_url

MAX_POINTS_PER_RUN = 20000   # loss points kept per run (a run reports every N steps)
MAX_RUNS_PER_STUDENT = 50
MAX_STUDENTS_PER_SESSION = 500
# no post for this long: a live state reads "disconnected". Chrome wakes timers of a tab hidden
# for 5 minutes once a minute, so a page in the background reports only that often.
DISCONNECTED_AFTER_S = 75.0

metadata = MetaData()

settings = Table(
    "settings", metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False))

sessions = Table(
    "sessions", metadata,
    Column("id", String(32), primary_key=True),
    Column("name", String(80), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("config", JSON, nullable=False),      # the run config the class trains with
    Column("pinned", JSON, nullable=False),      # the config keys students may not change
    Column("open", Boolean, nullable=False, default=True))

students = Table(
    "students", metadata,
    Column("id", String(32), primary_key=True),
    Column("session_id", String(32), ForeignKey("sessions.id"), nullable=False, index=True),
    Column("key_hash", String(64), nullable=False),   # sha256 of the student's secret key
    Column("name", String(40), nullable=False),
    Column("joined_at", Float, nullable=False),
    Column("last_seen", Float, nullable=False),
    Column("adapter", String(200)),
    Column("client_state", String(16)),             # the page: ready | no_webgpu | ...
    Column("last_run", Integer, nullable=False, default=0))

runs = Table(
    "runs", metadata,
    Column("student_id", String(32), ForeignKey("students.id"), primary_key=True),
    Column("run", Integer, primary_key=True),
    Column("session_id", String(32), nullable=False),
    Column("state", String(16), nullable=False),   # training | finished | stopped | error
    Column("config", JSON),
    Column("started_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("finished_at", Float),
    Column("step", Integer, nullable=False, default=0),
    Column("total_steps", Integer),
    Column("epoch", Integer),
    Column("epochs", Integer),
    Column("images_per_s", Float),
    Column("loss", Float),
    Column("acc", Float),
    Column("val_loss", Float),
    Column("val_acc", Float),
    Column("test_acc", Float),
    Column("test_loss", Float),
    Column("eval_images", Integer),
    Column("error", Text),
    Column("verdict", String(16)),  # train/verdict.py: ok, diverged, chance, stopped
    Column("reason", Text),          # the student's page's words for it
    Column("points", Integer, nullable=False, default=0),
    Column("model_sha256", String(64)),
    Column("model_bytes", Integer),
    Index("ix_runs_session", "session_id"))

points = Table(
    "points", metadata,
    Column("student_id", String(32), primary_key=True),
    Column("run", Integer, primary_key=True),
    Column("step", Integer, primary_key=True),
    Column("session_id", String(32), nullable=False),
    Column("t", Float, nullable=False),            # server time of the insert (live updates)
    Column("loss", Float),
    Column("acc", Float),
    Index("ix_points_session_t", "session_id", "t"))

evals = Table(
    "evals", metadata,
    Column("student_id", String(32), primary_key=True),
    Column("run", Integer, primary_key=True),
    Column("epoch", Integer, primary_key=True),
    Column("val_loss", Float),
    Column("val_acc", Float))

LIVE = ("joined", "training")  # states that turn "disconnected" when the client goes quiet


class NotFound(LookupError):
    """An unknown session, student or run (the routes answer 404)."""


class Conflict(ValueError):
    """A write the current state does not allow (the routes answer 409)."""


def new_id(nbytes: int = 12) -> str:
    """An unguessable URL-safe id (``secrets``; 12 bytes: 96 bits, 16 characters)."""
    return secrets.token_urlsafe(nbytes)


def _hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _finite(x):
    """A float, or None for None / NaN / Inf (JSON and SQL have no NaN)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{Path(path).resolve()}"


def make_engine(url: str) -> Engine:
    """An engine for ``url``. SQLite: WAL, synchronous=FULL, foreign keys, a 10 s busy wait,
    and ``BEGIN IMMEDIATE`` for writes (no lock upgrade that could fail under concurrency)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": 10, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # SQLAlchemy's begin event says BEGIN, not pysqlite
        cur = dbapi_conn.cursor()
        for pragma in ("journal_mode=WAL", "synchronous=FULL", "foreign_keys=ON",
                       "busy_timeout=10000"):
            cur.execute(f"PRAGMA {pragma}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        write = conn.get_execution_options().get("write")
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine

"""The classroom's durable store: sessions, students, their runs, metrics and final models.

SQLAlchemy Core over SQLite (the default: ``<state>/classroom.db`` in WAL mode with
``synchronous=FULL``, so a committed write survives a crash or a power cut) or PostgreSQL
(``--db postgresql+psycopg://...``); the same statements run on both. Every write is one
transaction and a route answers only after it committed: what a client saw acknowledged is on
disk. Final models are files named by their sha256 (``models/<sha256>.onnx``, written
atomically before the row that names them).

Nothing here keeps state between calls besides the engine, so several server processes can
share one database. The methods are blocking: the routes call them through a thread pool.

Example::

    store = Store("sqlite:////tmp/c/classroom.db", Path("/tmp/c"))
    sid = store.create_session("5B", {"model": "seednet", "lr": 0.001}, ["model", "lr"])
    sid, key = store.join(sid, "Ada")
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from pathlib import Path

from sqlalchemy import and_, func, inspect, select, update

from .schema import (DISCONNECTED_AFTER_S, LIVE, MAX_POINTS_PER_RUN, MAX_RUNS_PER_STUDENT,
                     MAX_STUDENTS_PER_SESSION, Conflict, NotFound, _finite, _hash_key,
                     evals, make_engine, metadata, new_id, points, runs, sessions, settings,
                     sqlite_url, students)
from .tokens import hash_token, is_hash, new_token

__all__ = ["Store", "NotFound", "Conflict", "sqlite_url", "DISCONNECTED_AFTER_S"]

class Store:
    """Sessions, students, runs, points, evals and models. ``url``: a SQLAlchemy URL;
    ``state_dir``: where model files go (``models/<sha256>.onnx``)."""

    def __init__(self, url: str, state_dir: Path):
        self.url = url
        self.engine = make_engine(url)
        self.dialect = self.engine.dialect.name
        self.models_dir = Path(state_dir) / "models"
        self.models_dir.mkdir(parents=True, exist_ok=True)
        metadata.create_all(self.engine)
        self._add_columns()

    def _add_columns(self):
        """Columns added since a database was made (``runs.verdict``, ``runs.reason``)."""
        have = {c["name"] for c in inspect(self.engine).get_columns("runs")}
        with self._write() as c, c.begin():
            for col in ("verdict", "reason"):
                if col not in have:
                    kind = runs.c[col].type.compile(dialect=self.engine.dialect)
                    c.exec_driver_sql(f"ALTER TABLE runs ADD COLUMN {col} {kind}")

    def close(self):
        self.engine.dispose()

    # -------------------------------------------------------------- transactions
    def _write(self):
        """A connection in one write transaction: ``with self._write() as c: ...``."""
        return self.engine.connect().execution_options(write=True)

    def _insert(self, table):
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        elif self.dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert
        else:
            raise RuntimeError(f"database {self.dialect!r}: use SQLite or PostgreSQL")
        return insert(table)

    # -------------------------------------------------------------- settings
    def teacher_token(self, given: str | None = None, renew: bool = False) -> str | None:
        """Set up the teacher's token; only its salted hash is stored (``tokens``), shared by
        every server process on this database. Returns the token when this call knows it:
        ``given`` (stored), a new one (``renew``, or the first start) or the plain token of
        an older database (then replaced by its hash); None when the stored hash is kept."""
        with self._write() as c, c.begin():
            if self.dialect == "sqlite":  # the replaced plain token is overwritten, not freed
                c.exec_driver_sql("PRAGMA secure_delete = ON")
            old = c.execute(select(settings.c.value)
                            .where(settings.c.key == "teacher_token")).scalar_one_or_none()
            token = given or (new_token() if renew or old is None else None)
            if token is None and not is_hash(old):
                token = old  # migrate: the plain token of an older database
            if token is not None:
                hashed = hash_token(token)
                c.execute(self._insert(settings).values(key="teacher_token", value=hashed)
                          .on_conflict_do_update(index_elements=["key"],
                                                 set_={"value": hashed}))
        if self.dialect == "sqlite" and token is not None:  # no old page left in the WAL
            with self.engine.connect() as c:
                c.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        return token

    def teacher_hash(self) -> str:
        """The stored hash of the teacher's token (``teacher_token`` made it)."""
        with self.engine.connect() as c:
            return c.execute(select(settings.c.value)
                             .where(settings.c.key == "teacher_token")).scalar_one()

    # -------------------------------------------------------------- sessions
    def create_session(self, name: str, config: dict, pinned: list) -> str:
        sid = new_id()
        with self._write() as c, c.begin():
            c.execute(sessions.insert().values(id=sid, name=name, created_at=time.time(),
                                               config=config, pinned=sorted(set(pinned)),
                                               open=True))
        return sid

    def update_session(self, sid: str, **values) -> dict:
        """Change ``name``, ``config``, ``pinned`` or ``open`` of a session."""
        keep = {k: v for k, v in values.items() if k in ("name", "config", "pinned", "open")}
        with self._write() as c, c.begin():
            if c.execute(update(sessions).where(sessions.c.id == sid).values(**keep)
                         ).rowcount != 1:
                raise NotFound(f"unknown session {sid!r}")
        return self.session(sid)

    def session(self, sid: str) -> dict:
        with self.engine.connect() as c:
            row = c.execute(select(sessions).where(sessions.c.id == sid)).mappings().first()
        if row is None:
            raise NotFound(f"unknown session {sid!r}")
        return dict(row)

    def sessions(self) -> list[dict]:
        """Every session, newest first, with its number of students."""
        n = (select(students.c.session_id, func.count().label("students"))
             .group_by(students.c.session_id).subquery())
        stmt = (select(sessions, func.coalesce(n.c.students, 0).label("students"))
                .outerjoin(n, n.c.session_id == sessions.c.id)
                .order_by(sessions.c.created_at.desc()))
        with self.engine.connect() as c:
            return [dict(r) for r in c.execute(stmt).mappings()]

    # -------------------------------------------------------------- students
    def join(self, sid: str, name: str) -> tuple[str, str]:
        """A new student of session ``sid``: ``(student id, secret key)``. The key is shown
        once (only its sha256 is stored); it authorises the student's own posts."""
        student, key, now = new_id(), secrets.token_urlsafe(24), time.time()
        with self._write() as c, c.begin():
            row = c.execute(select(sessions.c.open).where(sessions.c.id == sid)).first()
            if row is None:
                raise NotFound(f"unknown session {sid!r}")
            if not row.open:
                raise Conflict("this class session is closed; ask your teacher for the new "
                               "link")
            count = c.execute(select(func.count()).select_from(students)
                              .where(students.c.session_id == sid)).scalar_one()
            if count >= MAX_STUDENTS_PER_SESSION:
                raise Conflict(f"this session is full ({MAX_STUDENTS_PER_SESSION} students)")
            c.execute(students.insert().values(id=student, session_id=sid,
                                               key_hash=_hash_key(key), name=name,
                                               joined_at=now, last_seen=now, last_run=0))
        return student, key

    def check_student(self, student: str, key: str) -> dict:
        """The student row when ``key`` is theirs (constant-time compare); NotFound else (the
        same answer for an unknown id and a wrong key)."""
        with self.engine.connect() as c:
            row = c.execute(select(students).where(students.c.id == student)).mappings().first()
        if row is None or not hmac.compare_digest(row["key_hash"], _hash_key(key or "")):
            raise NotFound("unknown student or wrong key")
        return dict(row)

    def report(self, student: dict, batch: dict) -> dict:
        """Store one metrics batch of ``student`` (a ``check_student`` row), in one
        transaction. ``batch`` (validated by the route): adapter, run, state, config,
        progress {step, total_steps, epoch, epochs, images_per_s}, points [[step, loss, acc]],
        evals [[epoch, val_loss, val_acc]], result {test_acc, test_loss, eval_images, steps,
        stopped}, error. Points and evals already stored are ignored (a retried batch is
        harmless). Returns ``{"run", "points"}`` (points stored in the run)."""
        now, sid, st = time.time(), student["session_id"], student["id"]
        run_no = batch.get("run")
        with self._write() as c, c.begin():
            values = {"last_seen": now}
            if batch.get("adapter"):
                values["adapter"] = batch["adapter"][:200]
            if batch.get("state"):
                values["client_state"] = batch["state"]
            if run_no:
                values["last_run"] = max(run_no, student["last_run"])
            c.execute(update(students).where(students.c.id == st).values(**values))
            if not run_no:
                return {"run": None, "points": 0}
            run = c.execute(select(runs).where(and_(runs.c.student_id == st,
                                                    runs.c.run == run_no))).mappings().first()
            if run is None:
                if run_no > MAX_RUNS_PER_STUDENT:
                    raise Conflict(f"at most {MAX_RUNS_PER_STUDENT} runs per student")
                c.execute(runs.insert().values(student_id=st, run=run_no, session_id=sid,
                                               state="training", config=batch.get("config"),
                                               started_at=now, updated_at=now, step=0,
                                               points=0))
                run = {"state": "training", "points": 0, "step": 0}
            upd = {"updated_at": now}
            prog = batch.get("progress") or {}
            for k in ("step", "total_steps", "epoch", "epochs"):
                if prog.get(k) is not None:
                    upd[k] = int(prog[k])
            if prog.get("images_per_s") is not None:
                upd["images_per_s"] = _finite(prog["images_per_s"])
            pts = batch.get("points") or []
            room = max(0, MAX_POINTS_PER_RUN - run["points"])
            fresh = pts[:room]
            if fresh:
                ins = self._insert(points).on_conflict_do_nothing(
                    index_elements=["student_id", "run", "step"])
                c.execute(ins, [{"student_id": st, "run": run_no, "step": int(s),
                                 "session_id": sid, "t": now, "loss": _finite(lo),
                                 "acc": _finite(a)} for s, lo, a in fresh])
                # counted, not summed from rowcount (drivers report executemany differently)
                upd["points"] = c.execute(select(func.count()).select_from(points).where(and_(
                    points.c.student_id == st, points.c.run == run_no))).scalar_one()
                last = max(fresh, key=lambda p: p[0])
                if last[0] >= (run["step"] or 0):
                    upd["loss"], upd["acc"] = _finite(last[1]), _finite(last[2])
                    upd["step"] = max(int(last[0]), upd.get("step", 0))
            ev = batch.get("evals") or []
            if ev:
                ins = self._insert(evals).on_conflict_do_nothing(
                    index_elements=["student_id", "run", "epoch"])
                c.execute(ins, [{"student_id": st, "run": run_no, "epoch": int(e),
                                 "val_loss": _finite(vl), "val_acc": _finite(va)}
                                for e, vl, va in ev])
                e, vl, va = max(ev, key=lambda x: x[0])
                upd["val_loss"], upd["val_acc"] = _finite(vl), _finite(va)
            res = batch.get("result")
            if res and run["state"] == "training":
                upd.update(state="stopped" if res.get("stopped") else "finished",
                           finished_at=now, test_acc=_finite(res.get("test_acc")),
                           test_loss=_finite(res.get("test_loss")),
                           eval_images=res.get("eval_images"), verdict=res.get("verdict"),
                           reason=res.get("reason"))
                if res.get("steps") is not None:
                    upd["step"] = int(res["steps"])
            if batch.get("error") and run["state"] == "training":
                upd.update(state="error", error=str(batch["error"])[:2000], finished_at=now)
            if batch.get("config") and run_no and run.get("config") is None:
                upd["config"] = batch["config"]
            c.execute(update(runs).where(and_(runs.c.student_id == st, runs.c.run == run_no))
                      .values(**upd))
            return {"run": run_no, "points": upd.get("points", run["points"])}

    def run(self, student_id: str, run_no: int) -> dict:
        with self.engine.connect() as c:
            row = c.execute(select(runs).where(and_(runs.c.student_id == student_id,
                                                    runs.c.run == run_no))).mappings().first()
        if row is None:
            raise NotFound(f"run {run_no} of this student is unknown (send its metrics first)")
        return dict(row)

    def attach_model(self, student: dict, run_no: int, onnx_bytes: bytes) -> str:
        """Store a run's final model under its sha256 (file first, atomically; then the row);
        returns the sha256. The run must exist and have finished or stopped."""
        from ..data import atomic_write
        digest = hashlib.sha256(onnx_bytes).hexdigest()
        path = self.models_dir / f"{digest}.onnx"
        with self.engine.connect() as c:
            run = c.execute(select(runs.c.state).where(and_(
                runs.c.student_id == student["id"], runs.c.run == run_no))).first()
        if run is None:
            raise NotFound(f"run {run_no} of this student is unknown (send its metrics first)")
        if run.state not in ("finished", "stopped"):
            raise Conflict(f"run {run_no} is {run.state}: send the final model after the run "
                           "has finished")
        if not path.is_file():
            atomic_write(path, onnx_bytes)
        with self._write() as c, c.begin():
            c.execute(update(runs).where(and_(runs.c.student_id == student["id"],
                                              runs.c.run == run_no))
                      .values(model_sha256=digest, model_bytes=len(onnx_bytes)))
        return digest

    def model_path(self, digest: str) -> Path:
        if len(digest) != 64 or any(ch not in "0123456789abcdef" for ch in digest):
            raise NotFound("bad model id")
        path = self.models_dir / f"{digest}.onnx"
        if not path.is_file():
            raise NotFound("model file missing")
        return path

    # -------------------------------------------------------------- the teacher's views
    def roster(self, sid: str, now: float | None = None) -> list[dict]:
        """One row per student of ``sid`` with their latest run, the derived ``state``
        (joined, training, finished, stopped, error, disconnected), their best finished
        run's test accuracy (``best_acc``) and that run's verdict (``best_verdict``: ok,
        chance, diverged; a warning when runs tie)."""
        now = time.time() if now is None else now
        done = and_(runs.c.session_id == sid, runs.c.state == "finished")
        best = (select(runs.c.student_id, func.max(runs.c.test_acc).label("best_acc"))
                .where(done).group_by(runs.c.student_id).subquery())
        # min(): a warning wins a tie ("chance" < "diverged" < "ok"), never a false "ok"
        verdict = (select(runs.c.student_id,
                          func.min(func.coalesce(runs.c.verdict, "ok")).label("best_verdict"))
                   .join(best, and_(best.c.student_id == runs.c.student_id,
                                    best.c.best_acc == runs.c.test_acc))
                   .where(done).group_by(runs.c.student_id).subquery())
        stmt = (select(students.c.id, students.c.name, students.c.adapter,
                       students.c.client_state, students.c.joined_at, students.c.last_seen,
                       students.c.last_run, runs, best.c.best_acc, verdict.c.best_verdict)
                .outerjoin(runs, and_(runs.c.student_id == students.c.id,
                                      runs.c.run == students.c.last_run))
                .outerjoin(best, best.c.student_id == students.c.id)
                .outerjoin(verdict, verdict.c.student_id == students.c.id)
                .where(students.c.session_id == sid)
                .order_by(students.c.joined_at))
        out = []
        with self.engine.connect() as c:
            for r in c.execute(stmt).mappings():
                row = {k: v for k, v in r.items() if k not in ("student_id", "session_id",
                                                                "config")}
                row["id"] = r["id"]
                state = r["state"] or ("no WebGPU" if r["client_state"] == "no_webgpu"
                                        else "joined")
                if state in LIVE and now - r["last_seen"] > DISCONNECTED_AFTER_S:
                    state = "disconnected"
                row["state"] = state
                out.append(row)
        return out

    def points_since(self, sid: str, t: float) -> list[tuple]:
        """``(student_id, run, step, loss, acc)`` inserted into session ``sid`` after server
        time ``t`` (the live curves; the caller filters by what it already sent)."""
        stmt = (select(points.c.student_id, points.c.run, points.c.step, points.c.loss,
                       points.c.acc)
                .where(and_(points.c.session_id == sid, points.c.t > t))
                .order_by(points.c.student_id, points.c.run, points.c.step))
        with self.engine.connect() as c:
            return [tuple(r) for r in c.execute(stmt)]

    def curves(self, sid: str) -> dict:
        """``{student_id: {"run": n, "points": [[step, loss, acc], ...]}}`` of each student's
        latest run."""
        stmt = (select(points.c.student_id, points.c.run, points.c.step, points.c.loss,
                       points.c.acc)
                .join(students, and_(students.c.id == points.c.student_id,
                                     students.c.last_run == points.c.run))
                .where(points.c.session_id == sid)
                .order_by(points.c.student_id, points.c.step))
        out: dict = {}
        with self.engine.connect() as c:
            for st, run, step, loss, acc in c.execute(stmt):
                out.setdefault(st, {"run": run, "points": []})["points"].append(
                    [step, loss, acc])
        return out

    def results(self, sid: str) -> list[dict]:
        """Every run of every student of ``sid`` (the CSV), by student then run."""
        stmt = (select(students.c.name, students.c.id.label("student_id"), students.c.adapter,
                       runs)
                .join(runs, runs.c.student_id == students.c.id)
                .where(students.c.session_id == sid)
                .order_by(students.c.joined_at, runs.c.run))
        with self.engine.connect() as c:
            return [dict(r) for r in c.execute(stmt).mappings()]

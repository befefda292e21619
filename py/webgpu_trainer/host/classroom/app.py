"""The classroom app: the page server (``host/server.py``) plus the student and teacher routes,
the durable store, per-client limits and the security headers.

``create_classroom_app(...)`` builds it in this process; ``from_env()`` builds the same app
from ``$WEBGPU_TRAINER_CLASSROOM`` (JSON of those arguments) for ``uvicorn --workers N``,
where every worker process imports the app by name.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from starlette.concurrency import run_in_threadpool

from ..server import NAME_RE, create_app
from . import student, teacher
from .changes import Changes
from .common import SecurityHeaders
from .config import PINNABLE
from .limits import RateLimiter
from .store import Store, sqlite_url
from .tokens import token_matches

ENV = "WEBGPU_TRAINER_CLASSROOM"


@dataclass
class ClassroomState:
    """What the classroom routes need, on ``app.state.classroom``. Only the limiters, the
    stream count and the change notification are per process; everything a student or teacher
    sees comes from the store."""

    store: Store
    teacher_token: str | None         # when this process was given it or made it, else None
    teacher_hash: str                 # what the store keeps (tokens.hash_token)
    base_urls: list
    web: Path
    models: object                     # app.state.models of host/server.py
    ca_path: Path | None = None
    ca_sha256: str | None = None
    config_keys: tuple = PINNABLE
    joins: RateLimiter = field(default_factory=lambda: RateLimiter(rate=2.0, burst=100))
    views: RateLimiter = field(default_factory=lambda: RateLimiter(rate=5.0, burst=100))
    reports: RateLimiter = field(default_factory=lambda: RateLimiter(rate=1.0, burst=10))
    uploads: RateLimiter = field(default_factory=lambda: RateLimiter(rate=1 / 20, burst=3))
    auth_failures: RateLimiter = field(default_factory=lambda: RateLimiter(rate=0.2, burst=20))
    exports: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(2))
    changes: Changes = field(default_factory=Changes)
    streams: int = 0
    known_token: bytes = b""           # sha256 of the token last checked against the hash

    async def is_teacher(self, token: str, client: str) -> bool:
        """Whether ``token`` is the teacher's: a token that matched before (its sha256,
        constant-time compare), else scrypt against the stored hash (in the thread pool: the
        event loop goes on), run only while ``client`` is under its failed-login limit (429
        when over); a miss counts against it."""
        digest = hashlib.sha256(token.encode()).digest()
        if self.known_token and hmac.compare_digest(digest, self.known_token):
            return True
        what = "failed teacher logins"
        if not self.auth_failures.would_allow(client):
            self.auth_failures.check(client, what)  # the 429
        if await run_in_threadpool(token_matches, token, self.teacher_hash):
            self.known_token = digest
            return True
        self.auth_failures.check(client, what)
        return False

    def model_names(self) -> set:
        """The models students can train: ``models/*.onnx`` and the uploads."""
        names = set()
        for folder in (self.models.dir, self.models.uploads):
            if Path(folder).is_dir():
                names |= {p.stem for p in Path(folder).glob("*.onnx")
                          if NAME_RE.match(p.stem) and ".." not in p.stem}
        return names


def default_db(state_dir: Path) -> str:
    return sqlite_url(Path(state_dir) / "classroom.db")


def create_classroom_app(root: Path, *, models_dir: Path | None = None,
                         data_dir: Path | None = None, wheels_dir: Path | None = None,
                         state_dir: Path, db_url: str | None = None,
                         base_urls: list | None = None, ca_path: str | None = None,
                         ca_sha256: str | None = None, teacher_token: str | None = None,
                         uploads_dir: Path | None = None, data_root: Path | None = None):
    """The app and its store. ``state_dir``: the classroom's folder (SQLite database unless
    ``db_url``, models, TLS files); ``base_urls``: what students type (join URLs and QR codes
    are these plus ``/?class=ID``); ``ca_path``: the CA certificate served at
    ``/classroom/ca.pem``; ``teacher_token``: fixed token (else the stored hash is kept, or a
    new token made on a new database: ``Store.teacher_token``); ``uploads_dir``: the page's
    uploaded models (default ``root/.cache/uploads``); ``data_root``: the prepared datasets."""
    root = Path(root).resolve()
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(state_dir, 0o700)
    store = Store(db_url or default_db(state_dir), state_dir)
    app = create_app(root, models_dir, data_dir, wheels_dir, uploads_dir=uploads_dir,
                     data_root=data_root,
                     extra_routes=[*student.ROUTES, *teacher.ROUTES])
    token = store.teacher_token(teacher_token)
    app.state.classroom = ClassroomState(
        store=store, teacher_token=token, teacher_hash=store.teacher_hash(),
        base_urls=list(base_urls or []), web=root / "web", models=app.state.models,
        ca_path=Path(ca_path) if ca_path else None, ca_sha256=ca_sha256)
    app.add_middleware(SecurityHeaders)
    return app


def env_args(**kwargs) -> str:
    """``kwargs`` of ``create_classroom_app`` as the JSON ``from_env`` reads."""
    return json.dumps({k: (str(v) if isinstance(v, Path) else v) for k, v in kwargs.items()})


def from_env():
    """The app from ``$WEBGPU_TRAINER_CLASSROOM`` (``uvicorn --factory`` with workers)."""
    args = json.loads(os.environ[ENV])
    root = Path(args.pop("root"))
    paths = ("models_dir", "data_dir", "wheels_dir", "state_dir", "data_root")
    return create_classroom_app(root, **{k: (Path(v) if k in paths and v else v)
                                         for k, v in args.items()})

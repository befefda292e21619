"""What the classroom routes share: the request bodies (pydantic models), reading and checking a
JSON body, the teacher and student credentials, store calls off the event loop, and the
security headers of every response."""

from __future__ import annotations

import json
import logging
import secrets
from typing import Annotated, Literal

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, StringConstraints,
                      ValidationError)
from starlette.concurrency import run_in_threadpool

from ..bodies import JSON_LIMIT, read_json
from ..server import ApiError
from .names import display_name
from .store import Conflict, NotFound

log = logging.getLogger("webgpu_trainer.classroom")
MAX_PROBLEMS = 5  # problems of a body listed one by one; the rest counted



def _text(most: int):
    """A display name of at most ``most`` characters (``names.display_name``)."""
    return Annotated[str, AfterValidator(lambda s: display_name(s, most))]


Name = _text(40)
Num = float | None
Point = tuple[Annotated[int, Field(ge=0, le=10 ** 9)], Num, Num]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JoinBody(Body):
    name: Name


class SessionBody(Body):
    name: _text(80)
    config: dict = {}
    pinned: list[str] | None = None


class SessionPatch(Body):
    name: _text(80) | None = None
    config: dict | None = None
    pinned: list[str] | None = None
    open: bool | None = None


class Progress(Body):
    step: int = Field(0, ge=0, le=10 ** 9)
    total_steps: int | None = Field(None, ge=0, le=10 ** 9)
    epoch: int | None = Field(None, ge=0, le=10 ** 6)
    epochs: int | None = Field(None, ge=0, le=10 ** 6)
    images_per_s: Num = None


class Result(Body):
    test_acc: Num = None
    test_loss: Num = None
    eval_images: int | None = Field(None, ge=0, le=10 ** 6)
    steps: int | None = Field(None, ge=0, le=10 ** 9)
    stopped: bool = False
    verdict: Literal["ok", "diverged", "chance", "stopped"] | None = None
    reason: Annotated[str, StringConstraints(max_length=1000)] | None = None


class Report(Body):
    """One metrics batch (the client sends one every 2 s while something is new, and a
    heartbeat otherwise)."""
    run: int | None = Field(None, ge=1, le=1000)
    adapter: Annotated[str, StringConstraints(max_length=200)] | None = None
    config: dict | None = None
    progress: Progress | None = None
    points: list[Point] = Field(default_factory=list, max_length=2000)
    evals: list[Point] = Field(default_factory=list, max_length=1000)
    result: Result | None = None
    error: Annotated[str, StringConstraints(max_length=4000)] | None = None
    state: Literal["ready", "training", "done", "error", "no_webgpu"] | None = None


def _problems(exc: ValidationError) -> list[str]:
    out = []
    for e in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in e["loc"]) or "body"
        out.append(f"{where}: {e['msg'].removeprefix('Value error, ')}")
    return out


async def json_body(request, model: type[Body]) -> Body:
    """The request's JSON body checked against ``model``: 415 for another content type, 413
    over ``JSON_LIMIT``, 400 for malformed or too deeply nested JSON (``bodies.read_json``),
    422 naming every bad field."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise ApiError(415, "send the body as JSON (Content-Type: application/json)")
    data = await read_json(request, "the JSON body", JSON_LIMIT)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        found = _problems(exc)
        first = exc.errors(include_url=False, include_input=False)[0]
        if first["type"] == "value_error":  # ours (a name): a sentence for the person
            message = first["msg"].removeprefix("Value error, ")
            message = message[:1].upper() + message[1:] + "."
        else:
            message = f"invalid {model.__name__}: {found[0]}"
        shown = found[:MAX_PROBLEMS] + ([f"and {len(found) - MAX_PROBLEMS:,} more problems"]
                                        if len(found) > MAX_PROBLEMS else [])
        raise ApiError(422, message + (f" (and {len(found) - 1:,} more)" if len(found) > 1
                                       else ""), shown) from None


async def call(fn, *args, **kwargs):
    """Run a blocking store call in the thread pool; its NotFound / Conflict as 404 / 409."""
    try:
        return await run_in_threadpool(fn, *args, **kwargs)
    except NotFound as exc:
        raise ApiError(404, str(exc)) from None
    except Conflict as exc:
        raise ApiError(409, str(exc)) from None


def client_ip(request) -> str:
    return request.client.host if request.client else "?"


def same_origin(request) -> None:
    """Refuse state-changing requests a browser made for another site (CSRF): the browser's
    ``Sec-Fetch-Site`` says so; non-browser clients send none."""
    site = request.headers.get("sec-fetch-site")
    if site and site not in ("same-origin", "none"):
        raise ApiError(403, "cross-site requests are not allowed")


async def teacher_only(request) -> None:
    """403 unless ``Authorization: Bearer <teacher token>`` (``ClassroomState.is_teacher``:
    the stored hash, constant-time compare); checks of unknown tokens are rate-limited per
    client address."""
    state = request.app.state.classroom
    given = request.headers.get("authorization", "")
    token = given[7:].strip() if given[:7].lower() == "bearer " else ""
    if token and len(token) <= 200 and await state.is_teacher(token, client_ip(request)):
        return
    if not token or len(token) > 200:
        state.auth_failures.check(client_ip(request), "failed teacher logins")
    raise ApiError(403, "teacher only: this needs the teacher token printed when the "
                        "classroom server started")


def student_of(request) -> tuple[str, str]:
    """``(student id, key)`` from ``X-Student-Key: <id>.<key>`` (403 when missing)."""
    raw = request.headers.get("x-student-key", "")
    sid, _, key = raw.partition(".")
    if not sid or not key or len(raw) > 200:
        raise ApiError(403, "join the class first (no student key)")
    return sid, key


def internal_error_id() -> str:
    return secrets.token_hex(4)


CSP = ("default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; "
       "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; "
       "worker-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")
PAGE_HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-frame-options", b"DENY")]
ALL_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer")]


class SecurityHeaders:
    """ASGI middleware: nosniff and no-referrer on every response; on HTML pages also a CSP
    with no remote origin (``frame-ancestors 'none'``) and X-Frame-Options. Unexpected errors
    of the classroom routes are logged with an id and answered as a bare 500 naming it (no
    stack trace, no exception text, reaches the client)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def wrapped(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [(k, v) for k, v in message.get("headers", [])
                           if k.lower() not in (b"x-content-type-options",)]
                ctype = dict(headers).get(b"content-type", b"")
                headers += ALL_HEADERS
                if ctype.startswith(b"text/html"):
                    headers += PAGE_HEADERS
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, wrapped)
        except Exception:
            ref = internal_error_id()
            log.exception("internal error %s on %s %s", ref, scope.get("method"),
                          scope.get("path"))
            if started:
                raise
            body = json.dumps({"error": f"internal error (reference {ref}; details are in "
                                        "the server's log)"}).encode()
            await wrapped({"type": "http.response.start", "status": 500,
                           "headers": [(b"content-type", b"application/json"),
                                       (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})


def dataset_problems(request, config: dict) -> list[str]:
    """``[message]`` when the dataset of a session's ``config`` is not on this server (never
    prepared, or deleted after the session was made), for the student's page and the
    teacher's dashboard; ``[]`` when it is there (or the config names none: the default)."""
    name = config.get("dataset") if isinstance(config, dict) else None
    why = request.app.state.dataset_missing(name) if name else None
    if not why:
        return []
    return [f"This class trains on dataset {name!r}, which is not on the server any more "
            f"({why}): training cannot start until the teacher prepares it again or picks "
            "another dataset."]

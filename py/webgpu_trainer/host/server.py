"""The Starlette app: page, Pyodide, engine wheel, models, datasets (routes: ARCHITECTURE.md).

``create_app(root, models_dir, data_dir, wheels_dir, data_root=...)`` builds it. Every error is
a JSON body ``{"error": "..."}`` naming the problem (400 bad input, 404 missing, 416 bad range,
500 server side, e.g. a shard whose sha256 no longer matches the manifest). Files are only
served from the allowed folders: paths with ``..``, ``.`` or empty segments, backslashes, NUL or
absolute paths are rejected with 400 before touching the disk, and the resolved path must stay
inside its root.
"""

from __future__ import annotations

import re
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .config_routes import RunConfigRoutes
from .data_routes import Datasets
from .dataset_routes import DatasetUploads
from .errors import NAME_RE as NAME_RE, ApiError
from .files import (IMMUTABLE as IMMUTABLE, MIME as MIME, WEB_SUFFIXES as WEB_SUFFIXES,
                    file_response as file_response, safe_join as safe_join)
from .model_routes import MAX_UPLOAD_BYTES, Models
from .static_routes import PageFiles

def create_app(root: Path, models_dir: Path | None = None, data_dir: Path | None = None,
               wheels_dir: Path | None = None, *, cross_origin_isolated: bool = True,
               uploads_dir: Path | None = None,
               max_upload_bytes: int = MAX_UPLOAD_BYTES, extra_routes: list = (),
               data_root: Path | None = None) -> Starlette:
    """Build the app. root: the repo (``web/`` lives there); models_dir: ``*.onnx`` folder
    (default root/models); data_dir: MNIST cache with manifest.json (default
    root/.cache/datasets/mnist); wheels_dir: where the engine wheel is built (default
    root/.cache/wheels); uploads_dir: where uploaded models are kept (default
    root/.cache/uploads); max_upload_bytes: upload size limit; data_root: the prepared
    datasets, one folder each (default root/.cache/datasets).
    cross_origin_isolated: add COOP/COEP/CORP headers (harmless: everything is same-origin).
    extra_routes: routes matched before the page files (classroom mode: host/classroom/);
    ``app.state.models`` gives them the model lookup (``model_routes.Models``: ``path(name)``,
    ``bundle(path)``, ``classes(name)``, ``dir``, ``uploads``), ``app.state.train_images()``
    the training split's size, ``app.state.model_misfit(model, dataset)`` why a model does
    not fit a dataset (``RunConfigRoutes.misfit``) or None.

    The routes live with what they serve: ``static_routes.PageFiles`` (the page, vendored
    libraries, the engine wheel), ``model_routes.Models``, ``config_routes.RunConfigRoutes``,
    ``data_routes.Datasets`` (reading), ``dataset_routes.DatasetUploads`` (preparing uploads;
    ``app.state.datasets``); the errors are JSON (:func:`_error_handlers`).
    """
    root = Path(root).resolve()
    models_dir = Path(models_dir or root / "models")
    data_dir = Path(data_dir or root / ".cache" / "datasets" / "mnist")
    wheels_dir = Path(wheels_dir or root / ".cache" / "wheels")
    uploads_dir = Path(uploads_dir or root / ".cache" / "uploads")
    data_root = Path(data_root or root / ".cache" / "datasets")

    # Absolute server paths never reach the page: each known folder is cut to what it holds,
    # any other absolute path to its file name (see ``_scrub``).
    folders = [(uploads_dir, ""), (models_dir, ""), (wheels_dir, ""),
               (data_dir, "the MNIST cache/"), (data_root, "datasets/"), (root, "")]

    def public(text: str) -> str:
        return _scrub(str(text), folders)

    models = Models(models_dir, uploads_dir, public, max_upload_bytes)
    files, mnist = PageFiles(root, wheels_dir), Datasets(data_dir, data_root)
    datasets = DatasetUploads(data_root, public)
    run_config = RunConfigRoutes(models, mnist.train_images, mnist.fit_manifest, mnist.missing)
    routes = [
        *files.routes(),
        *models.routes(),
        *run_config.routes(),
        *mnist.routes(),
        *datasets.routes(),
        *extra_routes,
        files.page_route(),  # last: any other path is a page file
    ]
    app = Starlette(routes=routes, exception_handlers=_error_handlers(public))
    app.state.models = models
    app.state.train_images = mnist.train_images
    app.state.dataset_missing = mnist.missing
    app.state.model_misfit = run_config.misfit
    app.state.datasets = datasets

    if cross_origin_isolated:
        app.add_middleware(_HeaderMiddleware)
    return app


def _error_handlers(public) -> dict:
    """Every error as JSON ``{"error", "problems"?, "hints"?}``, its text through ``public``
    (no server paths): ApiError with its status, Starlette's HTTPException (404 naming the
    path), anything else 500 naming the exception."""
    async def api_error(request: Request, exc: ApiError) -> Response:
        body = {"error": public(exc.message)}
        if exc.problems:
            body["problems"] = [public(p) for p in exc.problems]
        if exc.hints:
            body["hints"] = [public(h) for h in exc.hints]
        return JSONResponse(body, exc.status)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        msg = exc.detail if exc.status_code != 404 else f"not found: {request.url.path}"
        return JSONResponse({"error": public(msg)}, exc.status_code)

    async def server_error(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": public(f"internal error: {type(exc).__name__}: {exc}")},
                            500)

    return {ApiError: api_error, HTTPException: http_error, Exception: server_error}


_ABS_PATH = re.compile(r"(?<![\w.:/-])(/[^\s/'\"(),;:]+)((?:/[^\s/'\"(),;:]+)+)")


def _scrub(text: str, folders: list) -> str:
    """``text`` without absolute server paths: a path inside one of ``folders`` (``[(folder,
    label)]``) becomes ``label`` + its path inside; any other absolute path whose first part is
    a folder of this machine (``/work/...``, ``/tmp/...``) its file name. URL paths such as
    ``/api/models`` stay."""
    for folder, label in folders:
        for form in {str(Path(folder)), str(Path(folder).resolve())}:
            if len(form) > 1:
                text = text.replace(form + "/", label).replace(form, label.rstrip("/") or ".")

    def cut(m):
        return m.group(2).rsplit("/", 1)[-1] if Path(m.group(1)).is_dir() else m.group(0)
    return _ABS_PATH.sub(cut, text)


class _HeaderMiddleware:
    """ASGI middleware adding cross-origin isolation and nosniff headers to every response."""

    EXTRA = [(b"cross-origin-opener-policy", b"same-origin"),
             (b"cross-origin-embedder-policy", b"require-corp"),
             (b"cross-origin-resource-policy", b"same-origin"),
             (b"x-content-type-options", b"nosniff")]

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def wrapped(message):
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + self.EXTRA
            await send(message)
        await self.app(scope, receive, wrapped)

"""The Starlette app: page, Pyodide, engine wheel, models, MNIST shards (routes: ARCHITECTURE.md).

``create_app(root, models_dir, data_dir, wheels_dir)`` builds it. Every error is a JSON body
``{"error": "..."}`` naming the problem (400 bad input, 404 missing, 416 bad range, 500 server
side, e.g. a shard whose sha256 no longer matches the manifest). Files are only served from the
allowed folders: paths with ``..``, ``.`` or empty segments, backslashes, NUL or absolute paths
are rejected with 400 before touching the disk, and the resolved path must stay inside its root.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.routing import Route

from .bodies import JSON_LIMIT, parse_json, read_body
from .errors import NAME_RE, ApiError
from .model_routes import MAX_UPLOAD_BYTES, Models
from .shard_gzip import accepts_gzip, gzip_copy

MIME = {
    ".html": "text/html; charset=utf-8", ".js": "application/javascript; charset=utf-8",
    ".mjs": "application/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
    ".wasm": "application/wasm", ".json": "application/json", ".map": "application/json",
    ".zip": "application/zip", ".whl": "application/zip", ".onnx": "application/octet-stream",
    ".u8": "application/octet-stream", ".bin": "application/octet-stream",
    ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon",
    ".ts": "text/plain; charset=utf-8", ".txt": "text/plain; charset=utf-8",
    ".md": "text/plain; charset=utf-8",
}
WEB_SUFFIXES = {".html", ".js", ".mjs", ".css", ".svg", ".png", ".ico"}
IMMUTABLE = "public, max-age=31536000, immutable"
# web/ holds one folder per app: page/ (the trainer), teacher/ (the classroom dashboard), dev/
# (parity.html) and lib/ (what they share). A file's URL is its path under web/ (/page/app.js,
# /lib/util.js); the addresses people type keep their place: / (and share links, /?model=...)
# the trainer page, /teacher (classroom mode's route) the dashboard.
WEB_APPS = ("page", "teacher", "dev", "lib")
WEB_ENTRIES = {"": "page/index.html", "index.html": "page/index.html"}
TEACHER_PAGE = "teacher/teacher.html"


def safe_join(base: Path, rel: str) -> Path:
    """``base / rel`` if it is an existing file inside ``base``; ApiError 400/404 otherwise."""
    if not rel:
        raise ApiError(404, "not found: (empty path)")
    if ("\\" in rel or "\0" in rel or rel.startswith("/") or ":" in rel
            or any(part in ("", ".", "..") for part in rel.split("/"))):
        raise ApiError(400, f"bad path: {rel!r}")
    base = base.resolve()
    path = (base / rel).resolve()
    if not path.is_relative_to(base):
        raise ApiError(400, f"bad path: {rel!r}")
    if not path.is_file():
        raise ApiError(404, f"not found: {rel}")
    return path


def web_file(web: Path, url_path: str) -> Path:
    """The file under ``web`` that the URL ``/url_path`` names (``WEB_ENTRIES``, else a page
    file inside one of ``WEB_APPS``); ApiError 404 for anything else (web/node_modules,
    package.json), 400 for a bad path."""
    rel = WEB_ENTRIES.get(url_path, url_path)
    if rel.split("/", 1)[0] not in WEB_APPS or Path(rel).suffix.lower() not in WEB_SUFFIXES:
        raise ApiError(404, f"not found: /{url_path}")
    return safe_join(web, rel)


def file_response(request: Request, path: Path, *, etag: str | None = None,
                  cache: str = "no-cache", media_type: str | None = None,
                  headers: dict | None = None) -> Response:
    """Serve ``path`` through Starlette's FileResponse (single and multiple Range: 206, 416;
    HEAD; Last-Modified; ETag, ``etag`` when given, else Starlette's from size and mtime) with
    ``Cache-Control: cache`` and ``headers``; a matching If-None-Match / If-Modified-Since gives
    304 (with the ETag, caching and Vary headers), by the rule of Starlette's StaticFiles
    (``is_not_modified``)."""
    headers = {"Cache-Control": cache, **({"ETag": etag} if etag else {}), **(headers or {})}
    media_type = media_type or MIME.get(path.suffix.lower(), "application/octet-stream")
    resp = FileResponse(path, headers=headers, media_type=media_type, stat_result=path.stat())
    if StaticFiles.is_not_modified(None, resp.headers, request.headers):
        keep = ("etag", "cache-control", "last-modified", "vary")
        return Response(status_code=304, headers={k: resp.headers[k] for k in keep
                                                  if k in resp.headers})
    return resp


def create_app(root: Path, models_dir: Path | None = None, data_dir: Path | None = None,
               wheels_dir: Path | None = None, *, cross_origin_isolated: bool = True,
               uploads_dir: Path | None = None,
               max_upload_bytes: int = MAX_UPLOAD_BYTES, extra_routes: list = ()) -> Starlette:
    """Build the app. root: the repo (``web/`` lives there); models_dir: ``*.onnx`` folder
    (default root/models); data_dir: MNIST cache with manifest.json (default root/.cache/mnist);
    wheels_dir: where the engine wheel is built (default root/.cache/wheels); uploads_dir: where
    uploaded models are kept (default root/.cache/uploads); max_upload_bytes: upload size limit.
    cross_origin_isolated: add COOP/COEP/CORP headers (harmless: everything is same-origin).
    extra_routes: routes matched before the page files (classroom mode: host/classroom/);
    ``app.state.models`` gives them the model lookup (``model_routes.Models``: ``path(name)``,
    ``bundle(path)``, ``classes(name)``, ``dir``, ``uploads``), ``app.state.train_images()``
    the training split's size.
    """
    root = Path(root).resolve()
    web = root / "web"
    models_dir = Path(models_dir or root / "models")
    data_dir = Path(data_dir or root / ".cache" / "mnist")
    wheels_dir = Path(wheels_dir or root / ".cache" / "wheels")
    uploads_dir = Path(uploads_dir or root / ".cache" / "uploads")
    verified: dict = {}
    versions: dict = {}

    # Absolute server paths never reach the page: each known folder is cut to what it holds,
    # any other absolute path to its file name (see ``_scrub``).
    folders = [(uploads_dir, ""), (models_dir, ""), (wheels_dir, ""),
               (data_dir, "the MNIST cache/"), (root, "")]

    def public(text: str) -> str:
        return _scrub(str(text), folders)

    models = Models(models_dir, uploads_dir, public, max_upload_bytes)

    # ------------------------------------------------------------ page and vendor files
    def page(request: Request) -> Response:
        return file_response(request, web_file(web, request.path_params.get("file", "")))

    def vendor(sub: str):
        def handler(request: Request) -> Response:
            return file_response(request, safe_join(root / sub, request.path_params["file"]))
        return handler

    # ------------------------------------------------------------ wheel
    def api_wheel(request: Request) -> Response:
        from .wheel import ensure_wheel
        path = ensure_wheel(wheels_dir, root)
        return JSONResponse({"url": f"/wheels/{path.name}",
                             "pyodide": f"/vendor/pyodide@{pyodide_tag()}/"})

    def pyodide_tag() -> str:
        """The installed Pyodide's version and npm integrity hash (web/package-lock.json):
        ``/vendor/pyodide@TAG/`` names exactly these files, so they are served immutable."""
        pkg = root / "web" / "node_modules" / "pyodide" / "package.json"
        key = (pkg.stat().st_mtime_ns, pkg.stat().st_size) if pkg.is_file() else None
        if versions.get("pyodide", (None,))[0] != key:
            version, integrity = "none", ""
            try:
                version = json.loads(pkg.read_text())["version"]
                lock = json.loads((root / "web" / "package-lock.json").read_text())
                integrity = lock["packages"]["node_modules/pyodide"].get("integrity", "")
            except (OSError, ValueError, KeyError):
                pass
            digest = hashlib.sha256(integrity.encode()).hexdigest()[:10]
            versions["pyodide"] = (key, f"{version}-{digest}")
        return versions["pyodide"][1]

    def pyodide_pinned(request: Request) -> Response:
        if request.path_params["tag"] != pyodide_tag():
            raise ApiError(404, f"not found: Pyodide {request.path_params['tag']} (this "
                                f"server has {pyodide_tag()})")
        path = safe_join(root / "web" / "node_modules" / "pyodide", request.path_params["file"])
        return file_response(request, path, cache=IMMUTABLE)

    def wheels(request: Request) -> Response:
        name = request.path_params["file"]
        if not name.endswith(".whl"):
            raise ApiError(404, f"not found: {name}")
        return file_response(request, safe_join(wheels_dir, name))

    # ------------------------------------------------------------ run configuration
    def kernels(request: Request) -> Response:
        from ..engine import playground
        return JSONResponse(playground.presets())

    def config_schema(request: Request) -> Response:
        from ..engine import config
        return JSONResponse(config.schema())

    async def config_validate(request: Request) -> Response:
        """Body ``{"config": {...}, "model": name?}``: the run configuration checked by the
        engine's validator (``config.parse``) against the training images of the MNIST
        manifest (and the model's classes when ``model`` is given). Answers ``{"ok": true,
        "config": resolved config, "steps": {"per_epoch", "total", "train_images",
        "val_images"}}`` or
        ``{"ok": false, "errors": [[field, message], ...]}`` (200 both: a bad config is an
        answer, not a failed request; so is a ``model`` the server does not have); 400 when
        the body is not such an object (or not JSON,
        or nested too deeply), 413 over ``JSON_LIMIT`` bytes."""
        from ..engine import config
        body = parse_json(await read_body(request, JSON_LIMIT, "the body") or b"{}")
        if not isinstance(body, dict) or not isinstance(body.get("config", {}), dict):
            raise ApiError(400, 'body must be {"config": {...}, "model": name}')
        model = body.get("model")
        if model is not None:  # a name the server has (a path or an object is no model)
            try:
                models.path(model if isinstance(model, str) else "")
            except ApiError as exc:
                why = exc.message if isinstance(model, str) else "must be a model's name"
                return JSONResponse({"ok": False, "errors": [["model", why]]})
        images = train_images()
        classes = models.classes(model) if isinstance(model, str) else None
        try:
            cfg = config.parse(body.get("config") or {}, train_images=images, classes=classes)
        except config.ConfigError as exc:
            return JSONResponse({"ok": False, "errors": [list(e) for e in exc.errors]})
        per_epoch, total = cfg.steps(images)
        used = config.train_used(cfg, images)
        return JSONResponse({"ok": True, "config": cfg.to_json(),
                             "steps": {"per_epoch": per_epoch, "total": total,
                                       "train_images": used,
                                       "val_images": cfg["val_images"]}})

    # ------------------------------------------------------------ MNIST
    def train_images() -> int:
        """The training split's images by the MNIST manifest (MNIST's 60,000 without one)."""
        from ..engine import config
        try:
            return int(manifest()["splits"]["train"]["count"])
        except (ApiError, KeyError, TypeError, ValueError):
            return config.schema_mod.MNIST_TRAIN

    def manifest() -> dict:
        path = data_dir / "manifest.json"
        if not path.is_file():
            raise ApiError(404, "MNIST manifest not found: run `webgpu-trainer data` first")
        try:
            return json.loads(path.read_text())
        except ValueError as exc:
            raise ApiError(500, f"MNIST manifest is not valid JSON: {exc}") from exc

    def mnist_manifest(request: Request) -> Response:
        manifest()  # validates
        return file_response(request, data_dir / "manifest.json", media_type="application/json")

    def mnist_shard(request: Request) -> Response:
        name = request.path_params["shard"]
        if "/" in name or not NAME_RE.match(name):
            raise ApiError(400, f"bad shard name: {name!r}")
        entries = {e["file"]: e for s in manifest().get("splits", {}).values()
                   for e in s.values() if isinstance(e, dict) and "file" in e}
        if name not in entries:
            raise ApiError(404, f"shard {name} is not in the MNIST manifest")
        try:
            path = safe_join(data_dir, name)
        except ApiError as exc:
            if exc.status == 404:
                exc.message = (f"shard {name} is missing from the MNIST cache; run "
                               "`webgpu-trainer data` to rebuild the cache")
            raise
        ent, st = entries[name], path.stat()
        key = (name, st.st_size, st.st_mtime_ns)
        if verified.get(name) != key:  # sha256 once per file version (~0.1 s for 47 MB)
            h = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(1 << 22):
                    h.update(chunk)
            if h.hexdigest() != ent.get("sha256"):
                raise ApiError(500, f"shard {name} is corrupt: sha256 {h.hexdigest()[:12]}... "
                                    f"!= manifest {str(ent.get('sha256'))[:12]}...; run "
                                    "`webgpu-trainer data` to rebuild the cache")
            verified[name] = key
        addressed = ent["sha256"][:12] in name
        cache = IMMUTABLE if addressed else "no-cache"
        # gzip when the client takes it and asks for the whole file (a Range is of the raw
        # bytes); each encoding has its own ETag, and caches keep them apart (Vary)
        vary = {"Vary": "Accept-Encoding"}
        if "range" not in request.headers and accepts_gzip(
                request.headers.get("accept-encoding", "")):
            gz = gzip_copy(path, ent["sha256"], wait=False)  # the raw file while it is made
            if gz is not None:
                return file_response(request, gz, etag=f'"{ent["sha256"][:32]}-gzip"',
                                     cache=cache, media_type="application/octet-stream",
                                     headers={**vary, "Content-Encoding": "gzip"})
        return file_response(request, path, etag=f'"{ent["sha256"][:32]}"', cache=cache,
                             headers=vary)

    # ------------------------------------------------------------ errors and headers
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

    routes = [
        Route("/", page, methods=["GET", "HEAD"]),
        Route("/api/wheel", api_wheel),
        *models.routes(),
        Route("/api/kernels", kernels),
        Route("/api/config/schema", config_schema),
        Route("/api/config/validate", config_validate, methods=["POST"]),
        Route("/data/mnist/manifest.json", mnist_manifest, methods=["GET", "HEAD"]),
        Route("/data/mnist/{shard:path}", mnist_shard, methods=["GET", "HEAD"]),
        Route("/vendor/pyodide/{file:path}", vendor("web/node_modules/pyodide"),
              methods=["GET", "HEAD"]),
        Route("/vendor/pyodide@{tag}/{file:path}", pyodide_pinned, methods=["GET", "HEAD"]),
        Route("/vendor/uplot/{file:path}", vendor("web/node_modules/uplot/dist"),
              methods=["GET", "HEAD"]),
        Route("/vendor/idb-keyval/{file:path}", vendor("web/node_modules/idb-keyval/dist"),
              methods=["GET", "HEAD"]),
        Route("/wheels/{file:path}", wheels, methods=["GET", "HEAD"]),
        *extra_routes,
        Route("/{file:path}", page, methods=["GET", "HEAD"]),  # /page/app.js, /lib/worker.js
    ]
    app = Starlette(routes=routes, exception_handlers={
        ApiError: api_error, HTTPException: http_error, Exception: server_error})
    app.state.models = models
    app.state.train_images = train_images

    if cross_origin_isolated:
        app.add_middleware(_HeaderMiddleware)
    return app


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

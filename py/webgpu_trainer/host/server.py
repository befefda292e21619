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
import secrets
import threading
from pathlib import Path
from types import SimpleNamespace

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.routing import Route

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
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class ApiError(Exception):
    """An error answered as JSON ``{"error": message, "problems": [line, ...]}`` with
    ``status``; ``problems`` (optional) lists every problem found, one per line."""

    def __init__(self, status: int, message: str, problems: list | None = None,
                 hints: list | None = None):
        super().__init__(message)
        self.status, self.message, self.problems, self.hints = status, message, problems, hints


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


def file_response(request: Request, path: Path, *, etag: str | None = None,
                  cache: str = "no-cache", media_type: str | None = None) -> Response:
    """Serve ``path`` through Starlette's FileResponse (single and multiple Range: 206, 416;
    HEAD; Last-Modified; ETag, ``etag`` when given, else Starlette's from size and mtime) with
    ``Cache-Control: cache``; a matching If-None-Match / If-Modified-Since gives 304, by the
    rule of Starlette's StaticFiles (``is_not_modified``)."""
    headers = {"Cache-Control": cache, **({"ETag": etag} if etag else {})}
    media_type = media_type or MIME.get(path.suffix.lower(), "application/octet-stream")
    resp = FileResponse(path, headers=headers, media_type=media_type, stat_result=path.stat())
    if StaticFiles.is_not_modified(None, resp.headers, request.headers):
        keep = ("etag", "cache-control", "last-modified")
        return Response(status_code=304, headers={k: resp.headers[k] for k in keep})
    return resp


MAX_UPLOAD_BYTES = 64 << 20  # an uploaded .onnx (models people train on MNIST are far smaller)


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
    ``app.state.models`` gives them the model lookup (``path(name)``, ``bundle(path)``).
    """
    root = Path(root).resolve()
    web = root / "web"
    models_dir = Path(models_dir or root / "models")
    data_dir = Path(data_dir or root / ".cache" / "mnist")
    wheels_dir = Path(wheels_dir or root / ".cache" / "wheels")
    uploads_dir = Path(uploads_dir or root / ".cache" / "uploads")
    bundles: dict = {}
    verified: dict = {}
    versions: dict = {}
    lock = threading.Lock()

    def onnx_io():
        from .. import onnx_io as mod  # lazy: keeps onnx out of start-up and of the page routes
        return mod

    def model_path(name: str) -> Path:
        if not NAME_RE.match(name) or ".." in name:
            raise ApiError(400, f"bad model name: {name!r}")
        for folder in (models_dir, uploads_dir):
            path = folder / f"{name}.onnx"
            if path.is_file():
                return path
        raise ApiError(404, f"unknown model: {name!r} (no {name}.onnx in the models folder or "
                            "the uploads)")

    # Absolute server paths never reach the page: each known folder is cut to what it holds,
    # any other absolute path to its file name (see ``_scrub``).
    folders = [(uploads_dir, ""), (models_dir, ""), (wheels_dir, ""),
               (data_dir, "the MNIST cache/"), (root, "")]

    def public(text: str) -> str:
        return _scrub(str(text), folders)

    def bundle(path: Path) -> tuple[dict, bytes]:
        st = path.stat()
        key = (str(path), st.st_mtime_ns, st.st_size)
        with lock:
            if key not in bundles:
                try:
                    bundles[key] = onnx_io().load_bundle(path)
                except ValueError as exc:  # OnnxImportError is a ValueError
                    raise _import_error(path.name, exc, str(path)) from exc
            return bundles[key]

    # ------------------------------------------------------------ page and vendor files
    def page(request: Request) -> Response:
        name = request.path_params.get("file", "index.html")
        if Path(name).suffix.lower() not in WEB_SUFFIXES:
            raise ApiError(404, f"not found: /{name}")
        return file_response(request, safe_join(web, name))

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

    # ------------------------------------------------------------ models
    def api_models(request: Request) -> Response:
        out = []
        from ..engine.graph import Graph, GraphError
        paths = sorted(models_dir.glob("*.onnx"))
        if uploads_dir.is_dir():
            taken = {p.stem for p in paths}
            paths += [p for p in sorted(uploads_dir.glob("*.onnx")) if p.stem not in taken]
        for path in paths:
            item = {"name": path.stem, "file": path.name, "bytes": None, "params": None,
                    "uploaded": path.parent == uploads_dir}
            try:
                item["bytes"] = path.stat().st_size
                if not NAME_RE.match(path.stem) or ".." in path.stem:
                    raise ApiError(400, f"file name {path.name!r}: use letters, digits, '_', "
                                        "'-' and '.' only")
                graph = bundle(path)[0]
                item["params"] = onnx_io().model_summary(graph)["params"]
                Graph(graph)  # refuses ops the trainer does not support yet, naming the nodes
            except ApiError as exc:
                item["error"] = public(exc.message)
            except GraphError as exc:
                item["error"] = public(f"{path.name}: {exc}")
            except OSError as exc:
                item["error"] = f"{path.name}: cannot be read ({exc.strerror or 'OS error'})"
            out.append(item)
        return JSONResponse(out)

    def model_graph(request: Request) -> Response:
        graph, _ = bundle(model_path(request.path_params["name"]))
        return JSONResponse(graph, headers={"Cache-Control": "no-cache"})

    def model_summary(request: Request) -> Response:
        from ..engine.summary import summarize
        graph, _ = bundle(model_path(request.path_params["name"]))
        return JSONResponse(summarize(graph), headers={"Cache-Control": "no-cache"})

    async def model_upload(request: Request) -> Response:
        """Body: the .onnx bytes; query ``filename`` (the user's file name). Kept in
        uploads_dir only when it imports AND the engine can train it; else 400 listing every
        problem. Answers ``{"name", "summary"}``."""
        from ..engine.graph import Graph, GraphError
        from ..engine.summary import summarize
        name = _upload_name(request.query_params.get("filename") or "model.onnx")
        if (models_dir / f"{name}.onnx").is_file():
            name = f"{name}-upload"
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > max_upload_bytes:
            raise ApiError(413, f"{name}.onnx is {int(declared):,} bytes; the upload limit is "
                                f"{max_upload_bytes:,} bytes")
        uploads_dir.mkdir(parents=True, exist_ok=True)
        tmp = uploads_dir / f".upload-{secrets.token_hex(8)}.onnx"
        try:
            size = 0
            with open(tmp, "wb") as f:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > max_upload_bytes:
                        raise ApiError(413, f"{name}.onnx is larger than the upload limit of "
                                            f"{max_upload_bytes:,} bytes")
                    f.write(chunk)
            if size == 0:
                raise ApiError(400, f"{name}.onnx: the upload is empty")
            try:
                graph, _ = await run_in_threadpool(onnx_io().load_bundle, tmp)
            except ValueError as exc:  # name the user's file, not the temporary one
                raise _import_error(f"{name}.onnx", exc, str(tmp)) from exc
            try:
                Graph(graph).shapes(2)
            except (GraphError, NotImplementedError) as exc:
                raise ApiError(400, f"{name}.onnx cannot be trained: {exc}",
                               _problems(exc)) from exc
            tmp.replace(uploads_dir / f"{name}.onnx")
        finally:
            tmp.unlink(missing_ok=True)
        graph["name"] = graph.get("name") or name
        return JSONResponse({"name": name, "summary": summarize(graph)})

    def model_weights(request: Request) -> Response:
        _, weights = bundle(model_path(request.path_params["name"]))
        return Response(weights, media_type="application/octet-stream",
                        headers={"Cache-Control": "no-cache"})

    async def model_export(request: Request) -> Response:
        name = request.path_params["name"]
        path = model_path(name)
        graph, blob = bundle(path)
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) != len(blob):
            raise ApiError(400, f"weights for model {name!r}: expected {len(blob)} bytes "
                                f"(bundle layout), got {declared}")
        body = await request.body()
        if len(body) != len(blob):
            raise ApiError(400, f"weights for model {name!r}: expected {len(blob)} bytes "
                                f"(bundle layout), got {len(body)}")
        try:
            prov = json.loads(request.headers.get("x-provenance") or "{}")
        except ValueError as exc:
            raise ApiError(400, f"X-Provenance is not JSON: {exc}") from exc
        if not isinstance(prov, dict):
            raise ApiError(400, "X-Provenance must be a JSON object")
        try:
            onnx_bytes = onnx_io().export_onnx(path, body, prov)
        except ValueError as exc:
            raise ApiError(400, f"export of model {name!r} failed: {exc}") from exc
        fname = f"{name}-trained.onnx"
        return Response(onnx_bytes, media_type="application/octet-stream",
                        headers={"Content-Disposition": f'attachment; filename="{fname}"'})

    # ------------------------------------------------------------ run configuration
    def config_schema(request: Request) -> Response:
        from ..engine import config
        return JSONResponse(config.schema())

    async def config_validate(request: Request) -> Response:
        """Body ``{"config": {...}, "model": name?}``: the run configuration checked by the
        engine's validator (``config.parse``) against the training images of the MNIST
        manifest (and the model's classes when ``model`` is given). Answers ``{"ok": true,
        "config": resolved config, "steps": {"per_epoch", "total", "train_images", "val_images"}}`` or
        ``{"ok": false, "errors": [[field, message], ...]}`` (200 both: a bad config is an
        answer, not a failed request); 400 when the body is not such an object."""
        from ..engine import config
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError as exc:
            raise ApiError(400, f"body is not JSON: {exc}") from exc
        if not isinstance(body, dict) or not isinstance(body.get("config", {}), dict):
            raise ApiError(400, 'body must be {"config": {...}, "model": name}')
        try:
            images = int(manifest()["splits"]["train"]["count"])
        except (ApiError, KeyError, TypeError, ValueError):
            images = config.schema_mod.MNIST_TRAIN
        classes = None
        if body.get("model"):
            from ..engine.graph import Graph, GraphError
            try:
                g = Graph(bundle(model_path(str(body["model"])))[0])
                classes = g.shapes(2)[g.output][1]
            except (ApiError, GraphError, NotImplementedError, KeyError, IndexError):
                classes = None  # the model's own problems are the model list's to show
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
        return file_response(request, path, etag=f'"{ent["sha256"][:32]}"',
                             cache=IMMUTABLE if addressed else "no-cache")

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
        Route("/api/models", api_models),
        Route("/api/models/upload", model_upload, methods=["POST"]),
        Route("/api/models/{name}/graph.json", model_graph),
        Route("/api/models/{name}/summary", model_summary),
        Route("/api/models/{name}/weights.bin", model_weights),
        Route("/api/models/{name}/export", model_export, methods=["POST"]),
        Route("/api/config/schema", config_schema),
        Route("/api/config/validate", config_validate, methods=["POST"]),
        Route("/data/mnist/manifest.json", mnist_manifest, methods=["GET", "HEAD"]),
        Route("/data/mnist/{shard:path}", mnist_shard, methods=["GET", "HEAD"]),
        Route("/vendor/pyodide/{file:path}", vendor("web/node_modules/pyodide"),
              methods=["GET", "HEAD"]),
        Route("/vendor/pyodide@{tag}/{file:path}", pyodide_pinned, methods=["GET", "HEAD"]),
        Route("/vendor/uplot/{file:path}", vendor("web/node_modules/uplot/dist"),
              methods=["GET", "HEAD"]),
        Route("/wheels/{file:path}", wheels, methods=["GET", "HEAD"]),
        *extra_routes,
        Route("/{file:path}", page, methods=["GET", "HEAD"]),  # app.js, worker.js, style.css
    ]
    app = Starlette(routes=routes, exception_handlers={
        ApiError: api_error, HTTPException: http_error, Exception: server_error})
    app.state.models = SimpleNamespace(path=model_path, bundle=bundle, dir=models_dir,
                                       uploads=uploads_dir)

    if cross_origin_isolated:
        app.add_middleware(_HeaderMiddleware)
    return app


def _import_error(shown: str, exc, path: str) -> ApiError:
    """The 400 of a model that cannot be imported, naming it ``shown`` (never the server path
    ``path``): one problem in the message, or their count with the list in ``problems``."""
    found = [str(p).replace(path, shown) for p in _problems(exc)]
    found = [p[len(shown) + 2:] if p.startswith(f"{shown}: ") else p for p in found]
    if len(found) == 1:
        message = f"{shown} cannot be imported: {found[0]}"
    else:
        message = f"{shown} cannot be imported ({len(found)} problems): " + "; ".join(found)
    return ApiError(400, message, found, getattr(exc, "hints", None))


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


def _problems(exc) -> list:
    """The problems of an import or planning error: ``OnnxImportError.problems`` when present,
    else the lines of its text."""
    found = getattr(exc, "problems", None)
    if found:
        return [str(p) for p in found]
    lines = [ln.strip(" -*\u2022") for ln in str(exc).splitlines()]
    return [ln for ln in lines if ln]


def _upload_name(filename: str) -> str:
    """A model name (NAME_RE) from a user's file name: the stem, other characters as '-'."""
    stem = Path(filename.replace("\\", "/")).name
    stem = stem[:-5] if stem.lower().endswith(".onnx") else stem
    stem = re.sub(r"[^A-Za-z0-9_.-]", "-", stem).strip(".-")[:100]
    return stem if stem and NAME_RE.match(stem) else "model"


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

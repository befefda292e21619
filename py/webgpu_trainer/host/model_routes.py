"""The models the server offers and their routes (docs/ARCHITECTURE.md, "Server routes"):
the built-in ``*.onnx`` of the models folder and the page's uploads, listed, summarised, served
as bundles, uploaded, exported with trained weights, and (uploads only) deleted.

``Models(models_dir, uploads_dir, public, max_upload_bytes)``: ``path(name)``,
``bundle(path)`` (cached by path, modification time and size), ``routes()``. Errors are
``ApiError`` (JSON ``{"error"}``), their text passed through ``public`` (no server paths).
"""

from __future__ import annotations

import re
import secrets
import threading
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .bodies import parse_json, read_body
from .build_routes import build_handler
from .memory_route import memory_handler
from .errors import NAME_RE, ApiError, import_error, problems

MAX_UPLOAD_BYTES = 64 << 20  # an uploaded .onnx (models people train on MNIST are far smaller)


def _onnx_io():
    from .. import onnx_io as mod  # lazy: keeps onnx out of start-up and of the page routes
    return mod


class Models:
    """The built-in models (``dir``) and the uploads (``uploads``); see the module docstring.
    ``public(text)``: ``text`` without server paths, for what is sent to the page."""

    def __init__(self, models_dir: Path, uploads_dir: Path, public,
                 max_upload_bytes: int = MAX_UPLOAD_BYTES):
        self.dir, self.uploads, self.public = Path(models_dir), Path(uploads_dir), public
        self.max_upload_bytes = max_upload_bytes
        self._bundles: dict = {}
        self._lock = threading.Lock()

    @staticmethod
    def check_name(name: str) -> str:
        """``name`` when it is a model name (NAME_RE, no ``..``); ApiError 400 otherwise."""
        if not NAME_RE.match(name) or ".." in name:
            raise ApiError(400, f"bad model name: {name[:60]!r}"
                                + (f"... ({len(name):,} characters)" if len(name) > 60 else ""))
        return name

    def path(self, name: str) -> Path:
        """The .onnx of model ``name``: built in first, else uploaded. ApiError 400 for a bad
        name, 404 for an unknown one."""
        self.check_name(name)
        for folder in (self.dir, self.uploads):
            path = folder / f"{name}.onnx"
            if path.is_file():
                return path
        raise ApiError(404, f"unknown model: {name!r} (no {name}.onnx in the models folder or "
                            "the uploads)")

    def bundle(self, path: Path) -> tuple[dict, bytes]:
        """``onnx_io.load_bundle(path)``, cached; ApiError 400 when it cannot be imported."""
        st = path.stat()
        key = (str(path), st.st_mtime_ns, st.st_size)
        with self._lock:
            if key not in self._bundles:
                try:
                    self._bundles[key] = _onnx_io().load_bundle(path)
                except ValueError as exc:  # OnnxImportError is a ValueError
                    raise import_error(path.name, exc, str(path)) from exc
            return self._bundles[key]

    def classes(self, name: str) -> int | None:
        """The classes of model ``name`` (its output's width at batch 2), or None when it is
        unknown or cannot be planned (the model list names those problems)."""
        from ..engine.graph import Graph, GraphError
        try:
            g = Graph(self.bundle(self.path(name))[0])
            return int(g.shapes(2)[g.output][1])
        except (ApiError, GraphError, NotImplementedError, KeyError, IndexError, TypeError):
            return None

    def routes(self) -> list:
        return [
            Route("/api/models", self.listing),
            Route("/api/models/upload", self.upload, methods=["POST"]),
            Route("/api/models/build", build_handler(self), methods=["POST"]),
            Route("/api/models/{name}/graph.json", self.graph),
            Route("/api/models/{name}/summary", self.summary),
            Route("/api/models/{name}/memory", memory_handler(self)),
            Route("/api/models/{name}/weights.bin", self.weights),
            Route("/api/models/{name}/export", self.export, methods=["POST"]),
            # {name:path}: a name with '/' in it is refused here (400), not by another route
            Route("/api/models/{name:path}", self.delete, methods=["DELETE"]),
        ]

    # ------------------------------------------------------------ routes
    def listing(self, request: Request) -> Response:
        """``[{"name", "file", "bytes", "params", "uploaded", "error"?, "layers"?,
        "built_for"?}]``: the built-in models, then the uploads whose name no built-in model
        has; ``layers``: the page builder's layer list of a model it built (its metadata,
        ``onnx_io.build``), ``built_for``: ``{"input", "classes"}`` it was built for."""
        from ..engine.graph import Graph, GraphError
        paths = sorted(self.dir.glob("*.onnx"))
        if self.uploads.is_dir():
            taken = {p.stem for p in paths}
            paths += [p for p in sorted(self.uploads.glob("*.onnx")) if p.stem not in taken]
        out = []
        for path in paths:
            item = {"name": path.stem, "file": path.name, "bytes": None, "params": None,
                    "uploaded": path.parent == self.uploads}
            try:
                item["bytes"] = path.stat().st_size
                if not NAME_RE.match(path.stem) or ".." in path.stem:
                    raise ApiError(400, f"file name {path.name!r}: use letters, digits, '_', "
                                        "'-' and '.' only")
                graph = self.bundle(path)[0]
                item["params"] = _onnx_io().model_summary(graph)["params"]
                g = Graph(graph)  # refuses ops the trainer does not support yet, naming nodes
                if "layers" in graph:  # built in the page: its layer list (onnx_io.build)
                    item["layers"] = graph["layers"]
                    # and the shape it was built for (POST /api/models/build's input, classes)
                    item["built_for"] = {"input": list(g.shapes(1)[g.input["name"]][1:]),
                                         "classes": int(g.shapes(1)[g.output][1])}
            except ApiError as exc:
                item["error"] = self.public(exc.message)
            except GraphError as exc:
                item["error"] = self.public(f"{path.name}: {exc}")
            except OSError as exc:
                item["error"] = f"{path.name}: cannot be read ({exc.strerror or 'OS error'})"
            out.append(item)
        return JSONResponse(out)

    def graph(self, request: Request) -> Response:
        graph, _ = self.bundle(self.path(request.path_params["name"]))
        return JSONResponse(graph, headers={"Cache-Control": "no-cache"})

    def summary(self, request: Request) -> Response:
        from ..engine.tools.summary import summarize
        graph, _ = self.bundle(self.path(request.path_params["name"]))
        return JSONResponse(summarize(graph), headers={"Cache-Control": "no-cache"})

    def weights(self, request: Request) -> Response:
        _, weights = self.bundle(self.path(request.path_params["name"]))
        return Response(weights, media_type="application/octet-stream",
                        headers={"Cache-Control": "no-cache"})

    async def upload(self, request: Request) -> Response:
        """Body: the .onnx bytes; query ``filename`` (the user's file name). Kept in the
        uploads only when it imports AND the engine can train it; else 400 listing every
        problem. Answers ``{"name", "summary"}``."""
        from ..engine.graph import Graph, GraphError
        from ..engine.tools.summary import summarize
        limit = self.max_upload_bytes
        name = upload_name(request.query_params.get("filename") or "model.onnx")
        if (self.dir / f"{name}.onnx").is_file() or name.startswith("built-"):
            name = f"{name}-upload"  # built-<hash> is the builder's (host/build_routes.py)
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"{name}.onnx is {int(declared):,} bytes; the upload limit is "
                                f"{limit:,} bytes")
        self.uploads.mkdir(parents=True, exist_ok=True)
        tmp = self.uploads / f".upload-{secrets.token_hex(8)}.onnx"
        try:
            size = 0
            with open(tmp, "wb") as f:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise ApiError(413, f"{name}.onnx is larger than the upload limit of "
                                            f"{limit:,} bytes")
                    f.write(chunk)
            if size == 0:
                raise ApiError(400, f"{name}.onnx: the upload is empty")
            try:
                graph, _ = await run_in_threadpool(_onnx_io().load_bundle, tmp)
            except ValueError as exc:  # name the user's file, not the temporary one
                raise import_error(f"{name}.onnx", exc, str(tmp)) from exc
            try:
                Graph(graph).shapes(2)
            except (GraphError, NotImplementedError) as exc:
                raise ApiError(400, f"{name}.onnx cannot be trained: {exc}",
                               problems(exc)) from exc
            tmp.replace(self.uploads / f"{name}.onnx")
        finally:
            tmp.unlink(missing_ok=True)
        graph["name"] = name  # the loader named it after the temporary file
        return JSONResponse({"name": name, "summary": summarize(graph)})

    async def export(self, request: Request) -> Response:
        name = request.path_params["name"]
        path = self.path(name)
        graph, blob = self.bundle(path)
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) != len(blob):
            raise ApiError(400, f"weights for model {name!r}: expected {len(blob)} bytes "
                                f"(bundle layout), got {declared}")
        body = await read_body(request, len(blob), f"weights for model {name!r}")
        if len(body) != len(blob):
            raise ApiError(400, f"weights for model {name!r}: expected {len(blob)} bytes "
                                f"(bundle layout), got {len(body)}")
        prov = parse_json(request.headers.get("x-provenance") or "{}", "X-Provenance")
        if not isinstance(prov, dict):
            raise ApiError(400, "X-Provenance must be a JSON object")
        try:
            onnx_bytes = _onnx_io().export_onnx(path, body, prov)
        except ValueError as exc:
            raise ApiError(400, f"export of model {name!r} failed: {exc}") from exc
        fname = f"{name}-trained.onnx"
        return Response(onnx_bytes, media_type="application/octet-stream",
                        headers={"Content-Disposition": f'attachment; filename="{fname}"'})

    def delete(self, request: Request) -> Response:
        """DELETE an uploaded model: its file leaves the uploads -> ``{"deleted": name}``.
        400 for a bad name (``/``, ``..``, ...), 403 for a built-in model, 404 for an
        unknown one. (The page offers it only while no training runs.)"""
        name = self.check_name(request.path_params["name"])
        if (self.dir / f"{name}.onnx").is_file():
            raise ApiError(403, f"{name} is a built-in model (models/{name}.onnx) and cannot be "
                                "deleted; only models uploaded from the page can")
        path = self.uploads / f"{name}.onnx"
        if not path.is_file():
            raise ApiError(404, f"no uploaded model named {name!r}")
        path.unlink()
        with self._lock:
            self._bundles = {k: v for k, v in self._bundles.items() if k[0] != str(path)}
        return JSONResponse({"deleted": name})


def upload_name(filename: str) -> str:
    """A model name (NAME_RE) from a user's file name: the stem, other characters as '-'."""
    stem = Path(filename.replace("\\", "/")).name
    stem = stem[:-5] if stem.lower().endswith(".onnx") else stem
    stem = re.sub(r"[^A-Za-z0-9_.-]", "-", stem).strip(".-")[:100]
    return stem if stem and NAME_RE.match(stem) else "model"

"""The page's own files and what it loads besides (docs/ARCHITECTURE.md, "Server routes"): the
files of ``web/`` (:meth:`PageFiles.page`, the one place a URL becomes a file of ``web/``), the
vendored libraries of ``web/node_modules`` (Pyodide by version, uPlot, idb-keyval, fflate) and the
engine wheel (built on demand, ``wheel.ensure_wheel``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .errors import ApiError
from .files import IMMUTABLE, file_response, safe_join, web_file

GET = ["GET", "HEAD"]


class PageFiles:
    """The static routes of the repository ``root`` (``web/`` there) and of ``wheels_dir``."""

    def __init__(self, root: Path, wheels_dir: Path):
        self.root, self.web, self.wheels_dir = root, root / "web", wheels_dir
        self._versions: dict = {}  # "pyodide" -> (package.json's mtime and size, tag)

    def routes(self) -> list:
        """Every static route but the page files' catch-all (:meth:`page_route`)."""
        return [
            Route("/", self.page, methods=GET),
            Route("/api/wheel", self.api_wheel),
            Route("/vendor/pyodide/{file:path}", self.vendor("web/node_modules/pyodide"),
                  methods=GET),
            Route("/vendor/pyodide@{tag}/{file:path}", self.pyodide_pinned, methods=GET),
            Route("/vendor/uplot/{file:path}", self.vendor("web/node_modules/uplot/dist"),
                  methods=GET),
            Route("/vendor/idb-keyval/{file:path}",
                  self.vendor("web/node_modules/idb-keyval/dist"), methods=GET),
            Route("/vendor/fflate/{file:path}", self.vendor("web/node_modules/fflate/esm"),
                  methods=GET),
            Route("/wheels/{file:path}", self.wheels, methods=GET),
        ]

    def page_route(self) -> Route:
        """The page files (/page/app.js, /lib/util.js; / the trainer page): the last route,
        matched when no other one is."""
        return Route("/{file:path}", self.page, methods=GET)

    def page(self, request: Request) -> Response:
        """A file of ``web/`` by its URL (``files.web_file``); 404 for other kinds of file."""
        return file_response(request, web_file(self.web, request.path_params.get("file", "")))

    def vendor(self, sub: str):
        """The handler serving the files of the folder ``root/sub``."""
        def handler(request: Request) -> Response:
            return file_response(request, safe_join(self.root / sub, request.path_params["file"]))
        return handler

    def api_wheel(self, request: Request) -> Response:
        """``{"url", "pyodide"}``: the engine wheel (built when the sources changed) and the
        versioned Pyodide folder."""
        from .wheel import ensure_wheel
        path = ensure_wheel(self.wheels_dir, self.root)
        return JSONResponse({"url": f"/wheels/{path.name}",
                             "pyodide": f"/vendor/pyodide@{self.pyodide_tag()}/"})

    def pyodide_tag(self) -> str:
        """The installed Pyodide's version and npm integrity hash (web/package-lock.json):
        ``/vendor/pyodide@TAG/`` names exactly these files, so they are served immutable."""
        pkg = self.web / "node_modules" / "pyodide" / "package.json"
        key = (pkg.stat().st_mtime_ns, pkg.stat().st_size) if pkg.is_file() else None
        if self._versions.get("pyodide", (None,))[0] != key:
            version, integrity = "none", ""
            try:
                version = json.loads(pkg.read_text())["version"]
                lock = json.loads((self.web / "package-lock.json").read_text())
                integrity = lock["packages"]["node_modules/pyodide"].get("integrity", "")
            except (OSError, ValueError, KeyError):
                pass
            digest = hashlib.sha256(integrity.encode()).hexdigest()[:10]
            self._versions["pyodide"] = (key, f"{version}-{digest}")
        return self._versions["pyodide"][1]

    def pyodide_pinned(self, request: Request) -> Response:
        if request.path_params["tag"] != self.pyodide_tag():
            raise ApiError(404, f"not found: Pyodide {request.path_params['tag']} (this "
                                f"server has {self.pyodide_tag()})")
        path = safe_join(self.web / "node_modules" / "pyodide", request.path_params["file"])
        return file_response(request, path, cache=IMMUTABLE)

    def wheels(self, request: Request) -> Response:
        name = request.path_params["file"]
        if not name.endswith(".whl"):
            raise ApiError(404, f"not found: {name}")
        return file_response(request, safe_join(self.wheels_dir, name))

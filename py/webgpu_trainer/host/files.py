"""Serving files safely: the content types, ``safe_join`` (a request's path inside one folder,
or 400 / 404 before the disk is touched) and ``file_response`` (Range, HEAD, ETag, 304)."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.staticfiles import StaticFiles

from .errors import ApiError

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

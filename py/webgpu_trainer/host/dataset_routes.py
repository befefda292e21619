"""Own datasets uploaded from the page (docs/ARCHITECTURE.md, "Server routes"):

- ``POST /api/datasets?name=NAME[&title=T]`` and the reading options ``test``, ``seed`` and,
  for a zip, ``size`` and ``color``, for a CSV, ``label`` (``datasets.OPTIONS``: one the upload's
  kind does not take is refused, 422, as ``webgpu-trainer data`` refuses it; a key neither
  route takes, or one given twice, is refused, 400, naming it: ``check_query``), body:
  a .zip of class folders (``datasets/images.py``) or a CSV table (``datasets/table.py``; told
  apart by the zip's signature) -> prepared in a worker thread -> ``store.write_dataset``
  (atomic: an existing own dataset NAME is replaced in one rename, kept unchanged on any
  error) -> 201 with the manifest's summary and notes. ``file``: the user's file name, which
  the summary's source and the messages show (default "upload.zip" / "upload.csv", "the
  upload"; never the temp file's ``.upload-...``).
- ``POST /api/datasets/scan`` (same body) -> the zip's preview (``images.scan``), or a CSV's
  columns and classes; nothing written.

The body is streamed to a temp file inside the data root (413 past ``max_bytes``, by
Content-Length before reading). Errors are ``ApiError`` 400 naming the problem (its text
through ``public``: no server paths); the names of built-in datasets are refused.
"""

from __future__ import annotations

import secrets
import threading
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .bodies import body_chunks
from .text import hidden_character
from .datafiles import DataError
from .datasets import BUILT_IN, OPTIONS, images, refused_option, table
from .datasets.images import check_size
from .datasets.split import check_seed
from .errors import ApiError

MAX_DATASET_UPLOAD_BYTES = 512 << 20
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
READ_OPTIONS = ("label", "size", "color", "test", "seed")
QUERY_KEYS = ("name", "title", "file") + READ_OPTIONS  # both routes' (scan: name unused)
KEY_SHOWN = 40  # characters of an unknown key a message quotes
FILE_SHOWN = 80  # characters of the user's file name (``file=``) a summary or message shows


def check_query(q, takes: tuple, route: str) -> None:
    """ApiError 400 for a query key ``route`` does not take (``takes``), or one given more than
    once, naming it: ``ascii`` so that a look-alike (a Cyrillic 'а' in "nаme") shows as
    ``\\u0430``, cut to ``KEY_SHOWN`` characters with its length named. Checked before the
    body is read: nothing is written. (The reading options a source kind does not take are
    ``datasets.refused_option``'s, 422.)"""
    keys = [k for k, _ in q.multi_items()]
    for key in keys:
        if key not in takes:
            shown = ascii(key)
            if len(shown) > KEY_SHOWN:
                shown = f"{shown[:KEY_SHOWN]}... ({len(key):,} characters)"
            raise ApiError(400, f"{route}: unknown query parameter {shown}; it takes "
                                f"{', '.join(takes)}")
        if keys.count(key) > 1:
            raise ApiError(400, f"{route}: query parameter {key!r} is given {keys.count(key)} "
                                "times; give it once")


def shown_file(q) -> str | None:
    """The user's file name that the page sends as ``file=`` (its last path part, cut to
    ``FILE_SHOWN`` characters), for the summary's source and the messages in place of the
    temp file's; None when not given, or when the name has a control or invisible formatting
    character (``hidden_character``: it would show as another name; the label is cosmetic,
    so the upload goes on as "the upload")."""
    name = q.get("file", "").replace("\\", "/").rsplit("/", 1)[-1].strip()
    if not name or hidden_character(name):
        return None
    return name if len(name) <= FILE_SHOWN else name[:FILE_SHOWN - 3] + "..."


class DatasetUploads:
    """The upload and scan routes over the data root ``root``; ``public(text)``: ``text``
    without server paths."""

    def __init__(self, root: Path, public, max_bytes: int = MAX_DATASET_UPLOAD_BYTES):
        self.root, self.public, self.max_bytes = Path(root), public, max_bytes
        self._lock = threading.Lock()  # one dataset written at a time

    def routes(self) -> list:
        return [Route("/api/datasets", self.upload, methods=["POST"]),
                Route("/api/datasets/scan", self.scan, methods=["POST"])]

    async def _receive(self, request: Request, what: str) -> Path:
        """The body in a temp file inside the root (the caller removes it): 413 over the
        limit (by Content-Length before reading), 408 for a stalled client, 400 if empty."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".upload-{secrets.token_hex(8)}"
        size = 0
        try:
            with open(tmp, "wb") as f:
                async for chunk in body_chunks(request, self.max_bytes, what,
                                               "the upload limit"):
                    size += len(chunk)
                    f.write(chunk)
            if size == 0:
                raise ApiError(400, f"{what}: the upload is empty (send a .zip of class "
                                    "folders or a .csv table)")
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp

    @staticmethod
    def _is_zip(path: Path) -> bool:
        with open(path, "rb") as f:
            return f.read(4) in _ZIP_MAGIC

    def _params(self, request: Request) -> dict:
        """The query's name, title (default the name) and reading options (``options``: those
        given, ``READ_OPTIONS``), checked: 400 naming the parameter and the rule."""
        from .datasets import store
        q = request.query_params
        check_query(q, QUERY_KEYS, "POST /api/datasets")
        name = q.get("name", "")
        try:
            store.check_name(name)
        except DataError as exc:
            raise ApiError(400, str(exc)) from None
        if name in BUILT_IN:
            raise ApiError(400, f"dataset name {name!r} is a built-in dataset's: choose "
                                "another name")
        title = " ".join(q.get("title", "").split())[:60] or name  # shown in the page's picker
        return {"name": name, "title": title, "options": self._options(q),
                "file": shown_file(q)}

    @staticmethod
    def _options(q) -> dict:
        """The reading options given in the query ``q`` (an empty one is not given); size and
        seed checked: 400 naming the value."""
        options = {k: q[k] for k in READ_OPTIONS if q.get(k)}
        try:
            if "size" in options:
                options["size"] = check_size(options["size"])
            if "seed" in options:
                seed = options["seed"]
                options["seed"] = check_seed(int(seed) if seed.isdigit() else seed)
        except DataError as exc:
            raise ApiError(400, str(exc)) from None
        return options

    def _kind(self, tmp: Path, options: dict):
        """The ``read`` of the upload's source kind (a zip of photos or a CSV table); 422
        naming an option that kind does not take (``datasets.refused_option``)."""
        read = images.read if self._is_zip(tmp) else table.read
        refused = refused_option(read, options)
        if refused:
            raise ApiError(422, f"{refused[0]}= applies to {refused[1]} only, and the upload "
                                f"is {OPTIONS[read][0]}: leave it out")
        return read

    def _prepare(self, tmp: Path, p: dict) -> dict:
        """Read the upload and write the dataset (in a worker thread); the manifest."""
        from .datasets import store
        read = self._kind(tmp, p["options"])
        arrays = read(tmp, lambda _msg: None, **p["options"])
        arrays.source = arrays.source.replace(  # the user's file name, never the temp file's
            tmp.name, p["file"] or ("upload.zip" if read is images.read else "upload.csv"))
        arrays.title = p["title"]
        with self._lock:
            return store.write_dataset(self.root, p["name"], arrays, lambda _msg: None)

    def _error(self, exc: DataError, tmp: Path, shown: str) -> ApiError:
        return ApiError(400, self.public(str(exc).replace(tmp.name, shown)))

    async def upload(self, request: Request) -> Response:
        """POST /api/datasets: see the module docstring. 201 ``{"dataset": summary, "notes",
        "source"}``."""
        from .datasets import store
        params = self._params(request)
        tmp = await self._receive(request, f"the upload for dataset {params['name']!r}")
        try:
            try:
                manifest = await run_in_threadpool(self._prepare, tmp, params)
            except DataError as exc:
                raise self._error(exc, tmp, params["file"] or "the upload") from None
        finally:
            tmp.unlink(missing_ok=True)
        return JSONResponse({"dataset": store.summary(manifest), "notes": manifest["notes"],
                             "source": manifest["source"]}, 201)

    async def scan(self, request: Request) -> Response:
        """POST /api/datasets/scan: a zip's preview (``images.scan``) or a CSV's (``{"kind":
        "table", "classes": [{"name", "count"}], "features", "rows", "notes"}``)."""
        check_query(request.query_params, QUERY_KEYS, "POST /api/datasets/scan")
        options = self._options(request.query_params)
        shown = shown_file(request.query_params) or "the upload"
        tmp = await self._receive(request, "the upload to preview")
        try:
            try:
                out = await run_in_threadpool(self._scan, tmp, options)
            except DataError as exc:
                raise self._error(exc, tmp, shown) from None
        finally:
            tmp.unlink(missing_ok=True)
        return JSONResponse(out)

    def _scan(self, tmp: Path, options: dict) -> dict:
        import numpy as np
        if self._kind(tmp, options) is images.read:
            return {"kind": "image", **images.scan(tmp)}
        a = table.read_table(tmp, **options)
        counts = np.bincount(np.concatenate([a.train_y, a.test_y]), minlength=len(a.classes))
        return {"kind": "table", "classes": [{"name": c, "count": int(n)}
                                             for c, n in zip(a.classes, counts)],
                "features": int(a.train_x.shape[1]), "rows": int(counts.sum()),
                "notes": a.notes}

"""The MNIST shards the page trains on (docs/ARCHITECTURE.md, "Server routes"): the cache's
manifest and its shards, each checked against the manifest's sha256 once per file version,
served gzip-encoded when the client takes it (``shard_gzip``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .errors import NAME_RE, ApiError
from .files import IMMUTABLE, file_response, safe_join
from .shard_gzip import accepts_gzip, gzip_copy


class Mnist:
    """The MNIST cache ``data_dir`` (manifest.json and the shards it names)."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self._verified: dict = {}  # shard name -> (name, size, mtime) whose sha256 matched

    def routes(self) -> list:
        return [
            Route("/data/mnist/manifest.json", self.manifest_file, methods=["GET", "HEAD"]),
            Route("/data/mnist/{shard:path}", self.shard, methods=["GET", "HEAD"]),
        ]

    def train_images(self) -> int:
        """The training split's images by the MNIST manifest (MNIST's 60,000 without one)."""
        from ..engine import config
        try:
            return int(self.manifest()["splits"]["train"]["count"])
        except (ApiError, KeyError, TypeError, ValueError):
            return config.schema_mod.MNIST_TRAIN

    def manifest(self) -> dict:
        """The parsed manifest.json; ApiError 404 without one, 500 when it is not JSON."""
        path = self.data_dir / "manifest.json"
        if not path.is_file():
            raise ApiError(404, "MNIST manifest not found: run `webgpu-trainer data` first")
        try:
            return json.loads(path.read_text())
        except ValueError as exc:
            raise ApiError(500, f"MNIST manifest is not valid JSON: {exc}") from exc

    def manifest_file(self, request: Request) -> Response:
        self.manifest()  # validates
        return file_response(request, self.data_dir / "manifest.json",
                             media_type="application/json")

    def shard(self, request: Request) -> Response:
        """A shard the manifest names, whole or by Range; immutable when its name holds its
        hash."""
        name = request.path_params["shard"]
        if "/" in name or not NAME_RE.match(name):
            raise ApiError(400, f"bad shard name: {name!r}")
        entries = {e["file"]: e for s in self.manifest().get("splits", {}).values()
                   for e in s.values() if isinstance(e, dict) and "file" in e}
        if name not in entries:
            raise ApiError(404, f"shard {name} is not in the MNIST manifest")
        try:
            path = safe_join(self.data_dir, name)
        except ApiError as exc:
            if exc.status == 404:
                exc.message = (f"shard {name} is missing from the MNIST cache; run "
                               "`webgpu-trainer data` to rebuild the cache")
            raise
        ent = entries[name]
        self._verify(name, path, ent)
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

    def _verify(self, name: str, path: Path, ent: dict) -> None:
        """The shard's sha256 against the manifest, once per file version (~0.1 s for 47 MB);
        ApiError 500 when it differs."""
        st = path.stat()
        key = (name, st.st_size, st.st_mtime_ns)
        if self._verified.get(name) == key:
            return
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
        if h.hexdigest() != ent.get("sha256"):
            raise ApiError(500, f"shard {name} is corrupt: sha256 {h.hexdigest()[:12]}... "
                                f"!= manifest {str(ent.get('sha256'))[:12]}...; run "
                                "`webgpu-trainer data` to rebuild the cache")
        self._verified[name] = key

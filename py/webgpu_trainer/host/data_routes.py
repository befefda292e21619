"""The prepared datasets the page trains on (docs/ARCHITECTURE.md, "Server routes";
/work contract: DATASETS.md): ``GET /api/datasets`` lists them, ``/data/<name>/manifest.json``
and ``/data/<name>/<shard>`` serve each one's manifest and shards, each shard checked against
the manifest's sha256 once per file version and served gzip-encoded when the client takes it
(``shard_gzip``). ``<name>`` is a folder of the data root, or the ``--data-dir`` dataset (the
default, also reachable as ``/data/mnist/`` as before)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .errors import NAME_RE, ApiError
from .files import IMMUTABLE, file_response, safe_join
from .shard_gzip import accepts_gzip, gzip_copy

DATASET_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")  # DATASETS.md; used with fullmatch


def shown_name(name: str) -> str:
    """``name`` as an error shows it: quoted, cut to 48 characters."""
    return repr(name if len(name) <= 48 else name[:45] + "...")


def summary(name: str, manifest) -> dict:
    """The ``GET /api/datasets`` entry of dataset ``name`` (DATASETS.md) from its parsed
    manifest (read by ``DataSpec.from_manifest``: the old ``mnist@1`` format as MNIST);
    ValueError naming the field that is missing or wrong, or a shard file that is no plain
    name inside the dataset's folder."""
    from ..engine.train.data import DataSpec
    spec = DataSpec.from_manifest(manifest)
    splits = manifest.get("splits")
    if not isinstance(splits, dict) or not {"train", "test"} <= splits.keys():
        raise ValueError("manifest.json has no 'splits' with 'train' and 'test'")
    size = 0
    for split, entries in splits.items():
        if not isinstance(entries, dict):
            raise ValueError(f"manifest.json: splits.{split} is not an object")
        for field in ("images", "labels"):
            ent = entries.get(field)
            file = ent.get("file") if isinstance(ent, dict) else None
            if not isinstance(file, str) or "/" in file or not NAME_RE.fullmatch(file):
                raise ValueError(f"manifest.json: splits.{split}.{field}.file is not a file "
                                 f"name in the dataset's folder: {shown_name(str(file))}")
            size += int(ent.get("bytes") or 0)
    shape = list(spec.sample_shape)
    return {"name": name, "title": spec.title[:80], "kind": spec.kind,
            "sample_shape": [1, *shape] if spec.kind == "image" and len(shape) == 2 else shape,
            "classes": list(spec.classes), "train": splits["train"].get("count"),
            "test": splits["test"].get("count"), "bytes": size}


class Datasets:
    """The datasets under ``data_root`` (``<root>/<name>/manifest.json`` and its shards) and
    the ``data_dir`` one, the default, named by its manifest (old format: "mnist")."""

    def __init__(self, data_dir: Path, data_root: Path):
        self.data_dir, self.data_root = Path(data_dir), Path(data_root)
        self._verified: dict = {}  # (folder, shard) -> (size, mtime) whose sha256 matched

    def routes(self) -> list:
        return [
            Route("/api/datasets", self.list_route, methods=["GET"]),
            Route("/data/{name}/manifest.json", self.manifest_file, methods=["GET", "HEAD"]),
            Route("/data/{name}/{shard:path}", self.shard, methods=["GET", "HEAD"]),
        ]

    def default_name(self) -> str:
        """The ``data_dir`` dataset's name: its manifest's, "mnist" for the old format or
        without a readable manifest."""
        try:
            name = json.loads((self.data_dir / "manifest.json").read_text()).get("name")
        except (OSError, ValueError, AttributeError, RecursionError):
            return "mnist"
        return name if isinstance(name, str) and DATASET_RE.fullmatch(name) else "mnist"

    def folder(self, name: str) -> Path:
        """The folder of dataset ``name``; ApiError 400 for a name outside DATASETS.md's
        pattern, 404 naming it when there is no such dataset."""
        if not DATASET_RE.fullmatch(name):
            raise ApiError(400, f"bad dataset name {shown_name(name)}: names are 1-40 of a-z, "
                                "0-9, '_' and '-', starting with a letter or digit")
        folder = self.data_root / name
        if name == self.default_name():
            return self.data_dir
        if not (folder / "manifest.json").is_file():
            if name == "mnist":  # the --data-dir dataset, whatever it holds, as before
                return self.data_dir
            raise ApiError(404, f"dataset {name!r} not found: prepare it with "
                                f"`webgpu-trainer data` (see `webgpu-trainer datasets`)")
        return folder

    def train_images(self, name=None) -> int:
        """The training split's size of dataset ``name`` (default: the default one; one this
        server does not have: the default one's; MNIST's 60,000 without a readable count)."""
        from ..engine import config
        if not isinstance(name, str) or not DATASET_RE.fullmatch(name):
            name = self.default_name()
        try:
            m = json.loads((self.folder(name) / "manifest.json").read_text())
            return int(m["splits"]["train"]["count"])
        except ApiError:
            return self.train_images() if name != self.default_name() else \
                config.schema_mod.MNIST_TRAIN
        except (OSError, KeyError, TypeError, ValueError, RecursionError):
            return config.schema_mod.MNIST_TRAIN

    def missing(self, name) -> str | None:
        """Why dataset ``name`` cannot be trained on here ("dataset 'x' not found: prepare it
        ..."), or None when this server has it (None, "" or "mnist" name the default)."""
        if not name:
            return None
        try:
            self.folder(str(name))
        except ApiError as exc:
            return exc.message
        return None

    def fit_manifest(self, name=None) -> dict | None:
        """The manifest of the dataset ``train_images(name)`` counts (the default one for a
        name this server does not have), for checking a model against it; None when it cannot
        be read (nothing to check against)."""
        if not isinstance(name, str) or not DATASET_RE.fullmatch(name):
            name = self.default_name()
        try:
            return self.manifest(name)
        except ApiError:
            return self.fit_manifest() if name != self.default_name() else None

    def manifest(self, name: str) -> dict:
        """Dataset ``name``'s parsed and checked manifest.json; ApiError 404 without one, 500
        when it is not JSON or not a dataset manifest (naming the field)."""
        path = self.folder(name) / "manifest.json"
        if not path.is_file():
            raise ApiError(404, f"{name} manifest not found: run `webgpu-trainer data` first")
        try:
            manifest = json.loads(path.read_text())
            summary(name, manifest)
        except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deep
            raise ApiError(500, f"dataset {name}: {str(exc)[:300]}") from exc
        return manifest

    def datasets(self) -> tuple[list, list]:
        """``(summaries, problems)``: every dataset of the data root and the default one,
        sorted by name; a folder whose manifest does not read is left out, named in
        ``problems``."""
        found, problems = {}, []
        default = self.default_name()
        folders = sorted(self.data_root.iterdir()) if self.data_root.is_dir() else []
        for folder in [*folders, self.data_dir]:
            name = default if folder == self.data_dir else folder.name
            if not DATASET_RE.fullmatch(name) or not (folder / "manifest.json").is_file():
                continue
            if folder != self.data_dir and name == default:
                continue  # the --data-dir dataset serves that name
            try:
                found[name] = summary(name, json.loads((folder / "manifest.json").read_text()))
            except (OSError, ValueError, RecursionError) as exc:
                problems.append(f"{name}: {str(exc)[:300]}")
        return [found[n] for n in sorted(found)], problems

    def list_route(self, request: Request) -> Response:
        items, problems = self.datasets()
        body = {"datasets": items, "default": self.default_name()}
        if problems:
            body["problems"] = problems
        return JSONResponse(body, headers={"Cache-Control": "no-cache"})

    def manifest_file(self, request: Request) -> Response:
        name = request.path_params["name"]
        self.manifest(name)  # validates
        return file_response(request, self.folder(name) / "manifest.json",
                             media_type="application/json")

    def shard(self, request: Request) -> Response:
        """A shard the manifest names, whole or by Range; immutable when its name holds its
        hash."""
        dataset, name = request.path_params["name"], request.path_params["shard"]
        folder = self.folder(dataset)
        if "/" in name or not NAME_RE.fullmatch(name):
            raise ApiError(400, f"bad shard name: {shown_name(name)}")
        entries = {e["file"]: e for s in self.manifest(dataset)["splits"].values()
                   for e in s.values() if isinstance(e, dict) and "file" in e}
        if name not in entries:
            raise ApiError(404, f"shard {name} is not in the {dataset} manifest")
        try:
            path = safe_join(folder, name)
        except ApiError as exc:
            if exc.status == 404:
                exc.message = (f"shard {name} is missing from the {dataset} dataset; run "
                               "`webgpu-trainer data` to prepare it again")
            raise
        ent = entries[name]
        self._verify(folder, name, path, ent)
        addressed = str(ent["sha256"])[:12] in name
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

    def _verify(self, folder: Path, name: str, path: Path, ent: dict) -> None:
        """The shard's sha256 against the manifest, once per file version (~0.1 s for 47 MB);
        ApiError 500 when it differs."""
        st = path.stat()
        key, version = (str(folder), name), (st.st_size, st.st_mtime_ns)
        if self._verified.get(key) == version:
            return
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
        if h.hexdigest() != ent.get("sha256"):
            raise ApiError(500, f"shard {name} is corrupt: sha256 {h.hexdigest()[:12]}... "
                                f"!= manifest {str(ent.get('sha256'))[:12]}...; run "
                                "`webgpu-trainer data` to rebuild the cache")
        self._verified[key] = version

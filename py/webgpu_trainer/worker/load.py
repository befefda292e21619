"""What a run loads before it trains: the run configuration checked again, the model (graph and
weights) and the run's dataset (config ``dataset``: its manifest and shards under
``/data/<dataset>/``), fetched from the page's server. Used by ``main`` (a run) and ``views``
(``prepare``).

The shards stream in with ``download`` messages to the page (``{shard, of, what, loaded,
total, elapsed_s}``, a few a second: web/page/dataset.js shows bytes, MB/s and the time left);
a dataset that cannot fit (``data.check_size``: one sample over the GPU's buffer limit, or
more than ``MAX_DATA_BYTES``) is refused from its manifest, before any shard is downloaded."""

import json
import time
from urllib.parse import parse_qs

from ..engine import config as run_config
from ..engine.errors import UserError
from ..engine.train import data_tokens
from ..engine.train.data import DataSpec, Split, check_run, check_size
from ..engine.train.gpu_engine import GpuEngine
from .bridge import (STATE, HttpError, fetch, fetch_bytes, page_query, test_hooks_allowed,
                     to_bytes)

MAX_DATA_BYTES = 2 ** 30  # the most this page holds of a dataset (as dataset.js MAX_BYTES)
REPORT_S = 0.25  # seconds between two download messages of one shard


class ModelGone(UserError, RuntimeError):
    """The run's model answered 404: deleted on the server after the page listed it.
    ``model``: its name (the page says so, and a resumed run keeps its checkpoint)."""

    def __init__(self, model: str):
        super().__init__(f"model {model!r} is no longer on the server (it was deleted after "
                         "the page listed it); choose another model")
        self.model = model


async def _model_file(model: str, file: str, what: str):
    """The response of ``/api/models/<model>/<file>``; ModelGone on a 404."""
    try:
        return await fetch(f"/api/models/{model}/{file}", what)
    except HttpError as exc:
        if exc.status == 404:
            raise ModelGone(model) from None
        raise


def engine(dev) -> GpuEngine:
    """A ``GpuEngine`` on ``dev``; a worker started with ``?test=1&chunk=N`` cuts the data
    into buffers of at most N bytes (the browser tests' chunked path)."""
    query = parse_qs(page_query().lstrip("?"))
    chunk = query.get("chunk", [""])[0] if test_hooks_allowed() else ""
    return GpuEngine(dev, chunk_bytes=int(chunk) if chunk.isdigit() and int(chunk) else None)


async def _shard(url: str, what: str, total: int, index: tuple, say):
    """One shard's bytes (a JS Uint8Array), with ``download`` messages while it streams."""
    start = last = time.monotonic()

    def progress(loaded):
        nonlocal last
        now = time.monotonic()
        if now - last >= REPORT_S or loaded == total:
            last = now
            say("download", shard=index[0], of=index[1], what=what, loaded=loaded,
                total=total, elapsed_s=now - start)
    if total == 0:
        progress(0)
    return await fetch_bytes(url, what, total, progress)


async def _splits(manifest: dict, spec: DataSpec, base: str, say) -> tuple:
    """The manifest's train and test ``Split``s (shards under ``base``), samples of
    ``spec``."""
    shards = [(name, kind, s["count"] * (spec.sample_bytes if kind == "images" else 1))
              for name in ("train", "test") for s in [manifest["splits"][name]]
              for kind in ("images", "labels")]
    got = {}
    for i, (name, kind, total) in enumerate(shards):
        entry = manifest["splits"][name][kind]
        what = f"{spec.title} {'training' if name == 'train' else name} {kind}"
        got[name, kind] = await _shard(f"{base}/{entry['file']}", what, total,
                                       (i + 1, len(shards)), say)
    return tuple(Split(got[name, "images"], got[name, "labels"],
                       manifest["splits"][name]["count"], to_bytes(got[name, "labels"]), spec)
                 for name in ("train", "test"))


async def load(cfg: dict, model: str, say) -> tuple:
    """``(config, graph, weights, train split, test split)`` of a run of ``model``: the config
    checked (``run_config.parse``: ConfigError), the model and the dataset fetched (refused
    first when it cannot fit: ValueError naming the numbers; a model the server no longer has:
    ModelGone); ``say(kind, **fields)`` gets the
    status lines and the download progress."""
    name = run_config.parse(cfg)["dataset"]  # checked: a plain name, safe in a URL
    base = f"/data/{name}"
    manifest = json.loads(await (await fetch(f"{base}/manifest.json", "manifest")).text())
    spec = DataSpec.from_manifest(manifest)
    data_tokens.refuse_in_page(spec)
    say("status", text=f"Loading model {model}…")
    graph = json.loads(await (await _model_file(model, "graph.json", "model")).text())
    # the page checked it with the server; checked again here, with the same code: the fit
    # of the model first, then the config (the batch size) against the training split
    cfg, spec = check_run(cfg, graph, manifest)
    check_size(spec, {"training": manifest["splits"]["train"]["count"],
                      "test": manifest["splits"]["test"]["count"]},
               engine(STATE["device"]).data_limit, MAX_DATA_BYTES)
    weights = to_bytes(await (await _model_file(model, "weights.bin", "weights")
                              ).arrayBuffer())
    say("status", text=f"Loading {spec.title} shards…")
    train, test = await _splits(manifest, spec, base, say)  # the trainer holds out validation
    return cfg, graph, weights, train, test

"""What a run loads before it trains: the run configuration checked again, the model (graph and
weights) and the run's dataset (config ``dataset``: its manifest and shards under
``/data/<dataset>/``), fetched from the page's server. Used by ``main`` (a run) and ``views``
(``prepare``)."""

import json

from ..engine import config as run_config
from ..engine.train import data_tokens
from ..engine.train.data import DataSpec, Split
from .bridge import fetch, to_bytes


async def _split(manifest: dict, spec: DataSpec, base: str, name: str) -> Split:
    """The split ``name`` of the manifest (shards under ``base``), samples of ``spec``."""
    s = manifest["splits"][name]
    images = await (await fetch(f"{base}/{s['images']['file']}", f"{name} images")
                    ).arrayBuffer()
    labels = await (await fetch(f"{base}/{s['labels']['file']}", f"{name} labels")
                    ).arrayBuffer()
    return Split(images, labels, s["count"], to_bytes(labels), spec)


async def load(cfg: dict, model: str, say) -> tuple:
    """``(config, graph, weights, train split, test split)`` of a run of ``model``: the config
    checked (``run_config.parse``: ConfigError), the model and the dataset fetched;
    ``say(kind, **fields)`` gets the status lines."""
    name = run_config.parse(cfg)["dataset"]  # checked: a plain name, safe in a URL
    base = f"/data/{name}"
    manifest = json.loads(await (await fetch(f"{base}/manifest.json", "manifest")).text())
    spec = DataSpec.from_manifest(manifest)
    data_tokens.refuse_in_page(spec)
    # the page checked it with the server; checked again here, with the same code
    cfg = run_config.parse(cfg, train_images=manifest["splits"]["train"]["count"])
    say("status", text=f"Loading model {model}…")
    graph = json.loads(await (await fetch(f"/api/models/{model}/graph.json", "model")).text())
    weights = to_bytes(await (await fetch(f"/api/models/{model}/weights.bin", "weights")
                              ).arrayBuffer())
    say("status", text=f"Loading {spec.title} shards…")
    train = await _split(manifest, spec, base, "train")  # the trainer holds out validation
    test = await _split(manifest, spec, base, "test")
    return cfg, graph, weights, train, test

"""What a run loads before it trains: the run configuration checked again, the model (graph and
weights) and the MNIST splits, fetched from the page's server. Used by ``main`` (a run) and
``views`` (``prepare``)."""

import json

from ..engine import config as run_config
from ..engine.train.data import Split
from .bridge import fetch, to_bytes


async def _split(manifest: dict, name: str, keep: int = 0) -> Split:
    """The split ``name`` of the manifest; ``keep`` > 0: its first ``keep`` images only."""
    s = manifest["splits"][name]
    images = await (await fetch(f"/data/mnist/{s['images']['file']}", f"{name} images")
                    ).arrayBuffer()
    labels = await (await fetch(f"/data/mnist/{s['labels']['file']}", f"{name} labels")
                    ).arrayBuffer()
    pixels = 1
    for d in s["images"]["shape"][1:]:
        pixels *= d
    count = s["count"]
    if 0 < keep < count:
        images, labels, count = images.slice(0, keep * pixels), labels.slice(0, keep), keep
    return Split(images, labels, count, to_bytes(labels), pixels)


async def load(cfg: dict, model: str, say) -> tuple:
    """``(config, graph, weights, train split, test split)`` of a run of ``model``: the config
    checked (``run_config.parse``: ConfigError), the model and MNIST fetched; ``say(kind,
    **fields)`` gets the status lines."""
    manifest = json.loads(await (await fetch("/data/mnist/manifest.json", "manifest")).text())
    # the page checked it with the server; checked again here, with the same code
    cfg = run_config.parse(cfg, train_images=manifest["splits"]["train"]["count"])
    say("status", text=f"Loading model {model}…")
    graph = json.loads(await (await fetch(f"/api/models/{model}/graph.json", "model")).text())
    weights = to_bytes(await (await fetch(f"/api/models/{model}/weights.bin", "weights")
                              ).arrayBuffer())
    say("status", text="Loading MNIST shards…")
    train = await _split(manifest, "train")  # the trainer holds out the validation images
    test = await _split(manifest, "test")
    return cfg, graph, weights, train, test

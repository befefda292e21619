#!/usr/bin/env python3
"""Write the "site" folder the Dawn-in-Node harness (benchmarks/dawn/dawn.mjs) answers the
worker's ``fetch`` from: the bodies the page's server (``host.server.create_app``, through
Starlette's TestClient: the same routes, the same bytes) sends for the URLs a run fetches.

    python benchmarks/dawn/site.py OUT [--model NAME[=FILE.onnx] ...] [--random N]

- ``OUT/api/wheel`` (``{"url", "pyodide"}``; the harness puts its local Pyodide folder in
  ``pyodide``) and ``OUT/wheels/<engine wheel>`` (built from this checkout when stale);
- ``OUT/api/models/<name>/graph.json`` and ``weights.bin`` for each ``--model`` (default
  ``seednet``; ``NAME=FILE`` serves an ONNX file of anywhere as ``NAME``, e.g.
  ``resnet8=tests/fixtures/zoo/resnet8-ts.onnx``);
- ``OUT/data/<dataset>/``: the manifest and shards of ``--dataset`` (default ``mnist``, from
  .cache/datasets), or with ``--random N``: a dataset ``random`` of N training and
  max(N // 8, 64) test images of ``--shape`` (default 1 28 28; ``--name`` names it) of seeded
  random bytes, 10
  classes (speed does not depend on the pixels; the payload for a GPU machine stays small).
Exit 2 with the route's error when the server refuses a URL (an unknown model, a missing
dataset).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def random_dataset(root: Path, count: int, shape: tuple, seed: int = 0,
                   name: str = "random") -> None:
    """A dataset ``name`` under ``root``: ``count`` training images of ``shape`` (uint8,
    seeded), labels 0..9 cycling."""
    from webgpu_trainer.host.datasets import store
    from webgpu_trainer.host.datasets.arrays import Arrays
    rng = np.random.default_rng(seed)
    test = max(count // 8, 64)
    arrays = Arrays(rng.integers(0, 256, (count, *shape), np.uint8),
                    (np.arange(count) % 10).astype(np.uint8),
                    rng.integers(0, 256, (test, *shape), np.uint8),
                    (np.arange(test) % 10).astype(np.uint8),
                    classes=[str(i) for i in range(10)], title="random bytes",
                    source="benchmarks/dawn/site.py --random", name=name)
    store.write_dataset(root, name, arrays, lambda *a: None)


def write_site(out: Path, models: dict, dataset: str = "mnist", random: int = 0,
               shape: tuple = (1, 28, 28), name: str = "random") -> dict:
    """Fill ``out`` (see the module docstring); ``models``: name -> ONNX path. Returns
    ``{"wheel", "models", "dataset", "files"}``. RuntimeError naming the URL and the server's
    answer when a route refuses."""
    from starlette.testclient import TestClient

    from webgpu_trainer.host.server import create_app
    out = Path(out)
    with tempfile.TemporaryDirectory() as tmp:
        mdir, droot = Path(tmp) / "models", Path(tmp) / "datasets"
        mdir.mkdir()
        for model, src in models.items():
            shutil.copyfile(src, mdir / f"{model}.onnx")
        if random:
            dataset = name
            random_dataset(droot, random, shape, name=name)
        else:
            droot = REPO / ".cache" / "datasets"
        app = create_app(REPO, models_dir=mdir, data_root=droot,
                         data_dir=droot / "mnist", uploads_dir=Path(tmp) / "uploads")
        files = []
        with TestClient(app) as client:
            def get(url: str) -> bytes:
                r = client.get(url, headers={"accept-encoding": "identity"})
                if r.status_code != 200:
                    raise RuntimeError(f"{url}: HTTP {r.status_code}: {r.text[:300]}")
                dest = out / url.lstrip("/")
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(r.content)
                files.append(url)
                return r.content
            meta = json.loads(get("/api/wheel"))
            get(meta["url"])
            for model in models:
                get(f"/api/models/{model}/graph.json")
                get(f"/api/models/{model}/weights.bin")
            manifest = json.loads(get(f"/data/{dataset}/manifest.json"))
            for split in ("train", "test"):
                for kind in ("images", "labels"):
                    get(f"/data/{dataset}/{manifest['splits'][split][kind]['file']}")
    return {"wheel": meta["url"], "models": sorted(models), "dataset": dataset, "files": files}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--model", action="append", default=[], metavar="NAME[=FILE]")
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--random", type=int, default=0, metavar="N")
    ap.add_argument("--shape", type=int, nargs=3, default=[1, 28, 28])
    ap.add_argument("--name", default="random", help="the --random dataset's name")
    a = ap.parse_args(argv)
    models = {}
    for spec in a.model or ["seednet"]:
        name, _, file = spec.partition("=")
        models[name] = Path(file) if file else REPO / "models" / f"{name}.onnx"
    try:
        info = write_site(a.out, models, a.dataset, a.random, tuple(a.shape), a.name)
    except (RuntimeError, OSError, ValueError) as exc:
        print(f"site.py: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())

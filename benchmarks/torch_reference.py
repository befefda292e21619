"""The Fashion-MNIST reference: SeedNet trained with PyTorch and with our native engine on the
same bounded recipe, the accuracy a browser test of Fashion-MNIST asserts (issue 18, "Tests").

Usage: ``python benchmarks/torch_reference.py [--seeds 0,1,2] [--native] [--steps 300]``

The recipe (``RECIPE``): SeedNet (scripts/make_seednet.py's module, models/seednet.onnx),
Adam lr 1e-3, batch 64, 300 steps, NLLLoss on its log-probabilities, training images in the
trainer's order (the first 55,000 training images, the last 5,000 held out as our default
``val_images``; epoch e shuffled by ``random.Random(seed * 1000003 + e)``), inputs
``((x / 255) - mean) / std`` with the training split's mean and std (the manifest's, rounded to
4 decimals), then accuracy on the first 1,000 test images in eval mode. The files are Debian's
``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist/*-ubyte.gz``), read with numpy.
PyTorch initialises with torch.manual_seed(seed), our engine with its Philox draws of the same
distributions: the weights differ, so the runs agree in distribution, not bit for bit; several
seeds give the spread. Needs torch (the test extra); ``--native`` also runs the engine on the
native GPU (wgpu-py) through ``train.Trainer``.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FASHION = Path("/usr/share/datasets/fashion-mnist")
RECIPE = {"optimizer": "adam", "lr": 1e-3, "batch_size": 64, "max_steps": 300,
          "epochs": 1, "val_images": 5000, "eval_images": 1000, "init": "scratch"}


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (gzip) as a uint8 array of its dimensions (magic 0x0000080N)."""
    raw = gzip.decompress(path.read_bytes())
    magic = int.from_bytes(raw[:4], "big")
    if magic >> 8 != 8 or not 1 <= magic & 0xFF <= 4:
        raise ValueError(f"{path}: magic {magic:#010x} is not an IDX file of uint8")
    ndim = magic & 0xFF
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load() -> dict:
    """Fashion-MNIST's four arrays and the training split's mean / std (4 decimals)."""
    d = {name: read_idx(FASHION / f"{name.replace('_', '-')}-ubyte.gz") for name in
         ("train_images_idx3", "train_labels_idx1", "t10k_images_idx3", "t10k_labels_idx1")}
    x = d["train_images_idx3"].astype(np.float64) / 255
    return {"train_x": d["train_images_idx3"], "train_y": d["train_labels_idx1"],
            "test_x": d["t10k_images_idx3"], "test_y": d["t10k_labels_idx1"],
            "mean": round(float(x.mean()), 4), "std": round(float(x.std()), 4)}


def order(seed: int, used: int, steps: int, batch: int) -> np.ndarray:
    """The training rows of steps 1..steps, as ``train.Trainer`` visits them."""
    per_epoch, rows, epoch = used // batch, [], 0
    while len(rows) < steps * batch:
        perm = list(range(used))
        random.Random(seed * 1000003 + epoch).shuffle(perm)
        rows += perm[:per_epoch * batch]
        epoch += 1
    return np.asarray(rows[:steps * batch])


def torch_run(data: dict, seed: int, steps: int) -> dict:
    """SeedNet trained with torch (CPU, float32) on the recipe: test accuracy and seconds."""
    import torch
    sys.path.insert(0, str(ROOT / "scripts"))
    from make_seednet import SeedNet
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    model = SeedNet()
    opt = torch.optim.Adam(model.parameters(), lr=RECIPE["lr"])
    table = torch.tensor((np.arange(256) / 255 - data["mean"]) / data["std"], dtype=torch.float32)
    batch = RECIPE["batch_size"]
    used = len(data["train_x"]) - RECIPE["val_images"]
    rows = order(seed, used, steps, batch)
    x_all = torch.from_numpy(data["train_x"].astype(np.int64))
    y_all = torch.from_numpy(data["train_y"].astype(np.int64))
    t0 = time.perf_counter()
    model.train()
    for t in range(steps):
        r = torch.from_numpy(rows[t * batch:(t + 1) * batch])
        x = table[x_all[r]].unsqueeze(1)
        loss = torch.nn.functional.nll_loss(model(x), y_all[r])
        opt.zero_grad()
        loss.backward()
        opt.step()
    train_s = time.perf_counter() - t0
    n = RECIPE["eval_images"]
    model.eval()
    with torch.no_grad():
        x = table[torch.from_numpy(data["test_x"][:n].astype(np.int64))].unsqueeze(1)
        pred = model(x).argmax(1).numpy()
    acc = float((pred == data["test_y"][:n]).mean())
    return {"engine": "torch", "seed": seed, "test_acc": acc, "last_loss": loss.item(),
            "train_s": round(train_s, 2)}


def native_run(data: dict, seed: int, steps: int) -> dict:
    """The same recipe on our native GPU engine (wgpu-py) through ``train.Trainer``."""
    from webgpu_trainer import onnx_io
    from webgpu_trainer.engine.backends.wgpu_native import Device
    from webgpu_trainer.engine.train import loop
    from webgpu_trainer.engine.train.data import DataSpec, Split
    from webgpu_trainer.engine.train.gpu_engine import GpuEngine
    graph, weights = onnx_io.load_bundle(str(ROOT / "models" / "seednet.onnx"))
    spec = DataSpec("fashion-mnist", "Fashion-MNIST", "image", [1, 28, 28],
                    [str(k) for k in range(10)], [data["mean"]], [data["std"]])

    def split(x, y):
        return Split(x.tobytes(), y.tobytes(), len(y), y.tobytes(), spec)

    cfg = dict(RECIPE, seed=seed, max_steps=steps)
    trainer = loop.Trainer(GpuEngine(Device()), graph, weights, cfg,
                           split(data["train_x"], data["train_y"]),
                           split(data["test_x"], data["test_y"]))

    async def go():
        await trainer.setup()
        t0 = time.perf_counter()
        result = await trainer.run()
        return result, time.perf_counter() - t0
    result, seconds = asyncio.run(go())
    return {"engine": "native", "seed": seed, "test_acc": result["test_acc"],
            "steps": result["steps"], "train_s": round(seconds, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    ap.add_argument("--steps", type=int, default=RECIPE["max_steps"])
    ap.add_argument("--native", action="store_true", help="also run our native GPU engine")
    args = ap.parse_args(argv)
    data = load()
    print(json.dumps({"recipe": dict(RECIPE, max_steps=args.steps), "mean": data["mean"],
                      "std": data["std"]}))
    for seed in (int(s) for s in args.seeds.split(",")):
        print(json.dumps(torch_run(data, seed, args.steps)), flush=True)
        if args.native:
            print(json.dumps(native_run(data, seed, args.steps)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

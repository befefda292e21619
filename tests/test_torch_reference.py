"""benchmarks/torch_reference.py (the Fashion-MNIST recipe measured with PyTorch): it visits
the training images in the trainer's order, and reads IDX files as the engine's data."""

import gzip
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import run, tiny_mlp

from webgpu_trainer.cpu.cpu_engine import CpuEngine
from webgpu_trainer.engine.train.data import Split
from webgpu_trainer.engine.train.loop import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import torch_reference  # noqa: E402


def test_order_is_the_trainers():
    """The rows of steps 1..9 (two epochs of 4 steps and one more) are those the Trainer
    hands the engine, for the same seed, training images and batch."""
    images = np.random.default_rng(0).integers(0, 256, (44, 784), np.uint8)
    labels = (np.arange(44) % 10).astype(np.uint8)
    split = Split(images.tobytes(), labels.tobytes(), 44, labels.tobytes())
    graph, blob = tiny_mlp(0)
    cfg = {"batch_size": 8, "epochs": 3, "max_steps": 9, "val_images": 10, "eval_images": 8,
           "seed": 5}
    eng = CpuEngine()
    tr = Trainer(eng, graph, blob, cfg, split, split)
    run(tr.setup())
    seen, step = [], eng.step

    async def record(t, offset, lr):
        seen.extend(eng.order[offset:offset + 8])
        return await step(t, offset, lr)
    eng.step = record
    run(tr.run())
    assert len(seen) == 72
    assert list(torch_reference.order(5, 34, 9, 8)) == [int(r) for r in seen]


def test_read_idx(tmp_path):
    """IDX3 images and IDX1 labels, gzip; another magic is refused naming the file."""
    raw = bytes(range(2 * 3 * 4))
    path = tmp_path / "x-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(b"\0\0\x08\x03" + (2).to_bytes(4, "big")
                                   + (3).to_bytes(4, "big") + (4).to_bytes(4, "big") + raw))
    got = torch_reference.read_idx(path)
    assert got.shape == (2, 3, 4) and got.tobytes() == raw
    path.write_bytes(gzip.compress(b"\0\0\x0d\x01" + (1).to_bytes(4, "big") + b"\0\0\0\0"))
    with pytest.raises(ValueError, match=r"x-idx3-ubyte.gz: magic 0x00000d01 is not an IDX "):
        torch_reference.read_idx(path)

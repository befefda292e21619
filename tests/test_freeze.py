"""Freeze and fine-tune (issue 4 item 3, engine side): ``trainable`` in the trainer config.

SeedNet with only its head trainable, on synthetic MNIST-shaped data, native device: frozen
tensors stay bit-identical, BatchNorm running statistics still update (train mode, as PyTorch),
and after one SGD step the head equals the head of a run where everything trains (the head's
gradient at step 1 does not depend on whether the body is trainable).
"""

import asyncio
from pathlib import Path

import numpy as np
import pytest

from webgpu_trainer import onnx_io
from webgpu_trainer.engine.tools import summary
from webgpu_trainer.engine.train.data import Split
from webgpu_trainer.engine.train.gpu_engine import GpuEngine
from webgpu_trainer.engine.train.loop import Trainer

REPO = Path(__file__).resolve().parents[1]


def _splits(n=64):
    rng = np.random.default_rng(5)
    images = rng.integers(0, 256, (n, 784), dtype=np.uint8).tobytes()
    labels = rng.integers(0, 10, n, dtype=np.uint8).tobytes()
    return Split(images, labels, n, labels), Split(images, labels, n, labels)


def _train(device, graph, weights, trainable, steps=1):
    train, test = _splits()
    cfg = {"optimizer": "sgd", "lr": 0.1, "batch_size": 8, "epochs": 1, "init": "finetune",
           "max_steps": steps, "eval_images": 8, "val_images": 0, "trainable": trainable}

    async def go():
        tr = Trainer(GpuEngine(device), graph, weights, cfg, train, test)
        await tr.setup()
        await tr.run()
        return await tr.trained_weights()
    return asyncio.run(go())


def _tensors(graph, blob):
    return {t["name"]: np.frombuffer(blob, "<f4", t["nbytes"] // 4, t["offset"])
            for t in graph["tensors"]}


def test_only_the_head_trains(device):
    graph, weights = onnx_io.load_bundle(REPO / "models" / "seednet.onnx")
    head = summary.head_params(graph)
    assert head == ["fc2.weight", "fc2.bias", "norm2.weight", "norm2.bias"]
    before = _tensors(graph, weights)
    frozen = _tensors(graph, _train(device, graph, weights, head))
    everything = _tensors(graph, _train(device, graph, weights, None))
    roles = {t["name"]: t["role"] for t in graph["tensors"]}
    for name, value in frozen.items():
        if roles[name] == "buffer":
            assert not np.array_equal(value, before[name]), f"{name}: running stat not updated"
        elif name in head:
            assert not np.array_equal(value, before[name]), f"{name} did not train"
            np.testing.assert_allclose(value, everything[name], rtol=1e-5, atol=1e-7,
                                       err_msg=f"{name}: head step differs from a full run")
        else:
            assert np.array_equal(value, before[name]), f"frozen {name} changed"
            assert not np.array_equal(everything[name], before[name]), f"{name} never trains"


@pytest.mark.parametrize("trainable,needle", [
    (["fc9.weight"], "no parameter named 'fc9.weight'"),
    (["norm1.input_mean"], "buffers"),
    ([], "nothing would train"),
    ("fc2.weight", "must be a list"),
])
def test_bad_trainable_lists(device, trainable, needle):
    graph, weights = onnx_io.load_bundle(REPO / "models" / "seednet.onnx")
    roles = {t["name"]: t["role"] for t in graph["tensors"]}
    trainable = [n if n != "norm1.input_mean" else next(k for k, r in roles.items()
                                                        if r == "buffer") for n in trainable] \
        if isinstance(trainable, list) else trainable
    with pytest.raises(ValueError, match=needle):
        _train(device, graph, weights, trainable)

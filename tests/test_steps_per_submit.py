"""Training steps recorded into one command buffer and submitted several at a time
(``wgpu_native.Device.STEPS_PER_SUBMIT``, each step's uniform copied from its own staging slot
before its pass): the same run as one submit a step, bit for bit, whatever the number of steps
a submit (1, 3 or 4 over 7 steps an epoch, with progress reports every 3 steps reading the
metrics while steps are pending, and an epoch's evaluation between)."""

from pathlib import Path

import numpy as np
import pytest
from conftest import run, tiny_mlp

from webgpu_trainer.cli import commands as native
from webgpu_trainer.engine.backends import wgpu_native
from webgpu_trainer.engine.train.gpu_engine import GpuEngine
from webgpu_trainer.engine.train.loop import Trainer


@pytest.fixture(scope="module")
def splits():
    return native.load_splits(None, 112 + 16, 40)[:2]  # 112 train (7 steps of 16), 16 validate


def _train(device, splits, graph, blob):
    """(losses of every step, validation losses, final weights bytes) of 2 epochs."""
    cfg = {"optimizer": "adam", "lr": 1e-3, "batch_size": 16, "epochs": 2, "seed": 4,
           "init": "scratch", "eval_images": 40, "val_images": 16, "report_every": 3}
    events = []
    eng = GpuEngine(device)
    tr = Trainer(eng, graph, blob, cfg, *splits, emit=lambda kind, **kw: events.append((kind, kw)))
    run(tr.setup())
    run(tr.run())
    losses = [tuple(row) for kind, kw in events if kind == "progress" for row in kw["losses"]]
    vals = [kw.get("val_loss") for kind, kw in events if kind == "epoch"]
    return losses, vals, run(eng.read_weights())


@pytest.mark.parametrize("model", ["mlp", "seednet"])
def test_steps_per_submit_same_bits(device, splits, monkeypatch, model):
    if not isinstance(device, wgpu_native.Device):
        pytest.skip("native wgpu-py device only")
    if model == "mlp":
        graph, blob = tiny_mlp(0)
    else:
        from webgpu_trainer import onnx_io
        graph, blob = onnx_io.load_bundle(Path(__file__).resolve().parents[1] / "models" /
                                          "seednet.onnx")
    got = {}
    for k in (1, 3, 4):
        monkeypatch.setattr(wgpu_native.Device, "STEPS_PER_SUBMIT", k)
        got[k] = _train(device, splits, graph, blob)
    losses, vals, weights = got[1]
    assert [row[0] for row in losses] == list(range(1, 15)) and len(vals) == 2
    assert all(np.isfinite(row[1]) for row in losses)
    for k in (3, 4):
        assert got[k][0] == losses, f"{k} steps a submit: losses"
        assert got[k][1] == vals, f"{k} steps a submit: validation"
        assert got[k][2] == weights, f"{k} steps a submit: weights"

"""Pause / Resume of ``train.Trainer`` natively (issue 10, the run bar), on the numpy engine
and on the GPU engine (wgpu-py; lavapipe here), plus the dashboard's fields of the events:
``progress.lrs`` against StepLR's formula, ``setup.memory_bytes`` against the buffers the run
must hold.

- Paused after step 2: "paused" is emitted with the steps done reported, no step runs while
  paused, Resume finishes the run with every step reported once, and images/s leaves the
  paused time out.
- Stop while paused ends the wait: the run stops at the paused step.
"""

import asyncio
import time

import pytest
from conftest import tiny_mlp

from webgpu_trainer.cli import commands as native
from webgpu_trainer.cpu.cpu_engine import CpuEngine
from webgpu_trainer.engine.train.gpu_engine import GpuEngine
from webgpu_trainer.engine.train.loop import Trainer

PAUSE_S = 1.0
BATCH, TRAIN = 16, 96  # 6 steps per epoch


@pytest.fixture(scope="module")
def splits():
    return native.load_splits(None, TRAIN, 40)[:2]




def _trainer(engine, device, splits, events, **extra):
    graph, blob = tiny_mlp(1)
    cfg = {"optimizer": "sgd", "lr": 0.1, "batch_size": BATCH, "epochs": 2, "seed": 3,
           "init": "scratch", "eval_images": 40, "report_every": 4, "val_images": 0, **extra}
    eng = GpuEngine(device) if engine == "gpu" else CpuEngine()
    tr = Trainer(eng, graph, blob, cfg, *splits,
                 emit=lambda kind, **kw: events.append((time.perf_counter(), kind, kw)))
    steps_run = []
    step = eng.step

    async def counting_step(t, offset, lr):
        steps_run.append((time.perf_counter(), t))
        halt = await step(t, offset, lr)
        if t == 2:
            tr.pause()
        return halt
    eng.step = counting_step
    return tr, eng, steps_run


async def _until(events, kind, **match):
    while not any(k == kind and all(kw.get(a) == v for a, v in match.items())
                  for _, k, kw in events):
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("engine", ["cpu", "gpu"])
def test_pause_resume(device, splits, engine):
    events = []
    tr, eng, steps_run = _trainer(engine, device, splits, events,
                                  scheduler="steplr", step_size=3, gamma=0.5, interval="step")

    async def go():
        await tr.setup()
        t_start = time.perf_counter()
        task = asyncio.ensure_future(tr.run())
        await _until(events, "paused", paused=True)
        t_paused = time.perf_counter()
        assert tr.paused and tr.step == 2
        await asyncio.sleep(PAUSE_S)
        assert tr.step == 2 and [t for _, t in steps_run] == [1, 2], "a step ran while paused"
        tr.resume()
        result = await task
        return result, t_paused, time.perf_counter() - t_start

    result, t_paused, wall = asyncio.run(go())
    total = 12
    assert (result["stopped"], result["steps"]) == (False, total)
    assert not any(t_paused <= ts < t_paused + PAUSE_S for ts, _ in steps_run)
    pauses = [kw for _, k, kw in events if k == "paused"]
    assert pauses == [{"paused": True, "step": 2}, {"paused": False, "step": 2}]
    progress = [kw for _, k, kw in events if k == "progress"]
    # the steps done were reported before the pause: the page's step count is current
    before = [kw for ts, k, kw in events if k == "progress" and ts <= t_paused]
    assert before and before[-1]["step"] == 2
    rows = [r for kw in progress for r in kw["losses"]]
    assert [r[0] for r in rows] == list(range(1, total + 1))
    # lrs: StepLR(step_size=3, gamma=0.5) stepped per optimizer step, torch's formula
    lrs = [lr for kw in progress for lr in kw["lrs"]]
    assert lrs == pytest.approx([0.1 * 0.5 ** ((t - 1) // 3) for t in range(1, total + 1)],
                                rel=1e-12)
    # images/s over the run's time less the pause: far above steps * batch / wall time
    ips = progress[-1]["images_per_s"]
    assert ips > 1.5 * total * BATCH / wall, (ips, total * BATCH / wall)
    setup = [kw for _, k, kw in events if k == "setup"]
    assert len(setup) == 1
    if engine == "cpu":
        assert setup[0]["memory_bytes"] is None
    else:  # at least weights + gradients + the uploaded images and labels
        need = 2 * eng.wbytes + TRAIN * 785 + 40 * 785
        assert need <= setup[0]["memory_bytes"] < need + 8 * 2 ** 20, setup[0]


@pytest.mark.parametrize("engine", ["cpu", "gpu"])
def test_stop_while_paused(device, splits, engine):
    events = []
    tr, _, steps_run = _trainer(engine, device, splits, events)

    async def go():
        await tr.setup()
        task = asyncio.ensure_future(tr.run())
        await _until(events, "paused", paused=True)
        await asyncio.sleep(0.2)
        tr.stop_requested = True
        return await asyncio.wait_for(task, 60)

    result = asyncio.run(go())
    assert (result["stopped"], result["steps"]) == (True, 2)
    assert [t for _, t in steps_run] == [1, 2]
    assert not [k for _, k, _ in events if k == "epoch"]

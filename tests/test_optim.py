"""The engine's optimizers replay torch.optim trajectories (tests/fixtures/optim.json, made by
scripts/make_optim_fixtures.py): every step's parameters within OPTIM_RTOL of torch's.
torch is not needed here."""

import json
import pathlib

import numpy as np
import pytest

from conftest import (FWD_RTOL, OPTIM_RTOL, build, make_graph, node, read_flat, rel_err, run,
                      step_bytes)
from webgpu_trainer import optim

FIXTURE = json.loads((pathlib.Path(__file__).parent / "fixtures" / "optim.json").read_text())
PROBLEM = FIXTURE["problem"]
MAX_ERR: dict = {}


def _model():
    nodes = [node("Gemm", ["input", "fc.weight", "fc.bias"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [(name, np.array(v, np.float32), "param") for name, v in PROBLEM["params"].items()]
    return make_graph(nodes, tensors, [("input", ["N", PROBLEM["features"]])],
                      [("output", ["N", PROBLEM["classes"]])])


async def _replay(dev, cfg):
    graph, blob = _model()
    plan = await build(dev, graph, blob, PROBLEM["batch"])
    dev.write(plan.input.buf, np.array(PROBLEM["x"], np.float32).tobytes())
    dev.write(plan.labels.buf, np.array(PROBLEM["labels"], np.uint32).tobytes())
    kwargs = dict(cfg["engine"]["kwargs"])
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    opt = getattr(optim, cfg["engine"]["class"])(cfg["lr"], **kwargs)
    await opt.attach(plan)
    prog = dev.program(plan.fwd_train + plan.loss + plan.bwd + opt.dispatches)
    params, losses = [], []
    for t in range(1, FIXTURE["steps"] + 1):
        dev.write(plan.step, step_bytes(t, lr=cfg["lr"], a=opt.scalars(t, cfg["lr"])))
        dev.submit([prog])
        params.append({name: await read_flat(dev, plan, plan.P, name) for name in
                       PROBLEM["params"]})
        losses.append(float(np.frombuffer(await dev.read(plan.metrics, 0, 4), np.float32)[0]))
    whole = np.frombuffer(await dev.read(plan.P), np.float32)
    return params, losses, plan, whole


@pytest.mark.parametrize("name", list(FIXTURE["configs"]))
def test_optimizer_matches_torch(device, name):
    cfg = FIXTURE["configs"][name]
    params, losses, plan, whole = run(_replay(device, cfg))
    worst = 0.0
    for t, (got, want) in enumerate(zip(params, cfg["params"]), start=1):
        for pname, value in want.items():
            err = rel_err(got[pname], np.array(value))
            worst = max(worst, err)
            assert err <= OPTIM_RTOL, f"{name}: {pname} after step {t}: rel error {err:.3g}"
    for t, (got, want) in enumerate(zip(losses, cfg["losses"]), start=1):
        assert rel_err(got, want) <= FWD_RTOL, f"{name}: loss at step {t}: {got} vs {want}"
    # the padding between tensors (mask 0) is never touched
    used = np.zeros(whole.size, bool)
    for t in plan.graph.tensors.values():
        used[t["offset"] // 4:(t["offset"] + t["nbytes"]) // 4] = True
    assert np.all(whole[~used] == 0)
    MAX_ERR[name] = worst


def test_fixture_is_complete():
    cfgs = FIXTURE["configs"]
    classes = {c["torch"]["class"] for c in cfgs.values()}
    assert {"SGD", "Adam", "AdamW", "Adagrad"} <= classes
    assert any(c["torch"]["kwargs"].get("nesterov") for c in cfgs.values())
    for c in cfgs.values():
        assert len(c["params"]) == FIXTURE["steps"] == 20

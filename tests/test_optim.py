"""The engine's optimizers replay torch.optim trajectories (tests/fixtures/optim.json, made by
scripts/make_optim_fixtures.py): every step's parameters within OPTIM_RTOL of torch's, with
gradient clipping by global norm and lr schedulers where the configuration has them (OneCycleLR
also cycling SGD's / RMSprop's momentum and Adam's beta1 as torch's cycle_momentum=True does);
the schedulers' lr and momentum sequences match torch's lr_scheduler within SCHED_ATOL; the
optimizer state saves and restores exactly. torch is not needed here."""

import json
import pathlib

import numpy as np
import pytest

from conftest import FWD_RTOL, OPTIM_RTOL, make_graph, node, rel_err, run, tag_of
from harness import read_flat
from webgpu_trainer.engine.tools import parity
from webgpu_trainer.engine.train import optim
from webgpu_trainer.engine.train import schedulers

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend

FIXTURE = json.loads((pathlib.Path(__file__).parent / "fixtures" / "optim.json").read_text())
PROBLEM = FIXTURE["problem"]
MAX_ERR: dict = {}
SCHED_ATOL = 1e-12
PAD_VALUE = 1.5  # written into P's alignment padding before the steps (never updated)


def _model():
    nodes = [node("Gemm", ["input", "fc.weight", "fc.bias"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [(name, np.array(v, np.float32), "param") for name, v in PROBLEM["params"].items()]
    return make_graph(nodes, tensors, [("input", ["N", PROBLEM["features"]])],
                      [("output", ["N", PROBLEM["classes"]])])


def _optimizer(cfg):
    kwargs = dict(cfg["engine"]["kwargs"])
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    return getattr(optim, cfg["engine"]["class"])(cfg["lr"], **kwargs)


def _lr_at(cfg):
    return schedulers.make({"lr": cfg["lr"], "scheduler": cfg.get("scheduler")},
                           cfg.get("steps_per_epoch", 1))


async def _setup(dev, cfg, weights=None):
    """A fresh plan on the fixture's problem (weights: bytes of P, else the start) and
    ``cfg``'s optimizer attached; returns ``(plan, opt, program)``."""
    graph, blob = _model()
    plan = await parity.load(dev, graph, blob if weights is None else weights,
                             PROBLEM["batch"], np.array(PROBLEM["x"], np.float32).tobytes(),
                             np.array(PROBLEM["labels"], np.uint32).tobytes())
    opt = _optimizer(cfg)
    opt.follow(_lr_at(cfg))  # momentum / beta1 cycling (OneCycleLR), before attach
    await opt.attach(plan)
    return plan, opt, parity.program(dev, plan, opt=opt)


def _step(dev, plan, opt, prog, t, lr_at):
    parity.run_step(dev, plan, t, opt=opt, lr=lr_at(t), prog=prog)


def _padding(plan) -> np.ndarray:
    """bool per element of P: not inside any tensor of the blob (alignment padding)."""
    used = np.zeros(plan.wbytes // 4, bool)
    for t in plan.graph.tensors.values():
        used[t["offset"] // 4:(t["offset"] + t["nbytes"]) // 4] = True
    return ~used


async def _replay(dev, cfg):
    plan, opt, prog = await _setup(dev, cfg)
    # garbage in the padding of P and G: an update that touched it would move P there
    pad = _padding(plan)
    assert pad[:64].any()  # fc.weight's 15 values share their 64-element block with padding
    p = np.frombuffer(await dev.read(plan.P, 0, plan.wbytes), np.float32).copy()
    p[pad] = PAD_VALUE
    dev.write(plan.P, p.tobytes())
    g = np.zeros_like(p)
    g[pad] = 3.0
    dev.write(plan.G, g.tobytes())
    lr_at = _lr_at(cfg)
    params, losses, norms = [], [], []
    for t in range(1, FIXTURE["steps"] + 1):
        _step(dev, plan, opt, prog, t, lr_at)
        params.append({name: await read_flat(dev, plan, plan.P, name) for name in
                       PROBLEM["params"]})
        slot = 8 * parity.metrics_slot(t)
        losses.append(float(np.frombuffer(await dev.read(plan.metrics, slot, 4), np.float32)[0]))
        norms.append(float(np.frombuffer(await dev.read(opt.clip, 0, 4), np.float32)[0]))
    whole = np.frombuffer(await dev.read(plan.P, 0, plan.wbytes), np.float32)
    return params, losses, plan, whole, norms


@pytest.mark.parametrize("name", list(FIXTURE["configs"]))
def test_optimizer_matches_torch(device, name):
    cfg = FIXTURE["configs"][name]
    params, losses, plan, whole, norms = run(_replay(device, cfg))
    worst = 0.0
    for t, (got, want) in enumerate(zip(params, cfg["params"]), start=1):
        for pname, value in want.items():
            err = rel_err(got[pname], np.array(value))
            worst = max(worst, err)
            assert err <= OPTIM_RTOL, f"{name}: {pname} after step {t}: rel error {err:.3g}"
    for t, (got, want) in enumerate(zip(losses, cfg["losses"]), start=1):
        assert rel_err(got, want) <= FWD_RTOL, f"{name}: loss at step {t}: {got} vs {want}"
    # the padding between tensors (the update's mask: no owner) keeps its garbage, whatever
    # garbage its gradient slots hold
    assert np.all(whole[_padding(plan)] == PAD_VALUE)
    if "grad_norms" in cfg:  # the GPU's global gradient norm, before clipping, as torch's
        assert rel_err(norms, cfg["grad_norms"]) <= FWD_RTOL
    if "lrs" in cfg:
        lr_at = _lr_at(cfg)
        assert max(abs(lr_at(t) - want) for t, want in enumerate(cfg["lrs"], 1)) <= SCHED_ATOL
    if "momenta" in cfg:  # the momentum / beta1 each step used, as torch's param group held
        opt = _optimizer(cfg).follow(_lr_at(cfg))
        assert max(abs(opt.momentum_of(t) - want) for t, want in
                   enumerate(cfg["momenta"], 1)) <= SCHED_ATOL
        assert abs(opt.scalars(3, 0.1)[2] - cfg["momenta"][2]) <= SCHED_ATOL
    MAX_ERR[tag_of(name)] = worst


@pytest.mark.parametrize("name", [k for k, c in FIXTURE["configs"].items()
                                  if c["engine"]["class"] == "Adam"])
def test_adam_vec4_is_adam_bit_for_bit(device, monkeypatch, name):
    """GPU adapters' Adam / AdamW four elements a thread (optim.wgsl adam4, forced here with
    the tiled kernels on this adapter) store adam's bits at every step, amsgrad, clipping and
    schedules included, and leave the padding that shares a vec4 with fc.weight alone."""
    from harness import builder_patch
    from webgpu_trainer.engine import builder
    seen = []
    kernel = builder.Builder.kernel

    async def recording(self, shader, entry, groups, **kw):
        await kernel(self, shader, entry, groups, **kw)
        seen.append(entry)
    monkeypatch.setattr(builder.Builder, "kernel", recording)
    cfg = FIXTURE["configs"][name]
    got = {}
    for vec4 in (True, False):
        seen.clear()
        with builder_patch({"TILED": True, "OPTIM_VEC4": vec4}):
            params, _, plan, whole, _ = run(_replay(device, cfg))
        assert seen[-1] == ("adam4" if vec4 else "adam")
        got[vec4] = params, whole
        assert np.all(whole[_padding(plan)] == PAD_VALUE)
    assert np.array_equal(got[True][1], got[False][1])
    for a, b in zip(got[True][0], got[False][0]):
        assert all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", list(FIXTURE["schedulers"]))
def test_scheduler_matches_torch(name):
    case = FIXTURE["schedulers"][name]
    lr_at = schedulers.make({"lr": case["lr"], "scheduler": case["spec"]},
                            case["steps_per_epoch"])
    got = [lr_at(t) for t in range(1, case["steps"] + 1)]
    err = max(abs(g - w) for g, w in zip(got, case["lrs"]))
    assert err <= SCHED_ATOL, f"{name}: lr off by {err:.3g}"
    if "momenta" in case:
        got = [lr_at.momentum_at(t) for t in range(1, case["steps"] + 1)]
        merr = max(abs(g - w) for g, w in zip(got, case["momenta"]))
        assert merr <= SCHED_ATOL, f"{name}: momentum off by {merr:.3g}"
        err = max(err, merr)
    else:
        assert lr_at.momentum_at(1) is None
    MAX_ERR["sched." + name] = err


def test_scheduler_errors():
    assert schedulers.make({"lr": 0.1}, 10)(57) == 0.1
    cyc = schedulers.make({"lr": 0.1, "scheduler": {"name": "onecycle", "max_lr": 1.0,
                                                    "total_steps": 100}}, 10)
    assert cyc.cycles_momentum and cyc.momentum_at(1) == 0.95
    with pytest.raises(ValueError, match="unknown scheduler"):
        schedulers.make({"lr": 0.1, "scheduler": {"name": "cyclic"}}, 10)
    with pytest.raises(ValueError, match="step_siz"):
        schedulers.make({"lr": 0.1, "scheduler": {"name": "steplr", "step_siz": 1}}, 10)
    one = schedulers.make({"lr": 0.1, "scheduler": {"name": "OneCycleLR", "max_lr": 1.0,
                                                    "total_steps": 100,
                                                    "cycle_momentum": False}}, 10)
    one(101)  # torch allows last_epoch == total_steps
    with pytest.raises(ValueError, match="Tried to step"):
        one(102)


def test_momentum_cycling_errors(device):
    """torch refuses cycle_momentum for optimizers without momentum or betas; an optimizer
    built with momentum 0 needs the schedule before attach (its momentum buffer)."""
    cyc = schedulers.make({"lr": 0.1, "scheduler": {"name": "onecycle", "max_lr": 1.0,
                                                    "total_steps": 100}}, 10)
    for name in ("adagrad", "adadelta"):
        with pytest.raises(ValueError, match="must support momentum or beta1"):
            optim.make(name, 0.1).follow(cyc)
    flat = schedulers.make({"lr": 0.1, "scheduler": {"name": "onecycle", "max_lr": 1.0,
                                                     "total_steps": 100,
                                                     "cycle_momentum": False}}, 10)
    assert optim.make("adagrad", 0.1).follow(flat).momentum_of(5) == 0.0
    assert optim.make("sgd", 0.1, 0.9).follow(flat).momentum_of(5) == 0.9
    sgd = optim.make("sgd", 0.1)
    assert sgd.states[0] == "" and sgd.follow(cyc).states[0] == "momentum_buffer"

    async def late():
        _, opt, _ = await _setup(device, FIXTURE["configs"]["sgd"])
        with pytest.raises(ValueError, match="before attach"):
            opt.follow(cyc)
        assert opt.momentum_of(1) == 0.0
        _, opt, _ = await _setup(device, FIXTURE["configs"]["sgd_momentum_wd"])
        opt.follow(cyc)  # has its buffer: fine after attach
        assert opt.momentum_of(1) == 0.95

    run(late())


def test_make_names_and_extras():
    assert isinstance(optim.make("RMSprop", 1e-2, 0.9, centered=True), optim.RMSprop)
    opt = optim.make("adadelta", 1.0, rho=0.8, clip_grad_norm=1.0)
    assert (opt.rho, opt.clip_grad_norm) == (0.8, 1.0)
    assert optim.make("adamw", 1e-3, amsgrad=True).amsgrad
    with pytest.raises(ValueError, match="unknown optimizer"):
        optim.make("lion", 1e-3)
    with pytest.raises(ValueError, match="rmsprop"):
        optim.make("rmsprop", 1e-3, betas=(0.9, 0.99))


@pytest.mark.parametrize("name", ["adamw_amsgrad", "rmsprop_centered_momentum_wd",
                                  "sgd_momentum_clip", "adadelta_rho_wd",
                                  "sgd_zero_momentum_onecycle", "adam_onecycle_beta1"])
def test_state_round_trip(device, name):
    """5 steps, save weights + optimizer state, load into a fresh plan and optimizer, 5 more
    steps == 10 uninterrupted steps, bit for bit."""
    cfg = FIXTURE["configs"][name]
    lr_at = _lr_at(cfg)

    async def go():
        plan, opt, prog = await _setup(device, cfg)
        for t in range(1, 11):
            _step(device, plan, opt, prog, t, lr_at)
        want_p, want_s = await device.read(plan.P, 0, plan.wbytes), await opt.state_bytes(device)
        plan, opt, prog = await _setup(device, cfg)
        for t in range(1, 6):
            _step(device, plan, opt, prog, t, lr_at)
        weights, state = await device.read(plan.P, 0, plan.wbytes), await opt.state_bytes(device)
        plan, opt, prog = await _setup(device, cfg, weights)
        opt.load_state_bytes(device, state)
        assert await opt.state_bytes(device) == state
        for t in range(6, 11):
            _step(device, plan, opt, prog, t, lr_at)
        got_p = await device.read(plan.P, 0, plan.wbytes)
        return want_p, want_s, got_p, await opt.state_bytes(device), opt

    want_p, want_s, got_p, got_s, opt = run(go())
    assert got_p == want_p
    assert got_s == want_s
    assert len(got_s) > 4 * opt.n * len(opt.state_buffers())


def test_state_mismatch_raises(device):
    async def go():
        plan, adam, _ = await _setup(device, FIXTURE["configs"]["adam"])
        state = await adam.state_bytes(device)
        for other, what in (("adam_amsgrad", "buffers"), ("adamw", "optimizer"),
                            ("rmsprop", "optimizer")):
            _, opt, _ = await _setup(device, FIXTURE["configs"][other])
            with pytest.raises(ValueError, match=what):
                opt.load_state_bytes(device, state)
        with pytest.raises(ValueError, match="magic"):
            adam.load_state_bytes(device, b"nonsense" + state)
        with pytest.raises(ValueError, match="bytes of state"):
            adam.load_state_bytes(device, state[:-4])
        adam.n += 64  # a model of another size
        with pytest.raises(ValueError, match="elements"):
            adam.load_state_bytes(device, state)

    run(go())


def test_fixture_is_complete():
    cfgs = FIXTURE["configs"]
    classes = {c["torch"]["class"] for c in cfgs.values()}
    assert {"SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "Adadelta"} <= classes
    assert any(c["torch"]["kwargs"].get("nesterov") for c in cfgs.values())
    assert any(c["torch"]["kwargs"].get("centered") and c["torch"]["kwargs"].get("momentum")
               for c in cfgs.values())
    assert {c["torch"]["class"] for c in cfgs.values() if c["torch"]["kwargs"].get("amsgrad")} \
        == {"Adam", "AdamW"}
    assert any(c["engine"]["kwargs"].get("clip_grad_norm") for c in cfgs.values())
    assert {s["spec"]["name"] for s in FIXTURE["schedulers"].values()} == {
        "StepLR", "ExponentialLR", "CosineAnnealingLR", "OneCycleLR"}
    cycled = {c["torch"]["class"] for c in cfgs.values() if "momenta" in c}
    assert {"SGD", "Adam", "AdamW", "RMSprop"} <= cycled
    assert any("momenta" in s for s in FIXTURE["schedulers"].values())
    for c in cfgs.values():
        assert len(c["params"]) == FIXTURE["steps"] == 20

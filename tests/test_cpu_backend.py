"""The numpy ("no GPU") backend of issue 3 item 4: ``cpu.optim``, ``cpu.cpu_engine.CpuEngine`` under
``train.Trainer`` and ``webgpu-trainer train | predict --device cpu``.

- Optimizers: the torch.optim trajectories of tests/fixtures/optim.json (the same 27
  configurations tests/test_optim.py replays on the GPU: every optimizer, clipping, schedulers,
  OneCycleLR cycling momentum / beta1), 20 steps with float32 gradients of the numpy engine and
  the numpy float32 optimizer: parameters within OPTIM_RTOL (1e-5 relative) of torch's after
  every step, losses within FWD_RTOL. The state saves and restores bit for bit, and in the GPU
  optimizer's format (a GPU state continues on the CPU).
- The trainer on the numpy engine against the native GPU engine: a small MLP on 96 real MNIST
  images, same per-step losses (same data order, normalisation, drop_last, eval images).
- The CLI: numpy runs SeedNet at roughly 0.3-1 s per step of 32 images on the 2 shared cores,
  so the runs use a subset: the first 192 MNIST training images (6 steps of 32 per epoch),
  validation on the first 128 test images, 2 epochs (12 steps). One module-scoped set of runs
  serves the CLI tests: A uninterrupted; B stopped by --max-steps 8 (mid-epoch 2) and resumed;
  C, a copy of B before its resume, resumed with --lr 1e30 --scheduler none (diverges).
"""

import hashlib
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import test_optim
from conftest import FWD_RTOL, OPTIM_RTOL, make_graph, node, rel_err, run
from harness import read_flat
from webgpu_trainer.cli import commands as native
from webgpu_trainer.engine.tools import parity
from webgpu_trainer.engine.train import schedulers
from webgpu_trainer.engine.train import optim as gpu_optim
from webgpu_trainer.engine.train import loop as train_mod
from webgpu_trainer.cpu import optim
from webgpu_trainer.cpu.engine import Engine

REPO = Path(__file__).resolve().parents[1]
FIXTURE = json.loads((REPO / "tests" / "fixtures" / "optim.json").read_text())
PROBLEM = FIXTURE["problem"]
SCHED_ATOL = 1e-12
# Largest errors, printed in pytest's summary with the GPU's (conftest reads test_optim.MAX_ERR).
MAX_ERR = test_optim.MAX_ERR


# ---------------------------------------------------------------- optimizers vs torch

def _model():
    nodes = [node("Gemm", ["input", "fc.weight", "fc.bias"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [(name, np.array(v, np.float32), "param") for name, v in PROBLEM["params"].items()]
    return make_graph(nodes, tensors, [("input", ["N", PROBLEM["features"]])],
                      [("output", ["N", PROBLEM["classes"]])])


def _optimizer(cfg, module=optim):
    kwargs = dict(cfg["engine"]["kwargs"])
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    return getattr(module, cfg["engine"]["class"])(cfg["lr"], **kwargs)


def _lr_at(cfg):
    return schedulers.make({"lr": cfg["lr"], "scheduler": cfg.get("scheduler")},
                           cfg.get("steps_per_epoch", 1))


class Flat:
    """The fixture's problem on the numpy engine (float32): P, mask, and one step."""

    def __init__(self, cfg, P=None):
        self.graph, blob = _model()
        self.P = np.frombuffer(blob, np.float32).copy() if P is None else P.copy()
        self.views = {t["name"]: self.P[t["offset"] // 4:(t["offset"] + t["nbytes"]) // 4]
                      .reshape(t["shape"]) for t in self.graph["tensors"]}
        self.engine = Engine(self.graph, self.views, np.float32)
        mask = np.zeros_like(self.P)
        for t in self.graph["tensors"]:
            mask[t["offset"] // 4:(t["offset"] + t["nbytes"]) // 4] = 1
        self.opt = _optimizer(cfg).follow(_lr_at(cfg))
        self.opt.attach_flat(self.P.size, mask)
        self.lr_at = _lr_at(cfg)
        self.x = np.array(PROBLEM["x"], np.float32)
        self.y = np.array(PROBLEM["labels"])

    def step(self, t):
        res = self.engine.step(self.x, self.y)
        G = np.zeros_like(self.P)
        for t_ in self.graph["tensors"]:
            G[t_["offset"] // 4:(t_["offset"] + t_["nbytes"]) // 4] = \
                res["grads"][t_["name"]].reshape(-1)
        self.opt.step(self.P, G, t, self.lr_at(t))
        return res["loss"]


@pytest.mark.parametrize("name", list(FIXTURE["configs"]))
def test_optimizer_matches_torch(name):
    cfg = FIXTURE["configs"][name]
    flat = Flat(cfg)
    worst = 0.0
    for t in range(1, FIXTURE["steps"] + 1):
        loss = flat.step(t)
        assert rel_err(loss, cfg["losses"][t - 1]) <= FWD_RTOL, f"{name}: loss at step {t}"
        if "grad_norms" in cfg:
            assert rel_err(flat.opt.last_grad_norm, cfg["grad_norms"][t - 1]) <= FWD_RTOL
        for pname, value in cfg["params"][t - 1].items():
            err = rel_err(flat.views[pname], np.array(value))
            worst = max(worst, err)
            assert err <= OPTIM_RTOL, f"{name}: {pname} after step {t}: rel error {err:.3g}"
        assert flat.P.dtype == np.float32
    if "momenta" in cfg:
        assert max(abs(flat.opt.momentum_of(t) - m)
                   for t, m in enumerate(cfg["momenta"], 1)) <= SCHED_ATOL
    MAX_ERR["cpu." + name] = worst


@pytest.mark.parametrize("name", ["adamw_amsgrad", "rmsprop_centered_momentum_wd",
                                  "sgd_momentum_clip", "adadelta_rho_wd", "adagrad_decay_init",
                                  "sgd_zero_momentum_onecycle"])
def test_state_round_trip(name):
    """5 steps, save P + state, restore into a fresh optimizer, 5 more == 10 uninterrupted, bit
    for bit; the state is the GPU optimizer's format."""
    cfg = FIXTURE["configs"][name]
    whole = Flat(cfg)
    for t in range(1, 11):
        whole.step(t)
    half = Flat(cfg)
    for t in range(1, 6):
        half.step(t)
    state = half.opt.state_blob()
    assert state.startswith(b"WGTOPT1\n")
    rest = Flat(cfg, half.P)
    rest.opt.load_state_blob(state)
    assert rest.opt.state_blob() == state
    for t in range(6, 11):
        rest.step(t)
    assert rest.P.tobytes() == whole.P.tobytes()
    assert rest.opt.state_blob() == whole.opt.state_blob()


def test_state_mismatch_and_make_errors():
    adam = Flat(FIXTURE["configs"]["adam"])
    state = adam.opt.state_blob()
    for other, what in (("adam_amsgrad", "buffers"), ("adamw", "optimizer"),
                        ("rmsprop", "optimizer")):
        with pytest.raises(ValueError, match=what):
            Flat(FIXTURE["configs"][other]).opt.load_state_blob(state)
    with pytest.raises(ValueError, match="bytes of state"):
        adam.opt.load_state_blob(state[:-4])
    with pytest.raises(ValueError, match="unknown optimizer"):
        optim.make("lion", 1e-3)
    with pytest.raises(ValueError, match="rmsprop"):
        optim.make("rmsprop", 1e-3, betas=(0.9, 0.99))
    cyc = schedulers.make({"lr": 0.1, "scheduler": {"name": "onecycle", "max_lr": 1.0,
                                                    "total_steps": 40}}, 4)
    with pytest.raises(ValueError, match="must support momentum or beta1"):
        optim.make("adadelta", 1.0).follow(cyc)
    opt = optim.make("adamw", 1e-3, amsgrad=True, betas=[0.8, 0.9])
    assert isinstance(opt, optim.Adam) and isinstance(opt, gpu_optim.Adam)
    assert (opt.name, opt.betas, opt.weight_decay) == ("AdamW", (0.8, 0.9), 1e-2)


def test_gpu_state_continues_on_cpu(device):
    """5 steps on the GPU, its weights and optimizer state into the numpy optimizer, 5 steps
    there: still torch's trajectory (within OPTIM_RTOL)."""
    cfg = FIXTURE["configs"]["rmsprop_centered_onecycle_momentum"]
    lr_at = _lr_at(cfg)

    async def gpu_half():
        graph, blob = _model()
        plan = await parity.load(device, graph, blob, PROBLEM["batch"],
                                 np.array(PROBLEM["x"], np.float32).tobytes(),
                                 np.array(PROBLEM["labels"], np.uint32).tobytes())
        opt = _optimizer(cfg, gpu_optim).follow(lr_at)
        await opt.attach(plan)
        prog = parity.program(device, plan, opt=opt)
        for t in range(1, 6):
            parity.run_step(device, plan, t, opt=opt, lr=lr_at(t), prog=prog)
        first = await read_flat(device, plan, plan.P, "fc.weight")
        return await device.read(plan.P), await opt.state_bytes(device), first

    P, state, first = run(gpu_half())
    assert rel_err(first, cfg["params"][4]["fc.weight"]) <= OPTIM_RTOL  # after step 5
    flat = Flat(cfg, np.frombuffer(P, np.float32)[:Flat(cfg).P.size])
    flat.opt.load_state_blob(state)
    for t in range(6, 11):
        flat.step(t)
        for pname, value in cfg["params"][t - 1].items():
            assert rel_err(flat.views[pname], np.array(value)) <= OPTIM_RTOL, (t, pname)


# ---------------------------------------------------------------- numpy vs GPU engine

def _mlp(seed=0):
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((784, 24)) / 28).astype(np.float32)
    w2 = (rng.standard_normal((24, 10)) / 5).astype(np.float32)
    nodes = [node("Gemm", ["input", "fc1.w", "fc1.b"], ["h"]),
             node("Relu", ["h"], ["r"]),
             node("Gemm", ["r", "fc2.w", "fc2.b"], ["output"])]
    tensors = [("fc1.w", w1, "param"), ("fc1.b", np.zeros(24, np.float32), "param"),
               ("fc2.w", w2, "param"), ("fc2.b", np.zeros(10, np.float32), "param")]
    return make_graph(nodes, tensors, [("input", ["N", 784])], [("output", ["N", 10])])


def _collect(trainer):
    events = {"losses": [], "epochs": []}

    def emit(kind, **kw):
        if kind == "progress":
            events["losses"] += kw["losses"]
        elif kind == "epoch":
            events["epochs"].append(kw)
    trainer.emit = emit
    return events


VAL = 16  # the last 16 of the 112 training images validate; 96 train


@pytest.fixture(scope="module")
def splits():
    return native.load_splits(None, 96 + VAL, 40)[:2]


TRAINER_CASES = {
    # SGD built with momentum 0 under OneCycleLR cycling the momentum (both trainers follow the
    # schedule before attaching the optimizer), clipping
    "sgd_onecycle_clip": {"optimizer": "sgd", "lr": 0.05, "clip_grad_norm": 2.0,
                          "scheduler": {"name": "OneCycleLR", "max_lr": 0.1,
                                        "total_steps": 12},
                          "optimizer_args": {"dampening": 0.0}},
    # Adam cycling beta1 over three phases, CrossEntropy with label smoothing, only fc2 trains
    "adam_beta1_smoothing_frozen": {"optimizer": "adam", "lr": 0.01,
                                    "scheduler": {"name": "OneCycleLR", "max_lr": 0.02,
                                                  "total_steps": 12, "three_phase": True},
                                    "loss": {"loss": "cross_entropy", "label_smoothing": 0.1},
                                    "trainable": ["fc2.w", "fc2.b"]},
}


@pytest.mark.parametrize("case", list(TRAINER_CASES))
def test_cpu_trainer_matches_gpu_trainer(device, splits, case):
    """Same model, weights (finetune), data order and schedule on both backends: the per-step
    training losses, the validation metrics and the final weights agree (1e-4 relative)."""
    graph, blob = _mlp()
    cfg = {"batch_size": 16, "epochs": 2, "seed": 11, "init": "finetune", "eval_images": 40,
           "val_images": VAL, "report_every": 4, **TRAINER_CASES[case]}
    train_set, test_set = splits
    cpu_dev, results = native.CpuDevice(), {}
    for name, dev in (("cpu", cpu_dev), ("gpu", device)):
        tr = native.make_trainer(dev, graph, blob, cfg, train_set, test_set)
        events = _collect(tr)

        async def go(tr=tr, dev=dev, name=name):
            await tr.setup()
            out = await tr.run()
            return out, await tr.trained_weights(), await native.optimizer_state(dev, tr.opt)

        results[name] = (*run(go()), events, tr)
    (c_out, c_w, c_state, c_ev, c_tr), (g_out, g_w, g_state, g_ev, g_tr) = \
        results["cpu"], results["gpu"]
    if cfg["optimizer"] == "sgd":
        assert c_tr.opt.states[0] == g_tr.opt.states[0] == "momentum_buffer"
        assert c_tr.opt.momentum_of(1) == g_tr.opt.momentum_of(1) == 0.95
    else:
        assert c_tr.opt.momentum_of(5) == g_tr.opt.momentum_of(5) < 0.95
    if cfg.get("trainable"):
        assert c_w[:4 * 784 * 24] == blob[:4 * 784 * 24]  # fc1.w frozen
    assert [r[0] for r in c_ev["losses"]] == list(range(1, 13)) == [r[0] for r in g_ev["losses"]]
    for (t, cl, ca), (_, gl, ga) in zip(c_ev["losses"], g_ev["losses"]):
        assert rel_err(cl, gl) <= 1e-4, (t, cl, gl)
        assert ca == pytest.approx(ga, abs=1e-6)
    for ce, ge in zip(c_ev["epochs"], g_ev["epochs"]):
        assert rel_err(ce["val_loss"], ge["val_loss"]) <= 1e-4
        assert ce["val_acc"] == ge["val_acc"]
    err = rel_err(np.frombuffer(c_w, np.float32), np.frombuffer(g_w, np.float32))
    assert err <= 1e-4
    MAX_ERR[f"cpu-vs-gpu trainer {case}"] = err
    assert len(c_state) == len(g_state) and c_state[:40] == g_state[:40]
    assert (c_out["steps"], c_out["epochs_done"]) == (g_out["steps"], g_out["epochs_done"]) \
        == (12, 2)
    logits = np.frombuffer(c_out["logits"], np.float32).reshape(40, 10)
    assert np.allclose(np.exp(logits).sum(axis=1), 1, atol=1e-5)


def test_cpu_trainer_guard_init_and_dropout(splits):
    """lr 1e30 diverges with the guard's message (step and first layer); scratch init follows
    PyTorch's bounds and is seeded; SeedNet's dropout masks repeat for a seed."""
    train_set, test_set = splits
    from webgpu_trainer import onnx_io
    from webgpu_trainer.cpu.cpu_engine import CpuEngine
    graph, blob = _mlp()
    tr = train_mod.Trainer(CpuEngine(), graph, blob, {"optimizer": "sgd", "lr": 1e30,
                                                      "batch_size": 16, "init": "finetune",
                                                      "eval_images": 8, "val_images": VAL},
                           train_set, test_set)
    run(tr.setup())
    with pytest.raises(train_mod.TrainingDiverged, match=r"training diverged at step 2: .*"
                       r"in layer /Gemm_h \(parameter fc1\.w\).*lower learning rate") as exc:
        run(tr.run())
    assert (exc.value.step, exc.value.layer) == (2, "/Gemm_h")
    assert str(exc.value).endswith("Try a lower learning rate (now 1e+30 with sgd, e.g. 0.001, "
                                   "torch's default for SGD) or gradient clipping."), exc.value

    graph, blob = onnx_io.load_bundle(REPO / "models" / "seednet.onnx")

    def seednet(seed, steps=2):
        t = train_mod.Trainer(CpuEngine(), graph, blob,
                              {"optimizer": "adam", "batch_size": 16, "seed": seed,
                               "eval_images": 8, "val_images": VAL, "max_steps": steps,
                               "report_every": 1},
                              train_set, test_set)
        ev = _collect(t)
        run(t.setup())
        init = {k: v.copy() for k, v in t.engine.views.items()}
        run(t.run())
        return init, [r[1] for r in ev["losses"]]

    a, la = seednet(1)
    b, lb = seednet(1)
    c, _ = seednet(2, steps=0)
    assert la == lb and all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["conv1.weight"], c["conv1.weight"])
    for name, fan_in in (("conv1.weight", 9), ("conv2.bias", 72), ("fc1.weight", 11616),
                         ("fc2.weight", 32)):
        bound = 1 / math.sqrt(fan_in)
        assert np.abs(a[name]).max() <= bound and np.abs(a[name]).max() > 0.9 * bound, name
    assert np.all(a["norm1.weight"] == 1) and np.all(a["norm1.bias"] == 0)
    bn = [t["name"] for t in graph["tensors"] if t["role"] == "buffer"]
    assert bn and all(np.all(a[n] == (1 if "var" in n else 0)) for n in bn)


# ---------------------------------------------------------------- the CLI on the CPU

MODEL = REPO / "models" / "seednet.onnx"
EXE = [sys.executable, "-m", "webgpu_trainer.cli.main"]
# --val-images 64: validating on the default 5,000 held-out images took 3/4 of each run (the
# fixture's four runs passed the 300 s timeout under load); 64 still checks the validation
SMALL = ["--device", "cpu", "--train-images", "192", "--batch-size", "32", "--eval-images",
         "128", "--val-images", "64", "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
         "--nesterov",
         "--clip-grad-norm", "5", "--scheduler", "onecycle", "--max-lr", "0.1", "--seed", "5",
         "--report-every", "2", "--no-progress",
         "--checkpoint-every-s", "0"]  # checkpoints at epochs' ends only, at any speed


def cli(*args, check=True, timeout=300):
    proc = subprocess.run(EXE + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\n"
                             f"stderr:\n{proc.stderr}")
    return proc


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def metrics(run_dir: Path) -> list:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cpu-cli")
    a, b, c = root / "a", root / "b", root / "c"
    cli("train", MODEL, *SMALL, "--epochs", "2", "--out", a)
    cli("train", MODEL, *SMALL, "--epochs", "2", "--max-steps", "8", "--out", b)
    shutil.copytree(b, c)
    resumed = cli("train", "--resume", b, "--max-steps", "0", "--no-progress")
    before = {p.name: sha256(p) for p in (c / "checkpoints").iterdir()}
    diverged = cli("train", "--resume", c, "--max-steps", "0", "--lr", "1e30", "--scheduler",
                   "none", "--no-progress", check=False)
    return {"a": a, "b": b, "c": c, "resumed": resumed, "diverged": diverged, "before": before}


def test_cli_cpu_artifacts(cpu_runs):
    from webgpu_trainer.host import data
    a = cpu_runs["a"]
    doc = json.loads((a / "config.json").read_text())
    c = doc["config"]
    assert (c["device"], c["optimizer"], c["momentum"], c["clip_grad_norm"], c["seed"],
            c["train_images"], c["eval_images"], c["val_images"]) == \
        ("cpu", "sgd", 0.9, 5.0, 5, 192, 128, 64)
    assert c["nesterov"] is True
    assert (c["scheduler"], c["max_lr"], c["total_steps"]) == ("onecycle", 0.1, 12)
    assert doc["adapter"]["backend"] == "numpy"
    rows = metrics(a)
    assert [(r["epoch"], r["step"]) for r in rows] == [(1, 6), (2, 12)]
    for r in rows:
        assert all(math.isfinite(r[k]) for k in ("train_loss", "train_acc", "valid_loss",
                                                  "valid_acc"))
    assert rows[1]["train_loss"] < 2.3
    for epoch in (1, 2):
        header, sections = native.read_checkpoint(a / "checkpoints" / f"epoch-{epoch:03d}.ckpt")
        assert (header["epoch"], header["step"], header["device"]) == (epoch, 6 * epoch, "cpu")
        assert header["rng"]["dropout"].startswith("philox4x32-10")
        assert sections["optimizer"].startswith(b"WGTOPT1\n")
        assert header["metrics"]["valid_loss"] == rows[epoch - 1]["valid_loss"]
    import onnx
    model = onnx.load(str(a / "model.onnx"))
    onnx.checker.check_model(model, full_check=True)
    props = {p.key: p.value for p in model.metadata_props}
    assert props["backend"] == "numpy" and json.loads(props["scheduler"])["name"] == "OneCycleLR"
    # the CPU engine's eval mode agrees with onnxruntime on the exported model
    images, labels = data.load(None, "test")
    engine = run(native.engine_log_probs(native.CpuDevice(), a / "model.onnx", images[:8],
                                         labels[:8]))
    ort = np.log(native.onnxruntime_probs(a / "model.onnx", images[:8]))
    assert np.abs(engine - ort).max() <= 1e-4
    # validation: the last val_images training images (held out), judged by onnxruntime
    val = c["val_images"]
    train_x, train_y = data.load(None, "train")
    ort_val = np.log(native.onnxruntime_probs(a / "model.onnx", train_x[-val:]))
    nll = -ort_val[np.arange(val), train_y[-val:]].mean()
    assert abs(nll - rows[1]["valid_loss"]) <= 1e-4 * max(1.0, nll)
    ort = np.log(native.onnxruntime_probs(a / "model.onnx", images[:128]))
    out = cli("predict", a / "model.onnx", "--index", "12", "--device", "cpu").stdout
    digit = int(re.search(r"predicted (\d)\n", out).group(1))
    assert digit == int(np.exp(ort[12]).argmax())


def test_cli_cpu_resume_exact(cpu_runs):
    """B (stopped at step 8, resumed) ends with A's weights and optimizer state, bit for bit."""
    b = cpu_runs["b"]
    assert "resuming" in cpu_runs["resumed"].stderr
    assert sorted(p.name for p in (b / "checkpoints").iterdir()) == [
        "epoch-001.ckpt", "epoch-002-step-0000008.ckpt", "epoch-002.ckpt"]
    _, sa = native.read_checkpoint(cpu_runs["a"] / "checkpoints" / "epoch-002.ckpt")
    _, sb = native.read_checkpoint(b / "checkpoints" / "epoch-002.ckpt")
    assert sa["weights"] == sb["weights"] and sa["optimizer"] == sb["optimizer"]
    ra, rb = metrics(cpu_runs["a"]), metrics(b)
    assert (ra[-1]["valid_loss"], ra[-1]["valid_acc"]) == (rb[-1]["valid_loss"],
                                                            rb[-1]["valid_acc"])
    assert ra[0] == {**rb[0], "elapsed_s": ra[0]["elapsed_s"]}
    doc = json.loads((b / "config.json").read_text())
    assert doc["config"]["max_steps"] == 0 and len(doc["resumes"]) == 1
    assert doc["config"]["total_steps"] == 12  # kept, not re-derived


def test_cli_cpu_guard_keeps_checkpoints(cpu_runs):
    proc, c = cpu_runs["diverged"], cpu_runs["c"]
    assert proc.returncode == 3, proc.stderr
    m = re.search(r"training diverged at step (\d+).*in layer (\S+) \(parameter (\S+)\)",
                  proc.stderr)
    assert m and int(m.group(1)) > 8 and "lower learning rate" in proc.stderr, proc.stderr
    assert {p.name: sha256(p) for p in (c / "checkpoints").iterdir()} == cpu_runs["before"]
    assert json.loads((c / "config.json").read_text())["config"]["scheduler"] == "none"


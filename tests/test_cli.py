"""`webgpu-trainer train` / `predict` on the native backend (issue 3 items 5 and 6).

lavapipe is slow, so every run is a subset: the first 640 MNIST training images (10 steps of 64
per epoch), validation on the first 256 test images, 2 epochs. One module-scoped set of runs
(each a real `webgpu-trainer` subprocess; SGD with Nesterov momentum, gradient clipping and a
StepLR schedule, which config.json must record and --resume must reuse) serves all tests:

- A: 2 epochs uninterrupted;
- B: 1 epoch, then `--resume B --epochs 2` (no optimizer or schedule options: from config.json);
- C: a copy of B after its first epoch, resumed with `--lr 1e30 --clip-grad-norm 0` (diverges;
  see test_guard).

The option checks (test_option_errors) fail before any training, on `--device cpu`; the numpy
device's training runs are tests/test_cpu_backend.py's.

Fine-tuning, loss options and `summary` (the last section) use their own tiny runs (96 training
images, 3 steps of 32 per epoch, 32 validation and 32 eval images): `--head-only` on the GPU,
`--freeze` with `--loss mse --reduction sum` on the CPU, each resumed once; their option errors
and `summary` start no training.
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

from conftest import run

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "models" / "seednet.onnx"
EXE = [sys.executable, "-m", "webgpu_trainer.cli.main"]
SMALL = ["--train-images", "640", "--val-images", "256", "--batch-size", "64",
         "--eval-images", "256", "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
         "--seed", "3", "--nesterov", "--clip-grad-norm", "5", "--scheduler", "steplr",
         "--gamma", "0.5",
         "--no-progress", "--checkpoint-every-s", "0"]  # epochs' ends only, at any speed
METRIC_KEYS = ("epoch", "step", "train_loss", "train_acc", "valid_loss", "valid_acc")
ONECYCLE = ("scheduler", "max_lr", "total_steps", "pct_start", "anneal_strategy", "div_factor",
            "final_div_factor", "three_phase", "cycle_momentum", "base_momentum", "max_momentum")


def cli(*args, check=True, timeout=300):
    proc = subprocess.run(EXE + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\n"
                             f"stderr:\n{proc.stderr}")
    return proc


def cli_in_process(*args):
    """``webgpu-trainer *args`` run in this process (``cli.main``, as ``python -m`` runs it, in a
    thread of its own: no event loop of the test's): ``(exit status, stderr)``. For the option
    checks, which stop before any training: a subprocess would spend its second importing onnx
    and wgpu (the process's own exit status: test_resume_of_a_missing_folder_names_it and the
    other subprocess tests)."""
    import contextlib
    import io
    from concurrent.futures import ThreadPoolExecutor

    from webgpu_trainer.cli import main as cli_mod

    def go():
        try:
            return cli_mod.main([str(a) for a in args])
        except SystemExit as exc:  # argparse's errors
            return exc.code
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out), \
            ThreadPoolExecutor(1) as pool:
        code = pool.submit(go).result()
    return code, err.getvalue()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def metrics(run_dir: Path) -> list:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, device):
    root = tmp_path_factory.mktemp("cli")
    a, b, c = root / "a", root / "b", root / "c"
    cli("train", MODEL, *SMALL, "--epochs", "2", "--out", a)
    cli("train", MODEL, *SMALL, "--epochs", "1", "--out", b)
    shutil.copytree(b, c)
    resumed = cli("train", "--resume", b, "--epochs", "2", "--no-progress")
    ckpt = c / "checkpoints" / "epoch-001.ckpt"
    before = sha256(ckpt)
    # (clipping would keep the steps finite: options given again override the stored ones)
    diverged = cli("train", "--resume", c, "--epochs", "2", "--lr", "1e30", "--clip-grad-norm",
                   "0", "--no-progress", check=False)
    return {"a": a, "b": b, "c": c, "resumed": resumed, "diverged": diverged,
            "ckpt_before": before, "ckpt": ckpt}


def test_artifacts(runs, device):
    from webgpu_trainer.host import data
    from webgpu_trainer.cli import commands as native
    a = runs["a"]
    cfg = json.loads((a / "config.json").read_text())
    for key in ("config", "model", "data", "versions", "adapter", "created", "command"):
        assert key in cfg, key
    c = cfg["config"]
    assert (c["optimizer"], c["lr"], c["batch_size"], c["epochs"], c["seed"], c["init"],
            c["momentum"], c["train_images"], c["eval_images"]) == \
        ("sgd", 0.05, 64, 2, 3, "scratch", 0.9, 640, 256)
    assert (c["device"], c["clip_grad_norm"], c["nesterov"], c["dampening"]) == \
        ("gpu", 5.0, True, 0.0)
    assert (c["scheduler"], c["gamma"], c["step_size"], c["interval"]) == \
        ("steplr", 0.5, 1, "epoch")
    assert "betas" not in c and "T_max" not in c  # only the chosen optimizer's / schedule's
    assert cfg["model"]["sha256"] == sha256(MODEL)
    assert cfg["data"]["train_images"] == 640 and cfg["data"]["eval_images"] == 256
    for pkg in ("python", "webgpu-trainer", "wgpu", "onnx", "onnxruntime", "numpy"):
        assert cfg["versions"].get(pkg), pkg

    rows = metrics(a)
    assert [r["epoch"] for r in rows] == [1, 2] and [r["step"] for r in rows] == [10, 20]
    for r in rows:
        assert all(math.isfinite(r[k]) for k in METRIC_KEYS)
        assert 0 <= r["train_acc"] <= 1 and 0 <= r["valid_acc"] <= 1
    assert rows[1]["train_loss"] < 2.3  # it learns something in 20 steps

    for epoch, step in ((1, 10), (2, 20)):
        header, sections = native.read_checkpoint(a / "checkpoints" / f"epoch-{epoch:03d}.ckpt")
        assert (header["epoch"], header["step"], header["rng"]["seed"]) == (epoch, step, 3)
        assert set(sections) == {"weights", "optimizer"} and len(sections["weights"]) > 0
        assert header["metrics"]["valid_loss"] == rows[epoch - 1]["valid_loss"]
    assert not list((a / "checkpoints").glob(".*tmp*")), "temp files left behind"

    import onnx
    model = onnx.load(str(a / "model.onnx"))
    onnx.checker.check_model(model, full_check=True)
    props = {p.key: p.value for p in model.metadata_props}
    assert props["trained_with"] == "webgpu-trainer" and props["dataset"] == "MNIST"

    # onnxruntime on the exported model vs the engine's eval mode on the same weights.
    images, labels = data.load(None, "test")
    engine = run(native.engine_log_probs(device, a / "model.onnx", images[:8], labels[:8]))
    ort = np.log(native.onnxruntime_probs(a / "model.onnx", images[:8]))
    assert np.abs(engine - ort).max() <= 1e-4
    # ... and the run's last validation loss is onnxruntime's NLL on the 256 validation images:
    # the last 256 of the training split, held out of training
    images, labels = data.load(None, "train")
    ort = np.log(native.onnxruntime_probs(a / "model.onnx", images[-256:]))
    nll = -ort[np.arange(256), labels[-256:]].mean()
    assert abs(nll - rows[1]["valid_loss"]) <= 1e-4 * max(1.0, nll)
    assert cfg["data"]["val_images"] == 256


def test_resume_continues_exactly(runs):
    assert "resuming" in runs["resumed"].stderr
    a, b = metrics(runs["a"]), metrics(runs["b"])
    assert len(b) == 2
    for ra, rb in zip(a, b):
        for k in METRIC_KEYS:
            assert abs(ra[k] - rb[k]) <= 1e-6, (k, ra[k], rb[k])
    from webgpu_trainer.cli import commands as native
    _, sa = native.read_checkpoint(runs["a"] / "checkpoints" / "epoch-002.ckpt")
    _, sb = native.read_checkpoint(runs["b"] / "checkpoints" / "epoch-002.ckpt")
    wa, wb = (np.frombuffer(s["weights"], np.float32) for s in (sa, sb))
    assert np.abs(wa - wb).max() <= 1e-6


def test_guard_stops_and_keeps_checkpoint(runs):
    proc = runs["diverged"]
    assert proc.returncode == 3, proc.stderr
    m = re.search(r"training diverged at step (\d+).*in layer (\S+) \(parameter (\S+)\)",
                  proc.stderr)
    assert m, proc.stderr
    assert int(m.group(1)) > 10  # the resumed epoch's steps are 11..20
    assert m.group(2).startswith("/") and "lower learning rate" in proc.stderr
    assert sha256(runs["ckpt"]) == runs["ckpt_before"]
    assert not (runs["c"] / "checkpoints" / "epoch-002.ckpt").exists()
    assert len(metrics(runs["c"])) == 1
    cfg = json.loads((runs["c"] / "config.json").read_text())["config"]
    assert (cfg["lr"], cfg["clip_grad_norm"], cfg["scheduler"]) == (1e30, 0.0, "steplr")


def test_predict_matches_onnxruntime(runs):
    from webgpu_trainer.host import data
    from webgpu_trainer.cli import commands as native
    model = runs["a"] / "model.onnx"
    out = cli("predict", model, "--index", "12").stdout
    digit = int(re.search(r"predicted (\d)\n", out).group(1))
    images, _ = data.load(None, "test")
    assert digit == int(native.onnxruntime_probs(model, images[12:13])[0].argmax())
    assert out.startswith("MNIST test image 12 (label ")
    rows = re.findall(r"^(\d)  ([0-9.]+)  ([0-9.]+)$", out, re.M)  # class, engine, onnxruntime
    assert [r[0] for r in rows] == [str(d) for d in range(10)]
    engine = [float(r[1]) for r in rows]
    assert abs(sum(engine) - 1) < 1e-3 and max(engine) == engine[digit]


def test_checkpoint_round_trip_and_atomic(tmp_path):
    from webgpu_trainer.cli import commands as native
    path = tmp_path / "x.ckpt"
    native.write_checkpoint(path, {"epoch": 4, "step": 40}, {"weights": b"\x01" * 12,
                                                             "optimizer": b"abc"})
    header, sections = native.read_checkpoint(path)
    assert (header["epoch"], header["step"]) == (4, 40)
    assert sections == {"weights": b"\x01" * 12, "optimizer": b"abc"}
    assert [p.name for p in tmp_path.iterdir()] == ["x.ckpt"]
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="corrupt"):
        native.read_checkpoint(path)


@pytest.mark.parametrize("args, message", [
    (["--gamma", "0.5"], "--gamma: applies to scheduler steplr, exponential only, not "
                         "scheduler none"),
    (["--scheduler", "steplr", "--max-lr", "1"],
     "--max-lr: applies to scheduler onecycle only, not scheduler steplr"),
    (["--scheduler", "none", "--t-max", "3"], "--t-max: applies to scheduler cosine only"),
    (["--scheduler", "exponential"],
     r"--gamma: required by scheduler exponential \(a number > 0\)"),
    (["--optimizer", "sgd", "--betas", "0.9", "0.99"],
     "--betas: applies to optimizer adam, adamw only, not optimizer sgd"),
    (["--optimizer", "sgd", "--nesterov"], "--nesterov: needs momentum > 0 and dampening 0"),
    (["--optimizer", "adagrad", "--scheduler", "onecycle"],
     "--cycle-momentum: adagrad has no momentum or beta1 for OneCycleLR to cycle"),
    (["--scheduler", "onecycle", "--total-steps", "2", "--train-images", "256",
      "--batch-size", "64"], r"--total-steps: must be an integer >= 4 \(this run takes 4 "
                             "steps"),
    (["--clip-grad-norm", "-1"], r"--clip-grad-norm: must be a number >= 0, got -1\.0"),
    (["--scheduler", "onecycle", "--three-phase", "--pct-start", "0.25", "--total-steps", "4",
      "--train-images", "256", "--batch-size", "64"],
     "--pct-start: must not be 1/total_steps .*the first phase of the cycle would have no "
     "steps"),
    (["--seed", "-1", "--epochs", "1001", "--lr", "0"],
     r"error: 3 bad options:\n- --lr: must be a number > 0, got 0\.0\n- --epochs: must be an "
     r"integer in \[1, 1000\], got 1001\n- --seed: must be an integer in \[0, 4,294,967,295\]"),
    (["--batch-size", "100000"], r"--batch-size: must be an integer in \[2, 65,536\]"),
    (["--batch-size", "512", "--train-images", "256"],
     r"--batch-size: must be an integer in \[2, 256\] \(at most the 256 training images\)"),
    (["--seed", "1.5"], "argument --seed: invalid int value: '1.5'"),
    # issue 16: these reached the GPU's struct.pack ("float too large to pack with f format")
    (["--lr", "1e308"], r"--lr: must be a number > 0 and at most 3\.403e\+38 \(the largest "
                        r"float32, which the GPU computes in\), got 1e\+308"),
    (["--weight-decay", "1e308"], r"--weight-decay: must be a number >= 0 and at most "
                                  r"3\.403e\+38"),
    (["--optimizer", "adamw", "--lr", "1e30", "--weight-decay", "1e10"],
     r"--weight-decay: lr x weight_decay = 1e\+40 is above 3\.403e\+38"),
])
def test_option_errors(tmp_path, args, message):
    """Bad options stop before anything is written (exit 2), every bad one named by its flag
    with the allowed values."""
    out = tmp_path / "r"
    code, err = cli_in_process("train", MODEL, "--device", "cpu", "--out", out, *args)
    assert code == 2 and re.search(message, err), err
    assert not out.exists()


def test_scheduler_options_recorded(tmp_path):
    """Every schedule option lands in config["scheduler"] under torch's keyword, with the
    run-dependent defaults resolved (here only --max-steps 1 of a 4-step run on the CPU)."""
    out = tmp_path / "r"
    cli("train", MODEL, "--device", "cpu", "--out", out, "--train-images", "512",
        "--batch-size", "32", "--eval-images", "8", "--max-steps", "1", "--no-progress",
        "--optimizer", "adam", "--betas", "0.8", "0.99", "--eps", "1e-6", "--amsgrad",
        "--scheduler", "onecycle", "--pct-start", "0.25", "--anneal-strategy", "linear",
        "--div-factor", "10", "--final-div-factor", "100", "--three-phase",
        "--base-momentum", "0.8", "--max-momentum", "0.9")
    c = json.loads((out / "config.json").read_text())["config"]
    assert (c["betas"], c["eps"], c["amsgrad"]) == ([0.8, 0.99], 1e-6, True)
    sched = {k: c[k] for k in c if k in ONECYCLE}
    assert sched == {"scheduler": "onecycle", "pct_start": 0.25, "anneal_strategy": "linear",
                     "div_factor": 10.0, "final_div_factor": 100.0, "three_phase": True,
                     "cycle_momentum": True, "base_momentum": 0.8, "max_momentum": 0.9,
                     "max_lr": 0.001, "total_steps": 16}
    # the other schedules, parsed and completed in-process (no run): 10 steps per epoch
    from webgpu_trainer.cli import main as cli_mod
    from webgpu_trainer.cli.run_config import resolve_config
    from webgpu_trainer.engine import config
    for argv, want in (
            (["--scheduler", "cosine", "--eta-min", "0.001"],
             {"name": "CosineAnnealingLR", "eta_min": 0.001, "T_max": 3, "interval": "epoch"}),
            (["--scheduler", "cosine", "--scheduler-interval", "step"],
             {"name": "CosineAnnealingLR", "interval": "step", "T_max": 30, "eta_min": 0.0}),
            (["--scheduler", "exponential", "--gamma", "0.9"],
             {"name": "ExponentialLR", "gamma": 0.9, "interval": "epoch"}),
            (["--scheduler", "steplr", "--step-size", "2"],
             {"name": "StepLR", "step_size": 2, "gamma": 0.1, "interval": "epoch"}),
            (["--scheduler", "onecycle", "--max-lr", "0.1", "--no-cycle-momentum",
              "--total-steps", "50"],
             {"name": "OneCycleLR", "max_lr": 0.1, "cycle_momentum": False, "total_steps": 50,
              "pct_start": 0.3, "anneal_strategy": "cos", "div_factor": 25.0,
              "final_div_factor": 1e4, "three_phase": False, "base_momentum": 0.85,
              "max_momentum": 0.95}),
            ([], None)):
        args = cli_mod.build_parser().parse_args(["train", str(MODEL), "--epochs", "3",
                                                  "--batch-size", "64", "--val-images", "0",
                                                  *argv])
        cfg = config.parse(resolve_config(args)[0], train_images=640)
        assert cfg.trainer_config()["scheduler"] == want, argv


# ------------------------------------------------------------------ fine-tuning, loss, summary

LOSS_KEYS = ("loss", "reduction", "label_smoothing", "class_weights")
# (32 validation images: the default 5,000 held-out images cost a tiny run ~25 s of evaluation
# on the CPU at each epoch's end, ~10 s on lavapipe)
TINY = ["--train-images", "96", "--batch-size", "32", "--eval-images", "32", "--val-images",
        "32", "--optimizer", "sgd", "--seed", "1", "--no-progress"]


def initializers(path: Path) -> dict:
    """{name: raw little-endian bytes} of a model's initializers."""
    import onnx
    from onnx import numpy_helper
    return {t.name: numpy_helper.to_array(t).astype("<f4").tobytes()
            for t in onnx.load(str(path)).graph.initializer}


def test_head_only_finetune(tmp_path, device):
    """--head-only --init finetune on the GPU: the body's parameters in the written model.onnx
    are byte-identical to the original, the head's are not; BatchNorm running statistics still
    update (train mode, as PyTorch). config.json records the resolved list and --resume keeps
    it (3 more steps, still frozen)."""
    from webgpu_trainer import onnx_io
    from webgpu_trainer.engine.tools import summary
    out = tmp_path / "r"
    proc = cli("train", MODEL, "--head-only", "--init", "finetune", "--lr", "0.05", *TINY,
               "--out", out)
    head = summary.head_params(onnx_io.load_bundle(MODEL)[0])
    assert head == ["fc2.weight", "fc2.bias", "norm2.weight", "norm2.bias"]
    assert "training 4 of 14 parameters (350 of 376,870 values)" in proc.stderr
    cfg = json.loads((out / "config.json").read_text())["config"]
    assert cfg["trainable"] == head
    before = initializers(MODEL)

    def check(after):
        assert set(after) == set(before)
        for name, raw in after.items():
            if name in head or "running" in name:
                assert raw != before[name], f"{name} did not change"
            else:
                assert raw == before[name], f"frozen {name} changed"
    check(initializers(out / "model.onnx"))
    resumed = cli("train", "--resume", out, "--epochs", "2", "--no-progress")
    assert "resuming" in resumed.stderr and "training 4 of 14" in resumed.stderr
    assert "from epoch-001.ckpt (epoch 1, step 3)" in resumed.stderr, resumed.stderr
    assert json.loads((out / "config.json").read_text())["config"]["trainable"] == head
    assert [r["step"] for r in metrics(out)] == [3, 6]
    check(initializers(out / "model.onnx"))
    import onnx
    props = {p.key: p.value for p in onnx.load(str(out / "model.onnx")).metadata_props}
    assert json.loads(props["trainable"]) == head


def test_freeze_prefix_and_loss_options(tmp_path):
    """--freeze conv1. (a prefix) freezes conv1.weight and conv1.bias only; --loss mse
    --reduction sum is recorded, trains to finite losses, and --resume keeps both (CPU)."""
    out = tmp_path / "r"
    cli("train", MODEL, "--device", "cpu", "--freeze", "conv1.", "--loss", "mse",
        "--reduction", "sum", "--lr", "0.001", "--init", "finetune", *TINY, "--out", out)
    cfg = json.loads((out / "config.json").read_text())["config"]
    before = initializers(MODEL)
    params = [n for n in before if "running" not in n]
    assert cfg["trainable"] == [n for n in params if n not in ("conv1.weight", "conv1.bias")]
    spec = {"loss": "mse", "reduction": "sum"}  # label_smoothing, class_weights: not for mse
    assert {k: cfg[k] for k in LOSS_KEYS if k in cfg} == spec
    for r in metrics(out):
        assert all(math.isfinite(r[k]) for k in METRIC_KEYS), r
    after = initializers(out / "model.onnx")
    changed = {n for n in params if after[n] != before[n]}
    assert changed == set(cfg["trainable"])
    cli("train", "--resume", out, "--epochs", "2", "--no-progress")
    stored = json.loads((out / "config.json").read_text())["config"]
    assert {k: stored[k] for k in LOSS_KEYS if k in stored} == spec
    assert stored["trainable"] == cfg["trainable"]
    assert len(metrics(out)) == 2 and all(math.isfinite(r["train_loss"]) for r in metrics(out))
    after = initializers(out / "model.onnx")
    assert {n for n in params if after[n] != before[n]} == set(cfg["trainable"])

    # Options given on --resume (parsed in-process, no run): --reduction alone updates the
    # stored spec, a new --loss starts a new one, a freeze option replaces the stored list.
    from webgpu_trainer.cli import main as cli_mod
    from webgpu_trainer.cli import commands as native
    from webgpu_trainer.cli.run_config import resolve_config
    for argv, want in ((["--reduction", "mean"], {**spec, "reduction": "mean"}),
                       (["--loss", "cross_entropy", "--label-smoothing", "0.1"],
                        {"loss": "cross_entropy", "reduction": "mean", "label_smoothing": 0.1,
                         "class_weights": None}),
                       ([], spec)):
        args = cli_mod.build_parser().parse_args(["train", "--resume", str(out), *argv])
        cfg = resolve_config(args)[0]
        assert {k: cfg[k] for k in LOSS_KEYS if k in cfg} == want, argv
    from webgpu_trainer import onnx_io
    graph = onnx_io.load_bundle(MODEL)[0]
    assert native.resolve_trainable(graph, trainable="fc2.bias,fc2.weight") == \
        ["fc2.weight", "fc2.bias"]
    assert native.resolve_trainable(graph, freeze="conv,fc1.,norm") == \
        ["fc2.weight", "fc2.bias"]
    assert native.resolve_trainable(graph) is None


PARAMS = "the model's parameters: conv1.weight, conv1.bias, conv2.weight"


@pytest.mark.parametrize("args, message", [
    (["--trainable", "fc2.weight,nope,fc9.bias"],
     f"--trainable: no parameter named 'nope', 'fc9.bias'; {PARAMS}"),
    (["--trainable", "norm1.running_mean"], "'norm1.running_mean' is a buffer"),
    (["--freeze", "conv1.,conv9."],
     f"--freeze: no parameter named or starting with 'conv9.'; {PARAMS}"),
    (["--freeze", "conv,fc,norm"], "every parameter would be frozen"),
    (["--trainable", ","], "argument --trainable: no parameter names given"),
    (["--head-only", "--freeze", "conv1."], "not allowed with argument --head-only"),
    (["--class-weights", "1,2,3"],
     "--class-weights: must be 10 numbers, each >= 0 (one per class of the model), got 3"),
    (["--class-weights", "1,x"], "argument --class-weights: 'x' is not a number"),
    (["--loss", "nll", "--label-smoothing", "0.1"],
     "--label-smoothing: applies to loss auto, cross_entropy, nll_log only, not loss nll"),
    (["--loss", "mse", "--class-weights", ",".join(["1"] * 10)],
     "--class-weights: applies to loss auto, cross_entropy, nll, nll_log only, not loss mse"),
    (["--label-smoothing", "1.5"], "--label-smoothing: must be a number in [0, 1], got 1.5"),
    (["--loss", "hinge"], "argument --loss: invalid choice: 'hinge'"),
])
def test_freeze_and_loss_errors(tmp_path, args, message):
    """Bad fine-tuning / loss options exit 2 with the message before anything is written."""
    out = tmp_path / "r"
    code, err = cli_in_process("train", MODEL, "--device", "cpu", "--out", out, *args)
    assert code == 2 and message in err, err
    assert not out.exists()


def test_summary(tmp_path):
    out = cli("summary", MODEL).stdout
    assert re.search(r"Total params:\s+376,870\n", out), out
    assert re.search(r"Trainable params:\s+376,870\n", out) and "Buffers:" in out
    assert re.search(r"Mult-adds:\s+2,756,960", out)
    for layer, op, shape, params, macs, mark in (
            ("/conv1/Conv", "Conv", "[1, 8, 26, 26]", "80", "48,672", "yes"),
            ("/fc1/Gemm", "Gemm", "[1, 32]", "371,744", "371,712", "yes"),
            ("/LogSoftmax", "LogSoftmax", "[1, 10]", "-", "-", "")):
        assert re.search(rf"^{re.escape(layer)} +{op} +{re.escape(shape)} +{params} +{macs}"
                         rf"(  {mark})?$", out, re.MULTILINE), (layer, out)
    assert sum(1 for x in out.splitlines() if x.startswith("/")) == 14
    frozen = cli("summary", MODEL, "--head-only").stdout
    assert re.search(r"Trainable params:\s+350\n", frozen)
    assert re.search(r"Frozen params:\s+376,520\n", frozen)
    assert next(x for x in frozen.splitlines() if x.startswith("/fc1/Gemm")).endswith(" no")
    assert next(x for x in frozen.splitlines() if x.startswith("/fc2/Gemm")).endswith(" yes")
    doc = json.loads(cli("summary", MODEL, "--json").stdout)
    assert doc["totals"]["params"] == 376870


def test_summary_of_broken_models(tmp_path):
    """A model that cannot be imported / trained: every problem, one per line, exit 2."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not an onnx file")
    proc = cli("summary", junk, check=False)
    assert proc.returncode == 2 and not proc.stdout
    assert f"error: {junk} cannot be imported (1 problem):\n- not a valid ONNX file" in proc.stderr
    # a symbolic sample dim + an op the engine does not train: two problems, two lines
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])
    nodes = [helper.make_node("Flatten", ["x"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "w"], ["h"], name="fc"),
             helper.make_node("Hardmax", ["h"], ["y"], name="hm")]
    w = numpy_helper.from_array(np.zeros((3072, 10), np.float32), "w")
    bad = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "bad", [x], [y], [w]),
                                opset_imports=[helper.make_opsetid("", 17)]), str(bad))
    proc = cli("summary", bad, check=False)
    assert proc.returncode == 2 and not proc.stdout
    lines = proc.stderr.splitlines()
    assert re.match(rf"error: {re.escape(str(bad))} cannot be imported \(\d+ problems\):",
                    lines[0]), proc.stderr
    assert "- input 'x' has shape ['N', 3, 'H', 32]: every dim but the batch must be a fixed " \
        "size (re-export with only the batch axis dynamic)" in lines, proc.stderr
    assert "- unsupported op: node hm (Hardmax, ai.onnx opset 17)" in lines, proc.stderr


def test_resume_with_nothing_left_to_train_is_an_error(tmp_path):
    """A run that stopped at its --max-steps, resumed with more --epochs but the same stored
    --max-steps, has nothing to train: exit 2 naming the limit, checkpoint untouched (CPU)."""
    out = tmp_path / "r"
    cli("train", MODEL, "--device", "cpu", "--train-images", "256", "--eval-images", "32",
        "--val-images", "32", "--batch-size", "32", "--max-steps", "3", "--out", out)
    ckpts = sorted((out / "checkpoints").iterdir())
    before = {p.name: sha256(p) for p in ckpts}
    proc = cli("train", MODEL, "--resume", out, "--epochs", "2", check=False)
    assert proc.returncode == 2, proc.stderr
    assert "nothing to train" in proc.stderr and "--max-steps 3" in proc.stderr
    # inside epoch 1 of 7 steps (224 of the 256 images train): the name's epoch, 1-based
    assert f"from {ckpts[-1].name} (epoch 1, step 3)" in proc.stderr, proc.stderr
    assert ckpts[-1].name == "epoch-001-step-0000003.ckpt"
    assert {p.name: sha256(p) for p in sorted((out / "checkpoints").iterdir())} == before


def test_resume_of_a_missing_folder_names_it(tmp_path):
    proc = cli("train", MODEL, "--resume", tmp_path / "nope", check=False)
    assert proc.returncode == 2
    assert "not a run folder" in proc.stderr and "nope" in proc.stderr


def test_resume_of_a_run_with_an_old_config_json(tmp_path):
    """A run folder whose config.json has the format of earlier versions (nested
    optimizer_args / scheduler / loss specs; tests/test_config.py's LEGACY, as commit fdeef2b
    wrote it) resumes and repeats the uninterrupted run bit for bit (CPU); those versions had no
    validation images (``val_images`` 0: validation was on the test images)."""
    from test_config import LEGACY
    from webgpu_trainer.cli import commands as native
    opts = ["--device", "cpu", "--train-images", "96", "--batch-size", "32", "--eval-images",
            "32", "--optimizer", "adamw", "--amsgrad", "--lr", "0.01", "--seed", "4",
            "--scheduler", "steplr", "--gamma", "0.5", "--loss", "cross_entropy",
            "--label-smoothing", "0.1", "--head-only", "--init", "finetune", "--no-progress",
            "--val-images", "0", "--report-every", "10"]  # LEGACY's: the default then
    whole, old = tmp_path / "whole", tmp_path / "old"
    cli("train", MODEL, *opts, "--epochs", "2", "--out", whole)
    cli("train", MODEL, *opts, "--epochs", "1", "--out", old)
    doc = json.loads((old / "config.json").read_text())
    (old / "config.json").write_text(json.dumps({**doc, "config": LEGACY}))
    cli("train", "--resume", old, "--epochs", "2", "--no-progress")
    _, a = native.read_checkpoint(whole / "checkpoints" / "epoch-002.ckpt")
    _, b = native.read_checkpoint(old / "checkpoints" / "epoch-002.ckpt")
    assert a["weights"] == b["weights"] and a["optimizer"] == b["optimizer"]
    stored = json.loads((old / "config.json").read_text())["config"]
    assert stored == json.loads((whole / "config.json").read_text())["config"]


@pytest.mark.parametrize("module", ["webgpu_trainer", "webgpu_trainer.cli"])
def test_python_dash_m_runs_the_command(module):
    """``python -m webgpu_trainer`` (and ``.cli``) is the ``webgpu-trainer`` command: its
    usage names the subcommands, and an unknown one fails with argparse's exit status 2."""
    ok = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                        text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "train" in ok.stdout and "serve" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", module, "no-such-command"], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "no-such-command" in bad.stderr

"""Honest evaluation (issue 10): validation held out of the training split, evaluation in chunks
with progress events, progress reports after step 1 and every REPORT_S seconds, and the
verdict of a run (engine/train/verdict.py).

The trainer runs on both engines (wgpu-py and numpy) with real MNIST; its validation and test
numbers are checked against a float64 numpy forward of the trained weights on exactly the
images each should cover."""

import math

import numpy as np
import pytest
from conftest import FWD_RTOL, rel_err, run, tiny_mlp

from webgpu_trainer.cli import commands as native
from webgpu_trainer.cpu.cpu_engine import CpuEngine
from webgpu_trainer.engine import config
from webgpu_trainer.engine.train import loop as train_mod
from webgpu_trainer.engine.train.gpu_engine import GpuEngine
from webgpu_trainer.engine.train.data import MNIST_MEAN, MNIST_STD, Split, holdout
from webgpu_trainer.engine.train.evaluate import VAL_POINTS
from webgpu_trainer.engine.train.loop import Trainer
from webgpu_trainer.engine.train.verdict import lower_lr, verdict


# ---------------------------------------------------------------- the split

def _numbered(n: int) -> Split:
    """n images whose first 4 bytes hold their index (uint32), labels index % 10."""
    images = np.zeros((n, 784), np.uint8)
    images[:, :4] = np.arange(n, dtype="<u4").view(np.uint8).reshape(n, 4)
    labels = (np.arange(n) % 10).astype(np.uint8).tobytes()
    return Split(images.tobytes(), labels, n, labels)


def _indices(split: Split) -> np.ndarray:
    im = np.frombuffer(split.images, np.uint8).reshape(split.count, 784)
    return np.ascontiguousarray(im[:, :4]).view("<u4").ravel()


@pytest.mark.parametrize("train_images, want_train", [(0, 250), (100, 100), (250, 250)])
def test_holdout_takes_the_last_images_and_training_the_rest(train_images, want_train):
    data = _numbered(300)
    cfg = config.parse({"val_images": 50, "train_images": train_images, "batch_size": 8},
                       train_images=300)
    tr, val = holdout(data, cfg)
    ti, vi = _indices(tr), _indices(val)
    assert (tr.count, val.count) == (want_train, 50) == (len(ti), len(vi))
    assert list(vi) == list(range(250, 300))  # the end of the split, for every seed
    assert list(ti) == list(range(want_train))
    assert not set(ti) & set(vi)
    assert val.labels_host == bytes(i % 10 for i in range(250, 300)) == val.labels
    assert cfg.steps(300) == (want_train // 8, want_train // 8)
    assert config.train_used(cfg, 300) == want_train


def test_mnist_split_is_55000_5000_and_bad_counts_name_the_field():
    cfg = config.parse({"batch_size": 64}, train_images=60000)
    assert cfg["val_images"] == 5000 and config.train_used(cfg, 60000) == 55000
    assert cfg.steps(60000) == (55000 // 64, 55000 // 64)
    assert config.parse({"val_images": 0}, train_images=60000).steps(60000) == (937, 937)
    with pytest.raises(config.ConfigError) as e:
        config.parse({"train_images": 55001}, train_images=60000)
    assert e.value.errors == [("train_images", "must be an integer in [0, 55,000] (the 60,000 "
                                               "training images less the last 5,000 held out "
                                               "for validation; 0 = all of them), got 55,001")]
    with pytest.raises(config.ConfigError, match="val_images: must be an integer in "
                                                 r"\[0, 98\]"):
        config.parse({"val_images": 99, "batch_size": 2}, train_images=100)


# ---------------------------------------------------------------- the trainer



def _reference(weights: bytes, graph: dict, images: np.ndarray, labels: np.ndarray):
    """float64 numpy forward of the MLP: (cross-entropy mean, accuracy, log-probabilities)."""
    flat = np.frombuffer(weights, np.float32)
    w = {t["name"]: flat[t["offset"] // 4:(t["offset"] + t["nbytes"]) // 4]
         .reshape(t["shape"]).astype(np.float64) for t in graph["tensors"]}
    x = (images.astype(np.float64) / 255 - MNIST_MEAN) / MNIST_STD
    h = np.maximum(x @ w["fc1.w"].T + w["fc1.b"], 0)
    z = h @ w["fc2.w"].T + w["fc2.b"]
    logp = z - z.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    idx = np.arange(len(labels))
    return -logp[idx, labels].mean(), float((z.argmax(1) == labels).mean()), logp


VAL, TRAIN, TEST = 16, 96, 600  # 112 training images: 96 train, the last 16 validate


@pytest.fixture(scope="module")
def splits():
    return native.load_splits(None, TRAIN + VAL, TEST)[:2]


@pytest.mark.parametrize("engine", ["gpu", "cpu"])
def test_validation_is_held_out_and_evaluations_report_chunks(device, splits, engine):
    """2 epochs of 6 steps (96 training images, batch 16): each epoch validates on the last 16
    training images, the end on the 600 test images in chunks of the engine's eval_chunk; the
    numbers equal a float64 forward of the trained weights on those images; progress is
    reported after step 1, at each epoch's end and nowhere else (report_every 32)."""
    graph, blob = tiny_mlp(3)
    cfg = {"optimizer": "sgd", "lr": 0.05, "batch_size": 16, "epochs": 2, "seed": 2,
           "init": "finetune", "val_images": VAL, "eval_images": TEST, "report_every": 32}
    eng = GpuEngine(device) if engine == "gpu" else CpuEngine()
    events = []
    tr = Trainer(eng, graph, blob, cfg, *splits, emit=lambda kind, **kw: events.append((kind, kw)))
    run(tr.setup())
    assert (tr.train_set.count, tr.val_set.count, tr.per_epoch, tr.total) == (96, 16, 6, 12)
    result = run(tr.run())
    weights = run(tr.trained_weights())

    chunk = eng.eval_chunk
    ends = [min(TEST, k) for k in range(chunk, TEST + chunk, chunk)]
    evals = [(kw["what"], kw["done"], kw["total"]) for kind, kw in events if kind == "evaluating"]
    per_val = [("validation", 0, VAL), ("validation", VAL, VAL)]
    assert evals == per_val * 2 + [("test", 0, TEST)] + [("test", e, TEST) for e in ends]
    assert [kw["step"] for kind, kw in events if kind == "progress"] == [1, 6, 12]

    im = np.frombuffer(splits[0].images, np.uint8).reshape(TRAIN + VAL, 784)
    lab = np.frombuffer(splits[0].labels_host, np.uint8).astype(np.int64)
    want_loss, want_acc, _ = _reference(weights, graph, im[TRAIN:], lab[TRAIN:])
    last_epoch = [kw for kind, kw in events if kind == "epoch"][-1]
    assert rel_err(last_epoch["val_loss"], want_loss) <= FWD_RTOL
    assert last_epoch["val_acc"] == want_acc
    assert (result["val_loss"], result["val_acc"]) == (last_epoch["val_loss"], want_acc)
    assert math.isfinite(last_epoch["train_loss"]) and 0 <= last_epoch["train_acc"] <= 1

    test_im = np.frombuffer(splits[1].images, np.uint8).reshape(-1, 784)[:TEST]
    test_lab = np.frombuffer(splits[1].labels_host, np.uint8)[:TEST].astype(np.int64)
    t_loss, t_acc, t_logp = _reference(weights, graph, test_im, test_lab)
    assert rel_err(result["test_loss"], t_loss) <= FWD_RTOL and result["test_acc"] == t_acc
    got = np.frombuffer(result["logits"], np.float32).reshape(TEST, 10)
    assert rel_err(got, t_logp) <= FWD_RTOL
    assert result["verdict"] in ("ok", "chance") and result["reason"]


def test_progress_every_report_s(device, splits, monkeypatch):
    """With REPORT_S 0 every step is reported (report_every 32 notwithstanding); no step twice."""
    monkeypatch.setattr(train_mod, "REPORT_S", 0.0)
    graph, blob = tiny_mlp(3)
    cfg = {"optimizer": "sgd", "lr": 0.05, "batch_size": 16, "epochs": 1, "seed": 2,
           "init": "finetune", "val_images": 0, "eval_images": 16, "report_every": 32}
    events = []
    tr = Trainer(GpuEngine(device), graph, blob, cfg, *splits,
                 emit=lambda kind, **kw: events.append((kind, kw)))
    run(tr.setup())
    result = run(tr.run())
    progress = [kw for kind, kw in events if kind == "progress"]
    assert [kw["step"] for kw in progress] == list(range(1, 8))  # 112 images, no validation
    assert [row[0] for kw in progress for row in kw["losses"]] == list(range(1, 8))
    assert [kw["val_loss"] for kind, kw in events if kind == "epoch"] == [None]
    assert result["val_loss"] is None and result["val_acc"] is None


def test_exploding_loss_is_diverged_not_finished(splits):
    """SGD at lr 1e3: the loss explodes but stays finite (no TrainingDiverged): the verdict
    says diverged and names the losses."""
    graph, blob = tiny_mlp(3)
    cfg = {"optimizer": "sgd", "lr": 1e3, "batch_size": 16, "epochs": 1, "seed": 2,
           "init": "finetune", "val_images": VAL, "eval_images": 64, "report_every": 1}
    tr = Trainer(CpuEngine(), graph, blob, cfg, *splits)
    run(tr.setup())
    result = run(tr.run())
    assert result["verdict"] == "diverged", result["reason"]
    assert "lower learning rate (now 1000 with sgd, e.g. 0.001, torch's default for SGD)" \
        in result["reason"]


VAL_BIG = 100  # held-out images: more than a validation point's VAL_MIN (64)


def _trained_at(splits, cfg, steps: int) -> bytes:
    """The weights after ``steps`` steps of ``cfg`` (the same run, cut by max_steps)."""
    tr = Trainer(CpuEngine(), *tiny_mlp(3), {**cfg, "max_steps": steps}, *splits)
    run(tr.setup())
    run(tr.run())
    return run(tr.trained_weights())


def test_validation_points_inside_each_epoch():
    """val_points 4 (the page's): 2 epochs of 6 steps validate after steps 1, 3, 4 and 7, 9,
    10 on the first 64 held-out images (a tenth of 96 training images is below VAL_MIN), each
    equal to a float64 forward of the weights after that step; every epoch's end still
    validates on all 100; the default (1, the CLI's) emits no such point."""
    splits = native.load_splits(None, TRAIN + VAL_BIG, 64)[:2]
    cfg = {"optimizer": "sgd", "lr": 0.05, "batch_size": 16, "epochs": 2, "seed": 2,
           "init": "finetune", "val_images": VAL_BIG, "eval_images": 64, "report_every": 32}
    events = []
    tr = Trainer(CpuEngine(), *tiny_mlp(3), cfg, *splits,
                 emit=lambda kind, **kw: events.append((kind, kw)))
    tr.val_points = VAL_POINTS
    run(tr.setup())
    run(tr.run())
    points = [kw for kind, kw in events if kind == "validation"]
    assert [(p["step"], p["epoch"], p["images"]) for p in points] == \
        [(1, 1, 64), (3, 1, 64), (4, 1, 64), (7, 2, 64), (9, 2, 64), (10, 2, 64)]
    evals = [(kw["what"], kw["done"], kw["total"]) for kind, kw in events
             if kind == "evaluating" and kw["what"] == "validation"]
    assert evals == ([("validation", 0, 64), ("validation", 64, 64)] * 3
                     + [("validation", 0, VAL_BIG), ("validation", VAL_BIG, VAL_BIG)]) * 2
    # each point's steps were reported before it (the chart's train side is complete)
    reported = [kw["step"] for kind, kw in events if kind == "progress"]
    assert all(p["step"] in reported for p in points), reported
    im = np.frombuffer(splits[0].images, np.uint8).reshape(-1, 784)[TRAIN:TRAIN + 64]
    lab = np.frombuffer(splits[0].labels_host, np.uint8)[TRAIN:TRAIN + 64].astype(np.int64)
    graph = tiny_mlp(3)[0]
    for p in (points[1], points[5]):
        want_loss, want_acc, _ = _reference(_trained_at(splits, cfg, p["step"]), graph, im, lab)
        assert rel_err(p["val_loss"], want_loss) <= FWD_RTOL, p
        assert p["val_acc"] == want_acc, p
    quiet = []
    tr = Trainer(CpuEngine(), *tiny_mlp(3), cfg, *splits,
                 emit=lambda kind, **kw: quiet.append(kind))
    run(tr.setup())
    run(tr.run())
    assert "validation" not in quiet and quiet.count("epoch") == 2


def test_skip_test_ends_the_test_evaluation_after_its_chunk(splits):
    """skip_test set during the test evaluation: it ends after the chunk in progress; the
    result (accuracy, loss, log-probabilities, n_eval) covers exactly those images."""
    cfg = {"optimizer": "sgd", "lr": 0.05, "batch_size": 16, "epochs": 1, "seed": 2,
           "init": "finetune", "val_images": 0, "eval_images": TEST, "report_every": 32}
    eng = CpuEngine()

    def emit(kind, **kw):
        if kind == "evaluating" and kw["what"] == "test" and kw["done"] == 0:
            tr.skip_test = True  # as the worker's skip_test message, before the first chunk
    tr = Trainer(eng, *tiny_mlp(3), cfg, *splits, emit=emit)
    run(tr.setup())
    result = run(tr.run())
    n = eng.eval_chunk
    assert n < TEST and tr.n_eval == n
    weights = run(tr.trained_weights())
    test_im = np.frombuffer(splits[1].images, np.uint8).reshape(-1, 784)[:n]
    test_lab = np.frombuffer(splits[1].labels_host, np.uint8)[:n].astype(np.int64)
    t_loss, t_acc, t_logp = _reference(weights, tiny_mlp(3)[0], test_im, test_lab)
    assert result["test_acc"] == t_acc and rel_err(result["test_loss"], t_loss) <= FWD_RTOL
    assert rel_err(np.frombuffer(result["logits"], np.float32).reshape(n, 10), t_logp) \
        <= FWD_RTOL


# ---------------------------------------------------------------- the verdict

BASE = dict(test_acc=0.97, classes=10, eval_images=10000, first_loss=2.30, last_loss=0.12,
            steps=900, total_steps=900, stopped=False, lr=1e-3, optimizer="adam")


@pytest.mark.parametrize("changes, want, needles", [
    ({}, "ok", ["test accuracy 97.0% on 10,000 test images (guessing would get 10%)"]),
    # SGD lr 1e6 as a user found it: loss 1.4 M, 2% accuracy
    ({"test_acc": 0.02, "last_loss": 1.4e6, "lr": 1e6, "optimizer": "sgd"}, "diverged",
     ["rose from 2.3 (step 1) to 1.4e+06", "test accuracy 2.0%", "now 1e+06 with sgd",
      "e.g. 0.001, torch's default for SGD) or gradient clipping"]),
    ({"test_acc": 0.112, "last_loss": 2.29, "steps": 20}, "chance",
     ["test accuracy 11.2% on 10,000 test images is no better than guessing (10% for 10 "
      "classes)", "barely fell (2.3 at step 1, 2.29 at the end): train longer or raise the "
      "learning rate (now 0.001 with adam)"]),
    ({"test_acc": 0.15, "last_loss": 2.5}, "chance",
     ["test accuracy 15.0%", "rose (2.3 at step 1, 2.5 at the end): try a lower "
      "learning rate (now 0.001"]),
    ({"test_acc": 0.12, "last_loss": 1.39, "steps": 12}, "chance",
     ["fell (2.3 at step 1, 1.39 at the end) but after 12 steps that does not show on the "
      "test images yet: train longer"]),
    ({"test_acc": 0.105, "last_loss": 2.3, "steps": 1, "lr": 1e-6, "optimizer": "sgd"},
     "chance", ["after 1 step with sgd at learning rate 1e-06 the model has hardly trained"]),
    ({"test_acc": 0.1501}, "ok", []),  # just above 1.5 x chance
    ({"test_acc": 0.3, "classes": 100}, "ok", ["guessing would get 1%"]),
    ({"test_acc": 0.015, "classes": 100}, "chance", ["(1% for 100 classes)"]),
    ({"stopped": True, "steps": 37, "test_acc": 0.11}, "stopped",
     ["stopped at step 37 of 900: test accuracy 11.0%"]),
    ({"stopped": True, "last_loss": 40.0}, "diverged", ["to 40 (the last steps)"]),
    # fine-tuning: 0.05 at step 1, 0.4 later is noise, not divergence (< 10x)
    ({"first_loss": 0.05, "last_loss": 0.4}, "ok", []),
    ({"first_loss": 0.05, "last_loss": 0.51}, "diverged", []),
    ({"first_loss": None, "last_loss": None, "steps": 0, "test_acc": 0.09}, "chance",
     ["after 0 steps with adam"]),
])
def test_verdict_rules(changes, want, needles):
    out = verdict(**{**BASE, **changes})
    assert out["verdict"] == want, out
    for needle in needles:
        assert needle in out["reason"], (needle, out["reason"])


@pytest.mark.parametrize("lr, optimizer, want", [
    # far above torch's default: the default, never a tenth that would diverge too (issue 16)
    (1e6, "adam", "e.g. 0.001, torch's default for Adam"),
    (1e6, "sgd", "e.g. 0.001, torch's default for SGD"),
    (1e6, "adagrad", "e.g. 0.01, torch's default for AdaGrad"),
    (1e6, "rmsprop", "e.g. 0.01, torch's default for RMSprop"),
    (1e6, "adadelta", "e.g. 1, torch's default for Adadelta"),
    (1.0, "adamw", "e.g. 0.001, torch's default for AdamW"),
    (0.01, "adam", "e.g. 0.001, torch's default for Adam"),  # a tenth is the default
    # within 10x of the default (or below it): a tenth
    (0.005, "adam", "e.g. 0.0005"),
    (0.05, "adagrad", "e.g. 0.005"),
    (5.0, "adadelta", "e.g. 0.5"),
    (1e-4, "sgd", "e.g. 1e-05"),
])
def test_lower_lr_advice(lr, optimizer, want):
    assert lower_lr(lr, optimizer) == want
    out = verdict(**{**BASE, "test_acc": 0.02, "last_loss": 1e4, "lr": lr,
                     "optimizer": optimizer})
    assert out["verdict"] == "diverged"
    assert out["reason"].endswith(f"Try a lower learning rate (now {lr:g} with {optimizer}, "
                                  f"{want}) or gradient clipping."), out["reason"]

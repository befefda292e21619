"""The training losses (ops/losses.py, shaders/loss.wgsl, cpu/losses.py).

- the numpy engine's losses against torch.nn.functional (tests/fixtures/losses.json, made by
  scripts/make_loss_fixtures.py; torch is not needed here): loss and d loss / d x in float64;
- one GPU training step with ``Plan.build(loss=spec)`` against the float64 numpy engine
  (``Engine.step(loss=spec)``): loss, accuracy, output, d loss / d output, the gradient of an
  inner activation and every parameter gradient, for every loss x reduction x (class weights,
  label smoothing where they apply), on models with and without a final LogSoftmax (the cases
  of tests/cases/losses.py);
- the validation loss of ``Trainer.evaluate`` (host side) against the numpy engine;
- spec validation (ValueError naming the key).
"""

import json
import pathlib

import numpy as np
import pytest

from cases import ids
from cases import losses as cases
from conftest import f32, make_graph, node, rel_err, rng_for, run
from harness import check_case
from webgpu_trainer.cpu import losses as cpu_losses
from webgpu_trainer.cpu.engine import Engine, params_from_blob
from webgpu_trainer.cpu.softmax import log_softmax
from webgpu_trainer.engine.tools import parity
from webgpu_trainer.engine.ops import losses

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend

FIXTURE = json.loads((pathlib.Path(__file__).parent / "fixtures" / "losses.json").read_text())
TORCH_RTOL = 1e-10  # float64 vs float64 (the fixture keeps 13 significant digits)


# ---- numpy engine vs torch.nn.functional ------------------------------------------------

@pytest.mark.parametrize("case", FIXTURE["cases"], ids=lambda c: c["id"])
def test_numpy_losses_match_torch(case):
    b, c = case["shape"]
    x = np.array(case["x"], np.float64).reshape(b, c)
    spec = losses.resolve(case["spec"], False, c)
    loss, grad, acc = cpu_losses.criterion(spec, x, case["labels"])
    assert rel_err(loss, case["loss"]) <= TORCH_RTOL, f"loss {loss} != torch {case['loss']}"
    assert rel_err(grad, case["grad"]) <= TORCH_RTOL, "gradient"
    assert acc == np.mean(x.argmax(axis=1) == np.array(case["labels"]))


def test_fixture_covers_the_matrix():
    ids = {c["id"] for c in FIXTURE["cases"]}
    kinds = {(c["spec"]["loss"], c["spec"]["reduction"], c["spec"]["weight"] is not None,
              bool(c["spec"].get("label_smoothing"))) for c in FIXTURE["cases"]}
    for kind in ("cross_entropy", "nll"):
        for red in ("mean", "sum"):
            assert (kind, red, True, False) in kinds and (kind, red, False, False) in kinds
    for red in ("mean", "sum"):
        assert ("cross_entropy", red, True, True) in kinds
        assert ("cross_entropy", red, False, True) in kinds
        assert ("mse", red, False, False) in kinds
        assert ("bce_with_logits", red, False, False) in kinds
    shapes = {tuple(c["shape"]) for c in FIXTURE["cases"]}
    assert {b for b, _ in shapes} == {1, 7, 64} and {c for _, c in shapes} == {2, 7, 10, 33}
    assert any(i.endswith("_x30") for i in ids)


def test_float32_engine_keeps_dtype():
    x = f32(rng_for("f32").standard_normal((7, 10)))
    labels = [0, 1, 2, 3, 4, 5, 9]
    for kind in ("cross_entropy", "nll", "mse", "bce_with_logits"):
        spec = losses.resolve({"loss": kind, "weight": [1.0] * 10 if kind == "nll" else None},
                              False, 10)
        loss, grad, _ = cpu_losses.criterion(spec, x, labels)
        assert grad.dtype == np.float32, kind
        want, _, _ = cpu_losses.criterion(spec, x.astype(np.float64), labels)
        assert abs(loss - want) <= 1e-5 * abs(want)


# ---- GPU step vs the float64 numpy engine -----------------------------------------------

@pytest.mark.parametrize("case", cases.CASES, ids=ids(cases.CASES))
def test_case(device, case):
    """Each spec on a raw-logits model at every shape; models ending in LogSoftmax (auto = NLL;
    every loss reads the model's output as is: cross_entropy applies its own log_softmax,
    mse / bce_with_logits take log-probabilities)."""
    check_case(device, case)


def test_default_rule():
    """auto: nll after a final LogSoftmax, nll_log after a final Softmax, else cross_entropy
    (mean); label smoothing after a LogSoftmax -> CE."""
    assert losses.resolve(None, True)["loss"] == "nll"
    assert losses.resolve(None, "LogSoftmax")["loss"] == "nll"
    assert losses.resolve(None, "Softmax")["loss"] == "nll_log"
    assert losses.resolve({"label_smoothing": 0.1}, "Softmax")["loss"] == "nll_log"
    assert losses.resolve("cross_entropy", "Softmax")["loss"] == "cross_entropy"
    assert losses.resolve(None, False) == {"loss": "cross_entropy", "reduction": "mean",
                                           "label_smoothing": 0.0, "weight": None}
    assert losses.resolve("auto", True, 10)["loss"] == "nll"
    assert losses.resolve({"label_smoothing": 0.1}, True)["loss"] == "cross_entropy"
    assert losses.resolve("mse", True)["loss"] == "mse"


def test_loss_value_is_metric_slot(device):
    """The loss goes to metrics slot st.slot (the ring), accuracy next to it."""
    nodes, tensors, x, labels = cases.model(7, 10, False, rng_for("slot"))
    graph, blob = make_graph(nodes, tensors, [("input", ["N", 5])], [("logits", ["N", 10])])
    spec = {"loss": "mse", "reduction": "sum"}

    async def go():
        plan = await parity.load(device, graph, blob, 7, x.tobytes(),
                                 np.asarray(labels, np.uint32).tobytes(), loss=spec)
        parity.run_step(device, plan, 6, prog=parity.program(device, plan, backward=False))
        assert parity.metrics_slot(6) == 5
        return np.frombuffer(await device.read(plan.metrics, 0, 64), np.float32)

    met = run(go())
    params = params_from_blob(graph, blob)
    want = Engine(graph, params, np.float64).step(np.float64(x), labels, train=False, loss=spec)
    assert rel_err(met[10], want["loss"]) <= 1e-5 and met[11] == pytest.approx(want["acc"])
    assert not met[:10].any()


# ---- validation loss (Trainer.evaluate on the host) -----------------------------------

@pytest.mark.parametrize("name", ["ce_mean_weight_ls", "nll_sum_weight", "mse_mean",
                                  "bce_sum"])
def test_host_terms_match_numpy(name):
    """sum(numerators) / sum(denominators) of host_terms = the loss with reduction mean."""
    spec, weighted = cases.SPECS[name]
    rng = rng_for("host", name)
    batch, classes = 7, 10
    weight = cases.class_weights(classes, rng) if weighted else None
    spec = losses.resolve({**spec, "weight": weight}, False, classes)
    x = rng.standard_normal((batch, classes)) * 3
    labels = rng.integers(0, classes, batch)
    rows = log_softmax(x, axis=1) if spec["loss"] == "cross_entropy" else x
    terms = [losses.host_terms(spec, list(r), int(y)) for r, y in zip(rows, labels)]
    got = sum(a for a, _ in terms) / sum(d for _, d in terms)
    want, _, _ = cpu_losses.criterion({**spec, "reduction": "mean"}, x, labels)
    assert rel_err(got, want) <= 1e-12


@pytest.mark.parametrize("loss", [{"loss": "mse"},
                                  {"loss": "cross_entropy", "label_smoothing": 0.1,
                                   "weight": [0.5, 1.0, 1.5, 2.0, 0.5, 1.0, 1.5, 2.0, 0.5, 1.0]},
                                  "nll", {"loss": "bce_with_logits", "reduction": "sum"},
                                  "auto+LogSoftmax"])
def test_trainer_validation_loss(device, loss):
    """Trainer with config["loss"]: its test_loss (the loss's mean form over the eval images)
    and the log-probabilities it returns equal the numpy engine's on the trained weights."""
    log_softmax_end = loss == "auto+LogSoftmax"
    if log_softmax_end:
        loss = "auto"
    from webgpu_trainer.engine.train.data import MNIST_MEAN, MNIST_STD, Split
    from webgpu_trainer.engine.train.gpu_engine import GpuEngine
    from webgpu_trainer.engine.train.loop import Trainer
    rng = rng_for("trainer", repr(loss))
    count, pixels, classes = 12, 784, 10
    images = rng.integers(0, 256, (count, pixels)).astype(np.uint8)
    labels = rng.integers(0, classes, count).astype(np.uint8)
    w = f32(rng.standard_normal((classes, pixels)) * 0.02)
    b = f32(rng.standard_normal(classes) * 0.1)
    nodes = [node("Gemm", ["input", "fc.w", "fc.b"], ["logits"], transB=1)]
    if log_softmax_end:
        nodes.append(node("LogSoftmax", ["logits"], ["output"], axis=1))
    graph, blob = make_graph(nodes, [("fc.w", w, "param"), ("fc.b", b, "param")],
                             [("input", ["N", pixels])],
                             [(nodes[-1]["outputs"][0], ["N", classes])])
    split = Split(images.tobytes(), labels.tobytes(), count, labels.tobytes())
    cfg = {"optimizer": "sgd", "lr": 0.05, "batch_size": 4, "epochs": 1, "init": "finetune",
           "eval_images": 7, "val_images": 0, "report_every": 1, "loss": loss}
    trainer = Trainer(GpuEngine(device), graph, blob, cfg, split, split)

    async def go():
        await trainer.setup()
        result = await trainer.run()
        return result, await trainer.trained_weights()

    result, weights = run(go())
    params = params_from_blob(graph, weights)
    x = (images[:7].astype(np.float64) / 255 - MNIST_MEAN) / MNIST_STD
    spec = {**losses.normalize(loss), "reduction": "mean"}
    want = Engine(graph, params, np.float64).step(x, labels[:7], train=False, loss=spec)
    assert rel_err(result["test_loss"], want["loss"]) <= 1e-5
    assert result["test_acc"] == pytest.approx(want["acc"])
    logp = np.frombuffer(result["logits"], np.float32).reshape(7, classes)
    assert rel_err(logp, want["logp"]) <= 1e-5


# ---- spec validation ---------------------------------------------------------------------

@pytest.mark.parametrize("spec,match", [
    ({"loss": "hinge"}, r"loss\.loss: must be one of auto, .*, got 'hinge'"),
    ({"loss": "mse", "reduction": "none"},
     r"loss\.reduction: must be one of mean, sum, got 'none'"),
    ({"loss": "cross_entropy", "smoothing": 0.1}, r"loss: unknown key 'smoothing'"),
    ({"loss": "cross_entropy", "label_smoothing": 1.5},
     r"loss\.label_smoothing: must be a number in \[0, 1\], got 1\.5"),
    ({"loss": "nll", "label_smoothing": 0.1},
     r"loss\.label_smoothing: applies to loss auto, cross_entropy, nll_log only, not loss nll"),
    ({"loss": "mse", "weight": [1.0] * 10}, r"loss\.weight: .*not loss mse"),
    ({"loss": "cross_entropy", "weight": [1.0] * 9},
     r"loss\.weight: must be 10 numbers, each >= 0 \(one per class of the model\), got 9"),
    ({"loss": "nll", "weight": "ones"}, r"loss\.weight: must be a list of numbers.*'ones'"),
    (3, r"loss: expected a loss name"),
])
def test_bad_spec(spec, match):
    with pytest.raises(ValueError, match=match):
        losses.normalize(spec, 10)


def test_trainer_rejects_bad_loss_before_gpu_work():
    from webgpu_trainer.engine.train.data import Split
    from webgpu_trainer.engine.train.gpu_engine import GpuEngine
    from webgpu_trainer.engine.train.loop import Trainer
    graph, blob = make_graph([node("Gemm", ["input", "fc.w"], ["logits"], transB=1)],
                             [("fc.w", np.zeros((10, 784), np.float32), "param")],
                             [("input", ["N", 784])], [("logits", ["N", 10])])
    split = Split(bytes(784 * 8), bytes(8), 8, bytes(8))
    trainer = Trainer(GpuEngine(None), graph, blob, {"batch_size": 4, "loss": {"loss": "l1"}},
                      split, split)
    with pytest.raises(ValueError, match=r"loss: must be one of auto, .*, got 'l1'"):
        run(trainer.setup())

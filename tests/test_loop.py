"""One training loop over two engines (issue 8): ``train.Trainer`` on the GPU engine (native
wgpu-py here) and on the numpy engine.

- The generator: cpu/philox.py against Random123's known-answer vectors (shaders/lib/philox.wgsl is
  checked against it through the engines' bits below).
- Init: ``engine/init.py``'s rules give torch's default bounds and fill values
  (tests/fixtures/init.json, made with torch by scripts/make_init_fixture.py); the same seed
  gives byte-identical initial weights on the GPU and the CPU, for SeedNet (Conv, Gemm,
  BatchNorm) and a MatMul + Add + LayerNormalization model (nn.Linear as the dynamo exporter
  writes it), and the values fill their bounds (tests/test_parity.py adds the browser).
- Dropout: the GPU's mask of a step is the numpy engine's.
- Stop between two progress reports: the steps done are reported, on both engines.
- A GPU run's checkpoint resumes on the CPU (``--resume --device cpu``) and continues as a
  CPU-only run of the same seed and as the GPU run itself do, within float32 tolerance.
"""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import f32, head, make_graph, node, rel_err, rng_for, run, tiny_mlp
from harness import one_step, op_types

from webgpu_trainer import onnx_io
from webgpu_trainer.cli import checkpoints
from webgpu_trainer.cli import commands as native
from webgpu_trainer.cpu import philox
from webgpu_trainer.cpu.cpu_engine import CpuEngine
from webgpu_trainer.engine import init
from webgpu_trainer.engine.train.gpu_engine import GpuEngine
from webgpu_trainer.engine.graph import Graph
from webgpu_trainer.engine.train.loop import Trainer

REPO = Path(__file__).resolve().parents[1]
TORCH_INIT = json.loads((REPO / "tests" / "fixtures" / "init.json").read_text())["models"]


# ---------------------------------------------------------------- the generator

@pytest.mark.parametrize("ctr,key,want", [
    ((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
    ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
    ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
     (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)),
])
def test_philox_known_answers(ctr, key, want):
    """Random123's tests/kat_vectors, the three "philox4x32 10" lines."""
    assert tuple(int(w) for w in philox.philox4x32(*ctr, *key)) == want


# ---------------------------------------------------------------- init

def _linear_layernorm():
    """torch's Linear(784, 48) -> LayerNorm(48) -> ReLU -> Linear(48, 10) as the dynamo exporter
    writes it: MatMul(x, W^T) + Add(bias), W^T [in, out]; values far from any init."""
    rng = rng_for("linear_layernorm")
    nodes = [node("MatMul", ["input", "fc1.weight"], ["m1"]),
             node("Add", ["m1", "fc1.bias"], ["a1"]),
             node("LayerNormalization", ["a1", "ln.weight", "ln.bias"], ["n1"], axis=-1),
             node("Relu", ["n1"], ["r1"]), node("MatMul", ["r1", "fc2.weight"], ["m2"]),
             node("Add", ["m2", "fc2.bias"], ["output"])]
    tensors = [(name, f32(3 + rng.random(shape)), "param") for name, shape in (
        ("fc1.weight", (784, 48)), ("fc1.bias", (48,)), ("ln.weight", (48,)), ("ln.bias", (48,)),
        ("fc2.weight", (48, 10)), ("fc2.bias", (10,)))]
    return make_graph(nodes, tensors, [("input", ["N", 784])], [("output", ["N", 10])])


def _grouped_conv():
    rng = rng_for("grouped_conv")
    nodes = [node("Conv", ["input", "conv.weight", "conv.bias"], ["c"], group=2,
                  kernel_shape=[3, 3]), node("Flatten", ["c"], ["f"], axis=1)]
    hn, ht = head("f", 8 * 26 * 26, 10, rng)
    tensors = [("conv.weight", f32(rng.random((8, 2, 3, 3))), "param"),
               ("conv.bias", f32(rng.random(8)), "param")] + ht
    graph, blob = make_graph(nodes + hn, tensors, [("input", ["N", 4, 28, 28])],
                             [("output", ["N", 10])])
    return graph, blob


MODELS = {"seednet": lambda: onnx_io.load_bundle(REPO / "models" / "seednet.onnx"),
          "linear_layernorm": _linear_layernorm, "grouped_conv": _grouped_conv}


@pytest.mark.parametrize("model", list(TORCH_INIT))
def test_init_rules_are_torch_defaults(model):
    """Every tensor torch's reset_parameters initialises gets a rule with torch's bound (the
    same float32) or fill value, and nothing else does (grouped_conv's head is a Gemm named
    fc.w / fc.b, checked against its own fan_in)."""
    graph, _ = MODELS[model]()
    rules = {r.name: r for r in init.rules(Graph(graph))}
    want = TORCH_INIT[model]
    extra = {"fc.w": 8 * 26 * 26, "fc.b": 8 * 26 * 26} if model == "grouped_conv" else {}
    assert set(rules) == set(want) | set(extra)
    for name, spec in want.items():
        r = rules[name]
        assert r.kind == spec["kind"], name
        if r.kind == "uniform":
            assert rel_err(r.bound, spec["bound"]) <= 1e-12, (name, r.bound, spec["bound"])
            assert np.float32(r.bound) == np.float32(spec["bound"]), name
        else:
            assert r.value == spec["value"], name
    for name, fan_in in extra.items():
        assert rules[name].bound == 1 / math.sqrt(fan_in)


async def _initial_weights(engine, graph, blob, seed):
    g = Graph(graph)
    await engine.build(g, 4, None, None, seed)
    engine.write_weights(blob + bytes(engine.wbytes - len(blob)))
    await engine.init_weights(seed)
    return await engine.read_weights(g.weight_nbytes())


@pytest.mark.parametrize("model", ["seednet", "linear_layernorm"])
def test_same_seed_same_init_on_gpu_and_cpu(device, model):
    """init_weights(seed) on the native GPU (shaders/init.wgsl) and on numpy (cpu/philox.py):
    the same bytes; another seed, other values; uniform tensors fill [-bound, bound)."""
    graph, blob = MODELS[model]()
    gpu = run(_initial_weights(GpuEngine(device), graph, blob, 12345))
    cpu = run(_initial_weights(CpuEngine(), graph, blob, 12345))
    assert len(gpu) == len(blob) and gpu == cpu
    other = run(_initial_weights(CpuEngine(), graph, blob, 12346))
    rules = {r.name: r for r in init.rules(Graph(graph))}
    for t in graph["tensors"]:
        a = np.frombuffer(cpu, "<f4", t["nbytes"] // 4, t["offset"])
        b = np.frombuffer(other, "<f4", t["nbytes"] // 4, t["offset"])
        r = rules[t["name"]]
        if r.kind == "fill":
            assert np.all(a == r.value) and np.all(b == r.value), t["name"]
            continue
        bound = np.float32(r.bound)
        assert not np.array_equal(a, b), t["name"]
        assert a.min() >= -bound and a.max() < bound, t["name"]
        if a.size >= 1000:  # the values fill the interval, uniformly
            assert np.abs(a).max() > 0.99 * bound, t["name"]
            assert abs(a.mean()) < 4 * bound / math.sqrt(3 * a.size), t["name"]
            assert abs(a.std() / (bound / math.sqrt(3)) - 1) < 0.05, t["name"]


@pytest.mark.parametrize("gelu", [False, True])
def test_gpu_dropout_mask_is_numpy_mask(device, gelu):
    """A training step's dropout mask on the GPU (shaders/dropout.wgsl) is cpu/philox.py's for
    that (seed, step, node), including a tail that is not a multiple of four. ``gelu``: the
    erf GELU's five ops before the Dropout, which the plan folds into one node
    (engine/rewrites/gelu.py): the salt is still the Dropout's index in the model as given."""
    rng = rng_for("dropout-mask")
    batch, hidden, ratio = 3, 511, 0.3
    nodes = [node("Gemm", ["input", "pre.w", "pre.b"], ["h"], transB=1)]
    consts = {}
    if gelu:
        nodes += [node("Div", ["h", "sqrt2"], ["g1"]), node("Erf", ["g1"], ["g2"]),
                  node("Add", ["g2", "one"], ["g3"]), node("Mul", ["h", "g3"], ["g4"]),
                  node("Mul", ["g4", "half"], ["g"])]
        consts = {k: {"dtype": "float32", "shape": [], "values": [v]}
                  for k, v in (("sqrt2", 2 ** 0.5), ("one", 1.0), ("half", 0.5))}
    nodes.append(node("Dropout", ["g" if gelu else "h"], ["d"], ratio=ratio))
    hn, ht = head("d", hidden, 4, rng)
    tensors = [("pre.w", f32(rng.standard_normal((hidden, 6))), "param"),
               ("pre.b", f32(5 + rng.random(hidden)), "param")] + ht
    graph, blob = make_graph(nodes + hn, tensors, [("input", ["N", 6])], [("output", ["N", 4])],
                             constants=consts)
    x = f32(rng.random((batch, 6)))
    res = run(one_step(device, graph, blob, x, rng.integers(0, 4, batch), step=9, seed=77))
    assert ("Gelu" in op_types(res["plan"].graph)) == gelu
    assert np.all(res["acts"]["g" if gelu else "h"] != 0)
    keep = philox.dropout_keep(77, 9, 7 if gelu else 2, (batch, hidden), ratio)
    assert np.array_equal(res["acts"]["d"] != 0, keep)
    assert 0.2 < 1 - keep.mean() < 0.4


# ---------------------------------------------------------------- Stop between two reports

@pytest.fixture(scope="module")
def splits():
    return native.load_splits(None, 96 + 16, 40)[:2]  # 96 train, 16 validate




def _reporting_trainer(device, splits, engine, report_every):
    """``(trainer, engine, events)``: the tiny MLP set up for 2 epochs of 6 steps (batch 16)
    with reports every ``report_every`` steps, its emitted events collected."""
    graph, blob = tiny_mlp(0)
    cfg = {"optimizer": "adam", "lr": 1e-3, "batch_size": 16, "epochs": 2, "seed": 4,
           "init": "scratch", "eval_images": 40, "val_images": 16,
           "report_every": report_every}
    eng = GpuEngine(device) if engine == "gpu" else CpuEngine()
    events = []
    tr = Trainer(eng, graph, blob, cfg, *splits, emit=lambda kind, **kw: events.append((kind, kw)))
    run(tr.setup())
    return tr, eng, events


@pytest.mark.parametrize("engine", ["gpu", "cpu"])
def test_stop_between_reports_is_reported(device, splits, engine):
    """Stop after step 3 of an epoch of 6 with reports every 5 steps: progress reports steps
    1..3 (no more, none missing), the result says stopped at step 3, no epoch is validated."""
    tr, eng, events = _reporting_trainer(device, splits, engine, 5)
    step = eng.step

    async def step_then_stop(t, offset, lr):
        halt = await step(t, offset, lr)
        if t == 3:
            tr.stop_requested = True
        return halt
    eng.step = step_then_stop
    result = run(tr.run())
    progress = [kw for kind, kw in events if kind == "progress"]
    assert [row[0] for kw in progress for row in kw["losses"]] == [1, 2, 3]
    assert progress[-1]["step"] == 3 and progress[-1]["total_steps"] == 12
    assert all(math.isfinite(row[1]) for kw in progress for row in kw["losses"])
    assert not [kind for kind, _ in events if kind == "epoch"]
    assert (result["stopped"], result["steps"], result["epochs_done"]) == (True, 3, 0.5)  # 3 of 6


@pytest.mark.parametrize("engine", ["gpu", "cpu"])
def test_reports_count_from_the_last_report(device, splits, engine, monkeypatch):
    """Reports every 4 steps over two epochs of 6 (12 steps): the first step, then 4 steps
    after the last report, each epoch's end and the last step: 1, 5, 6 (epoch end), 10, 12.
    Counting from step 0 instead (t % 4) reports step 8, two steps after the epoch-end report
    at 6 (one readback more an epoch). Every step is reported once, in order."""
    from webgpu_trainer.engine.train import loop
    monkeypatch.setattr(loop, "REPORT_S", 1e9)  # the cadence alone, not a slow machine's clock
    tr, _, events = _reporting_trainer(device, splits, engine, 4)
    run(tr.run())
    progress = [kw for kind, kw in events if kind == "progress"]
    assert [kw["step"] for kw in progress] == [1, 5, 6, 10, 12]
    assert [row[0] for kw in progress for row in kw["losses"]] == list(range(1, 13))


# ---------------------------------------------------------------- GPU checkpoint -> CPU

EXE = [sys.executable, "-m", "webgpu_trainer.cli.main"]
SMALL = ["--train-images", "128", "--val-images", "64", "--batch-size", "32", "--eval-images",
         "64", "--optimizer", "sgd", "--lr", "0.02", "--momentum", "0.9", "--seed", "21",
         "--no-progress"]
RESUME_RTOL = 1e-4
CPU_RUN_RTOL = 2e-3  # weights of a whole CPU-only run vs the resumed one (see the test)


def cli(*args):
    proc = subprocess.run(EXE + [str(a) for a in args], capture_output=True, text=True,
                          timeout=600, cwd=REPO)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_gpu_checkpoint_resumes_on_cpu(device, tmp_path):
    """SeedNet (dropout, BatchNorm) from scratch, SGD with momentum, 2 epochs of 4 steps. The
    GPU run's epoch-1 checkpoint resumed with ``--device cpu`` ends epoch 2 where a CPU-only run
    of the same seed and the GPU run itself end: train and validation loss and the weights
    within RESUME_RTOL (the engines share the init, the data order and the dropout masks; only
    float32 rounding differs, which training amplifies: with Adam, whose update is about lr *
    sign(g) where gradients are tiny, the difference reaches 1e-3 within a dozen steps)."""
    model = REPO / "models" / "seednet.onnx"
    gpu, resumed, cpu = tmp_path / "gpu", tmp_path / "resumed", tmp_path / "cpu"
    cli("train", model, *SMALL, "--epochs", "1", "--out", gpu)
    shutil.copytree(gpu, resumed)
    out = cli("train", "--resume", resumed, "--epochs", "2", "--device", "cpu", "--no-progress")
    assert "resuming" in out.stderr
    cli("train", "--resume", gpu, "--epochs", "2", "--no-progress")
    cli("train", model, *SMALL, "--epochs", "2", "--device", "cpu", "--out", cpu)

    def last(run_dir):
        text = (run_dir / "metrics.jsonl").read_text()
        rows = [json.loads(line) for line in text.splitlines()]
        _, sections = checkpoints.read_checkpoint(run_dir / "checkpoints" / "epoch-002.ckpt")
        return rows, np.frombuffer(sections["weights"], np.float32)

    (rr, rw), (gr, gw), (cr, cw) = last(resumed), last(gpu), last(cpu)
    doc = json.loads((resumed / "config.json").read_text())
    assert doc["config"]["device"] == "cpu" and doc["resumes"][0]["device"] == "cpu"
    assert rr[0] == gr[0]  # epoch 1 is the GPU's
    # The CPU-only run's weights differ by up to CPU_RUN_RTOL (see below), and so may its
    # validation loss (2e-4 on the 64 held-out training images); its training loss, averaged
    # over the epoch's steps, stays within RESUME_RTOL.
    for name, other, val_rtol in (("gpu", gr, RESUME_RTOL), ("cpu", cr, CPU_RUN_RTOL)):
        assert [r["step"] for r in rr] == [r["step"] for r in other] == [4, 8]
        for key, rtol in (("train_loss", RESUME_RTOL), ("valid_loss", val_rtol)):
            err = rel_err(rr[1][key], other[1][key])
            print(f"epoch 2 {key} vs {name}: {err:.1e}")
            assert err <= rtol, (name, key, rr[1], other[1])
        assert abs(rr[1]["valid_acc"] - other[1]["valid_acc"]) <= 1 / 64
    errs = {"weights vs gpu": rel_err(rw, gw), "weights vs cpu": rel_err(rw, cw),
            "epoch 1 cpu vs gpu": rel_err(cr[0]["train_loss"], gr[0]["train_loss"]),
            "epoch 2 vs gpu": rel_err(rr[1]["train_loss"], gr[1]["train_loss"]),
            "epoch 2 vs cpu": rel_err(rr[1]["train_loss"], cr[1]["train_loss"])}
    print(" ".join(f"{k}: {v:.1e}" for k, v in errs.items()))
    # The CPU-only run's own epoch 1 differs from the GPU's by float32 rounding in another order
    # (the numpy convolution sums through BLAS: ~5e-7 per op), which 8 steps of training amplify
    # to a few 1e-4 in the weights; the resumed run starts from the GPU's weights exactly.
    assert errs.pop("weights vs cpu") <= CPU_RUN_RTOL, errs
    assert max(errs.values()) <= RESUME_RTOL, errs

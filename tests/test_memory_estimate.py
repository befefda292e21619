"""The GPU memory estimate and the limits checked before any work (engine/train/memory.py):
the counting device's total against the native plan's own allocations, a refusal naming the
tensor and both numbers, and the largest batch that fits."""

import re

import numpy as np
import pytest

from conftest import make_graph, node, run, tiny_mlp

from webgpu_trainer.cli import commands as native
from webgpu_trainer.engine.graph import Graph
from webgpu_trainer.engine.plan import Plan
from webgpu_trainer.engine.train import memory, optim
from webgpu_trainer.engine.train.gpu_engine import GpuEngine
from webgpu_trainer.engine.train.guard import Guard
from webgpu_trainer.engine.train.loop import Trainer


def _mlp(hidden=32):
    """Gemm(8 -> hidden) -> Relu -> Gemm(hidden -> 3), a bundle graph."""
    rng = np.random.default_rng(0)
    nodes = [node("Gemm", ["x", "w1", "b1"], ["h"], transB=1), node("Relu", ["h"], ["r"]),
             node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)]
    tensors = [("w1", rng.standard_normal((hidden, 8)), "param"),
               ("b1", np.zeros(hidden), "param"),
               ("w2", rng.standard_normal((3, hidden)), "param"), ("b2", np.zeros(3), "param")]
    return make_graph(nodes, tensors, [("x", ["N", 8])], [("y", ["N", 3])])[0]


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_estimate_is_the_native_plans_allocated_bytes(device, opt):
    desc = _mlp()
    est = memory.estimate(desc, 16, optimizer=opt, momentum=0.9, is_cpu=device.is_cpu)
    before = device.allocated
    plan = run(Plan.build(device, Graph(desc), 16))
    guard = run(Guard.build(plan))
    run(optim.make(opt, 0.01, momentum=0.9).attach(plan, guard))
    assert est["bytes"] == device.allocated - before
    assert sum(est["parts"].values()) == est["bytes"]
    # params: the flat weight blob (4 * (32*8 + 32 + 3*32 + 3) floats, 256-aligned tensors)
    # as whole vec4s (adam_vec4.wgsl)
    assert est["parts"]["params"] == -(-plan.wbytes // 16) * 16 > plan.wbytes
    assert est["parts"]["gradients"] >= plan.wbytes  # the flat gradient buffer and more
    states = 2 if opt == "adam" else 1
    assert est["parts"]["optimizer"] >= states * plan.wbytes // 4 * 4


def test_estimate_grows_with_the_batch():
    desc = _mlp()
    a, b = memory.estimate(desc, 10), memory.estimate(desc, 20)
    assert a["parts"]["params"] == b["parts"]["params"]
    # h (batch x 32) float32 and its gradient at least: 10 more rows of 32 floats, twice
    assert b["parts"]["activations"] - a["parts"]["activations"] >= 10 * 32 * 4
    assert b["bytes"] > a["bytes"]


def test_a_tiny_binding_limit_refuses_naming_the_tensor_and_both_numbers():
    desc = _mlp(hidden=64)
    est = memory.estimate(desc, 100)
    big = est["largest"]
    assert big["bytes"] == max(size for _, size in est["buffers"])
    limits = {"max_storage_buffer_binding_size": 1000, "max_buffer_size": 1 << 30}
    with pytest.raises(memory.LimitError) as err:
        memory.check(est, limits)
    assert str(err.value) == (
        f"the model does not fit this GPU: tensor {big['name']!r} needs {big['bytes']:,} bytes "
        f"at batch 100, more than the adapter's maxStorageBufferBindingSize of 1,000 bytes")
    memory.check(est, {"max_storage_buffer_binding_size": big["bytes"]})  # exactly fits


def test_a_budget_refuses_naming_the_total_and_the_budget():
    est = memory.estimate(_mlp(), 8)
    with pytest.raises(memory.LimitError, match=f"needs {est['bytes']:,} bytes of GPU memory "
                       f"at batch 8, more than the budget of {est['bytes'] - 1:,} bytes"):
        memory.check(est, None, budget=est["bytes"] - 1)
    memory.check(est, None, budget=est["bytes"])


@pytest.mark.parametrize("limit_batch", [2, 37, 300])
def test_largest_batch_fits_and_one_more_does_not(limit_batch):
    desc = _mlp()
    budget = memory.estimate(desc, limit_batch)["bytes"]
    got = memory.largest_batch(desc, None, budget)
    assert memory.estimate(desc, got)["bytes"] <= budget
    assert memory.estimate(desc, got + 1)["bytes"] > budget
    assert got >= limit_batch


def test_largest_batch_is_zero_when_nothing_fits():
    assert memory.largest_batch(_mlp(), {"max_buffer_size": 16}) == 0


def test_largest_batch_is_zero_when_only_batch_1_fits():
    """Batch 1 is outside the run settings' batch_size range (the schema's minimum, 2): a
    budget that holds only batch 1 has no batch to offer."""
    from webgpu_trainer.engine.config import BY_NAME
    desc = _mlp()
    assert memory.MIN_BATCH == BY_NAME["batch_size"].min == 2
    budget = memory.estimate(desc, 1)["bytes"]
    assert memory.estimate(desc, 2)["bytes"] > budget
    assert memory.largest_batch(desc, None, budget) == 0


class _TinyLimits:
    """The native device with a 1,000-byte maxStorageBufferBindingSize (everything else its)."""

    limits = {"max_storage_buffer_binding_size": 1000, "max_buffer_size": 1 << 30}

    def __init__(self, dev):
        self._dev = dev

    def __getattr__(self, name):
        return getattr(self._dev, name)


def test_the_trainer_refuses_before_any_gpu_work(device):
    graph, blob = tiny_mlp(1)
    splits = native.load_splits(None, 64, 16)[:2]
    cfg = {"optimizer": "sgd", "lr": 0.1, "batch_size": 16, "epochs": 1, "seed": 3,
           "init": "scratch", "eval_images": 16, "val_images": 0}
    events = []
    tr = Trainer(GpuEngine(_TinyLimits(device)), graph, blob, cfg, *splits,
                 emit=lambda kind, **kw: events.append(kind))
    est = memory.estimate(graph, 16)
    big = est["largest"]
    assert big["bytes"] > 1000
    before = device.allocated
    with pytest.raises(memory.LimitError, match=(
            f"tensor '{big['name']}' needs {big['bytes']:,} bytes at batch 16, more than the "
            "adapter's maxStorageBufferBindingSize of 1,000 bytes")):
        run(tr.setup())
    assert device.allocated == before  # not one buffer made
    assert "setup" not in events and "status" not in events


def test_cli_summary_prints_the_estimate_and_the_largest_batch():
    from test_cli import MODEL, cli

    from webgpu_trainer import onnx_io
    graph, _ = onnx_io.load_bundle(MODEL)
    at64 = memory.estimate(graph, 64)
    out = cli("summary", MODEL, "--batch", "64", "--memory-budget", "64").stdout
    assert f"GPU memory at batch 64: {at64['bytes'] / 2 ** 20:.2f} MiB (params " in out
    best = int(re.search(r"Largest batch that fits: (\d+)", out)[1])
    assert memory.estimate(graph, best)["bytes"] <= 64 * 2 ** 20
    assert memory.estimate(graph, best + 1)["bytes"] > 64 * 2 ** 20
    # a budget below batch 64's need: refused, naming both numbers, exit 2
    proc = cli("summary", MODEL, "--batch", "64", "--memory-budget", "1", check=False)
    assert proc.returncode == 2
    assert (f"needs {at64['bytes']:,} bytes of GPU memory at batch 64, more than the budget "
            f"of {2 ** 20:,} bytes") in proc.stderr
    assert "Largest batch that fits: 0" in proc.stdout


@pytest.mark.parametrize("opt", [{"optimizer": "sgd", "momentum": 0.9},
                                 {"optimizer": "adam", "optimizer_args": {"amsgrad": True}}])
def test_the_trainers_estimate_is_what_its_engine_builds(device, opt):
    graph, blob = tiny_mlp(1)
    splits = native.load_splits(None, 64, 16)[:2]
    cfg = {"lr": 0.01, "batch_size": 16, "epochs": 1, "seed": 3, "init": "scratch",
           "eval_images": 16, "val_images": 0, **opt}
    events, eng = [], GpuEngine(device)
    built = []

    async def load_data(*args):  # the bytes of build + init + attach, before the data
        built.append(eng.memory_bytes)

    eng.load_data = load_data
    tr = Trainer(eng, graph, blob, cfg, *splits, emit=lambda kind, **kw: events.append(kw))
    run(tr.setup())
    assert built == [tr.memory["bytes"]]


def test_the_trainer_says_a_batch_is_too_large_for_32_bit_offsets(device, tmp_path):
    """Was ParamsError "shader 'conv2d': field ... (u32) cannot hold ..." at Start: a batch
    whose tensor holds 2 ** 32 values or more is now the estimate's LimitError, naming the
    batch, the tensor and its bytes, before any GPU work; the same model at a batch below the
    boundary is counted. A 1x1 conv to 4,096 channels on MNIST: 4,096 * 784 = 3,211,264
    values a sample, so batch 1,338 is the first past 4,294,967,295 (1,337: 4,293,459,968)."""
    from webgpu_trainer import onnx_io
    from webgpu_trainer.onnx_io.build import build_model
    layers = [{"op": "conv", "out_channels": 4096, "kernel_size": 1}, {"op": "global_avgpool"},
              {"op": "flatten"}, {"op": "linear", "out_features": "classes"}]
    (tmp_path / "wide.onnx").write_bytes(build_model(layers, [1, 28, 28], 10)[0])
    graph, blob = onnx_io.load_bundle(tmp_path / "wide.onnx")
    per = 4096 * 784
    assert memory.estimate(graph, 1337)["largest"]["bytes"] == 4 * per * 1337
    splits = native.load_splits(None, 1338, 16)[:2]
    cfg = {"optimizer": "sgd", "lr": 0.1, "batch_size": 1338, "epochs": 1, "seed": 3,
           "init": "scratch", "eval_images": 16, "val_images": 0}
    events = []
    tr = Trainer(GpuEngine(device), graph, blob, cfg, *splits,
                 emit=lambda kind, **kw: events.append(kind))
    before = device.allocated
    with pytest.raises(memory.LimitError) as err:
        run(tr.setup())
    assert str(err.value) == (
        f"the model does not fit this GPU: batch 1,338 is too large for 32-bit buffer offsets: "
        f"tensor 'd/layers.0/output_1' needs {4 * per * 1338:,} bytes and a kernel "
        f"over it counts {per * 1338:,} values, more than the 4,294,967,295 a 32-bit offset "
        "holds; use a smaller batch")
    # the conv output's gradient (the first kernel past the boundary is the backward's)
    assert err.value.largest == {"name": "d/layers.0/output_1", "bytes": 4 * per * 1338}
    assert "shader" not in str(err.value) and "u32" not in str(err.value)
    assert device.allocated == before  # not one buffer made
    assert "setup" not in events

"""Gradient buffers shared by tensors live at different times (engine/pool.py): the packing
never gives one buffer to two overlapping live ranges, a training step computes the same bits
as with a buffer per gradient on every zoo model, a gradient read before anything writes it
keeps a zeroed buffer of its own, and the memory estimate drops by what sharing saves."""

import pathlib
import sys

import numpy as np
import pytest

from cases import FAMILIES, by_id
from cases import family as family_of
from conftest import rng_for, run
from harness import _input_bytes, builder_patch
from webgpu_trainer import onnx_io
from webgpu_trainer.engine import pool
from webgpu_trainer.engine.backends.base import ALIGN
from webgpu_trainer.engine.tools import parity
from webgpu_trainer.engine.train import memory

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import make_zoo  # noqa: E402

MODELS = {"seednet": ROOT / "models" / "seednet.onnx",
          **{m: ROOT / "tests" / "fixtures" / "zoo" / f"{m}-ts.onnx" for m in make_zoo.ZOO}}


def _ranges(rng, n):
    out = {}
    for k in range(n):
        first = int(rng.integers(0, 40))
        out[pool.Slot(int(rng.integers(1, 5000)), f"s{k}")] = \
            (first, first + int(rng.integers(0, 12)))
    return out


@pytest.mark.parametrize("offsets", [True, False])
@pytest.mark.parametrize("seed", range(20))
def test_overlapping_live_ranges_never_share_bytes(seed, offsets):
    """Slots live at once lie in different buffers or in disjoint byte ranges of one, at
    ALIGN-ed offsets inside it (``offsets`` False: never in one buffer); slots a dispatch binds
    together (``apart``) never share a buffer; no buffer is larger than the largest slot."""
    rng = np.random.default_rng(seed)
    ranges = _ranges(rng, 60)
    slots = list(ranges)
    apart = frozenset(frozenset((slots[i], slots[j])) for i, j in
                      rng.integers(0, len(slots), (40, 2)) if i != j)
    groups, place = pool.assign(ranges, apart, offsets)
    assert set(place) == set(ranges)
    for a in ranges:
        g, at = place[a]
        assert at % ALIGN == 0 and at + a.size <= groups[g]
        for b in ranges:
            if a is b or place[b][0] != g:
                continue
            assert frozenset((a, b)) not in apart, (a.label, b.label)
            (fa, la), (fb, lb) = ranges[a], ranges[b]
            if not (la < fb or lb < fa):
                assert offsets, (a.label, b.label)
                bt = place[b][1]
                assert at + a.size <= bt or bt + b.size <= at, (a.label, b.label)
    # never more than one buffer per slot, never less than the peak of live bytes
    assert pool.peak_bytes(ranges) <= sum(groups) <= sum(s.size for s in ranges)
    assert max(groups) == max(s.size for s in ranges)


def test_smaller_slots_live_at_once_share_a_larger_buffer():
    """Two slots live together beside a larger one that is dead then fit into its buffer at
    different offsets; bound together by one dispatch, the second gets a buffer of its own."""
    big, a, b = pool.Slot(4096, "big"), pool.Slot(1000, "a"), pool.Slot(1500, "b")
    ranges = {big: (0, 2), a: (3, 6), b: (4, 8)}
    groups, place = pool.assign(ranges)
    assert groups == [4096] and place == {big: (0, 0), b: (0, 0), a: (0, 1536)}
    groups, place = pool.assign(ranges, frozenset([frozenset((a, b))]))
    assert groups == [4096, 1000] and place == {big: (0, 0), b: (0, 0), a: (1, 0)}


def test_peak_of_live_bytes():
    a, b, c = pool.Slot(100, "a"), pool.Slot(200, "b"), pool.Slot(40, "c")
    assert pool.peak_bytes({a: (0, 3), b: (3, 5), c: (4, 9)}) == 300  # a and b at 3
    assert pool.peak_bytes({a: (0, 2), b: (3, 5)}) == 200


def _step(device, name, keep):
    graph, blob = onnx_io.load_bundle(MODELS[name])
    shape = make_zoo.MODELS[name][1] if name in make_zoo.MODELS else (1, 28, 28)
    rng = rng_for("pool", name)
    x = rng.integers(0, make_zoo.VOCAB, (4, *shape)) if name in make_zoo.TOKENS else \
        rng.standard_normal((4, *shape)).astype(np.float32)
    labels = rng.integers(0, 4, 4).astype(np.uint32)
    plan = run(parity.load(device, graph, blob, 4, _input_bytes(graph, x), labels.tobytes(),
                           keep_grads=keep))
    parity.run_step(device, plan, 1, 0, True)
    out = plan.acts[plan.graph.output]
    return plan, {"G": bytes(run(device.read(plan.G, 0, plan.wbytes))),
                  "output": bytes(run(device.read(out.buf, out.offset, out.nbytes))),
                  "metrics": bytes(run(device.read(plan.metrics, 8 * parity.metrics_slot(1), 8)))}


@pytest.mark.parametrize("name", list(MODELS))
def test_a_step_is_bit_identical_with_shared_gradients(device, name):
    with builder_patch({"POOL": False}):
        own, want = _step(device, name, ())
    for offsets in (True, False):
        with builder_patch({"POOL_OFFSETS": offsets}):
            shared, got = _step(device, name, ())
        assert own.grad_pool["slots"] == 0 and shared.grad_pool["slots"] > 0
        assert shared.grad_pool["bytes"] < shared.grad_pool["unshared"]
        for k in want:
            assert got[k] == want[k], f"{name}: {k} differs with shared buffers ({offsets})"


def test_a_gradient_read_before_written_keeps_a_zeroed_buffer(device):
    """Split with an unused middle output: its gradient is never written, Split's backward
    reads it as zeros (tests/cases layout: split_input_unused_middle)."""
    from webgpu_trainer.engine.graph import Graph
    from webgpu_trainer.engine.plan import Plan
    case = by_id(family_of("layout").CASES, "split_input_unused_middle")
    plan = run(Plan.build(device, Graph(case.graph), len(case.labels)))
    unused = [n["outputs"][1] for n in plan.graph.nodes if n["op_type"] == "Split"][0]
    buf = plan.grads[unused].buf
    assert not buf.label.startswith("pool."), "an unwritten gradient joined the pool"


def test_the_estimate_counts_the_shared_buffers():
    graph, _ = onnx_io.load_bundle(MODELS["resnet8"])
    est = memory.estimate(graph, 64, optimizer="adam")
    labels = [label for label, _ in est["buffers"]]
    assert any(label.startswith("pool.") for label in labels)
    assert not any(label.startswith("d/") for label in labels)  # no activation's own buffer
    assert est["parts"]["shared"] < est["parts"]["activations"]


# Every single-step case of every family on the GPU adapters' kernel paths (tiled GEMM and
# convolutions, the implicit-GEMM convolution for every layer, many-part channel sums), where
# the scratch and gradient layouts differ from the CPU adapters' (tests/test_golden.py checks
# those bit for bit with shared buffers already).
GPU = {"TILED": True, "CONV_GEMM_MIN": 1, "REDUCE_CHUNK": 64}
CASES = [c for f in FAMILIES for c in family_of(f).CASES
         if c.optimizer is None and c.steps == 1 and c.train]


def _case_step(device, case, keep):
    plan = run(parity.load(device, case.graph, case.blob, len(case.labels),
                           _input_bytes(case.graph, case.x),
                           np.asarray(case.labels, "<u4").tobytes(), loss=case.loss,
                           init_seed=case.init_seed, keep_grads=keep))
    parity.run_step(device, plan, case.step, case.seed, True)
    out = plan.acts[plan.graph.output]
    return [bytes(run(device.read(plan.G, 0, plan.wbytes))),
            bytes(run(device.read(out.buf, out.offset, out.nbytes))),
            bytes(run(device.read(plan.metrics, 8 * parity.metrics_slot(case.step), 8)))]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_gpu_paths_are_bit_identical_with_shared_gradients(device, case):
    with builder_patch(GPU):
        shared = _case_step(device, case, ())
        with builder_patch({"POOL": False}):
            assert shared == _case_step(device, case, ()), case.id


def test_offsets_shrink_the_shared_buffers():
    """ResNet-8 at batch 64 (GPU kernels): placing smaller slots at offsets inside larger
    buffers (Builder.POOL_OFFSETS) needs at least 10% fewer shared bytes than a slot at a
    time a buffer (measured 31.5 -> 25.6 MB)."""
    graph, _ = onnx_io.load_bundle(MODELS["resnet8"])
    shared = {}
    for offsets in (True, False):
        with builder_patch({"POOL_OFFSETS": offsets, "TILED": True}):
            shared[offsets] = memory.estimate(graph, 64, optimizer="adam")["parts"]["shared"]
    assert shared[True] < 0.9 * shared[False], shared

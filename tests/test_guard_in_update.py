"""The numerical guard inside the optimizer's update (``Builder.GUARD_IN_UPDATE``, optim.wgsl
GUARD) flags exactly what guard.wgsl's own dispatch flags: per trainable tensor the first step
whose gradient holds a NaN / +Inf / -Inf, nothing for frozen tensors, buffers or padding, with
every optimizer and with gradient clipping; and a healthy update stores the same bits as
without it. The gradients are written straight into the flat gradient buffer, so each case
knows which tensors are bad at which step."""

import struct

import numpy as np
import pytest

from conftest import make_graph, node, run
from webgpu_trainer.engine.graph import Graph
from webgpu_trainer.engine.plan import Builder, Plan
from webgpu_trainer.engine.tools import parity
from webgpu_trainer.engine.train import optim
from webgpu_trainer.engine.train.guard import NONE, Guard

pytestmark = pytest.mark.every_backend

BATCH = 4
# graph order of first use: the guard's tensor order (fc3.bias is a buffer, never watched)
WATCHED = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight"]


def _model():
    rng = np.random.default_rng(5)
    nodes = [node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["h1"], transB=1),
             node("Relu", ["h1"], ["r1"]),
             node("Gemm", ["r1", "fc2.weight", "fc2.bias"], ["h2"], transB=1),
             node("Relu", ["h2"], ["r2"]),
             node("Gemm", ["r2", "fc3.weight", "fc3.bias"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("fc1.weight", rng.standard_normal((5, 6)), "param"),
               ("fc1.bias", rng.standard_normal(5), "param"),
               ("fc2.weight", rng.standard_normal((4, 5)), "param"),
               ("fc2.bias", rng.standard_normal(4), "param"),
               ("fc3.weight", rng.standard_normal((3, 4)), "param"),
               ("fc3.bias", rng.standard_normal(3), "buffer")]
    return make_graph(nodes, tensors, [("input", ["N", 6])], [("output", ["N", 3])])


async def _update(dev, in_update: bool, name: str, clip: float, bad_steps: dict, steps: int):
    """Run ``steps`` updates of optimizer ``name`` on gradients written into G: finite random
    values, except ``bad_steps[t] = [(tensor, element, value)]``. Returns ``(per-tensor flags,
    first_bad, P bytes, update dispatches)``."""
    graph, blob = _model()
    saved = Builder.GUARD_IN_UPDATE, Builder.TILED
    Builder.GUARD_IN_UPDATE = in_update
    if name == "adam-vec4":  # GPU adapters' adam4 (optim.wgsl), forced on this adapter
        name, Builder.TILED = "adam", True
    try:
        plan = await Plan.build(dev, Graph(graph), BATCH)
        await parity.load(dev, graph, blob, BATCH, plan=plan)
        guard = await Guard.build(plan)
        opt = optim.make(name, 0.01, momentum=0.9, clip_grad_norm=clip)
        await opt.attach(plan, guard)
        vec4 = Builder.OPTIM_VEC4 and plan.builder.tiled and name == "adam"
    finally:
        Builder.GUARD_IN_UPDATE, Builder.TILED = saved
    assert opt.dispatches[-1][0][2].split(":")[1] == ("adam4" if vec4 else name)  # pipeline key
    assert [t for t, _ in guard.tensors] == WATCHED
    updates = guard.dispatches + opt.dispatches
    prog = dev.program(updates)
    rng = np.random.default_rng(11)
    for t in range(1, steps + 1):
        g = rng.standard_normal(plan.wbytes // 4).astype(np.float32)
        for tensor, element, value in bad_steps.get(t, []):
            g[plan.graph.tensors[tensor]["offset"] // 4 + element] = value
        dev.write(plan.G, g.tobytes())
        parity.run_step(dev, plan, t, opt=opt, prog=prog)
    raw = await dev.read(guard.flags, 0, 4 * len(WATCHED))
    flags = dict(zip(WATCHED, struct.unpack(f"<{len(WATCHED)}I", raw)))
    return flags, await guard.first_bad(), bytes(await dev.read(plan.P)), len(updates)


CASES = {
    "nan_in_the_last_element": {2: [("fc2.bias", 3, np.nan)]},
    "inf_and_minus_inf": {3: [("fc1.weight", 29, np.inf), ("fc3.weight", 0, -np.inf)]},
    "first_step_kept": {2: [("fc2.weight", 7, np.nan)],
                        4: [("fc1.bias", 0, np.nan), ("fc2.weight", 0, np.inf)]},
    "frozen_and_padding_ignored": {2: [("fc3.bias", 1, np.nan)]},
    # the 256-byte aligned blob's padding after a tensor: the same block of the update's mask
    # (plan.owners) as the tensor's last elements
    "padding_after_a_tensor": {2: [("fc2.bias", 4, np.nan), ("fc1.weight", 30, np.inf),
                                   ("fc1.weight", 63, np.nan)]},
    "healthy": {},
}
NUMEL = {"fc1.weight": 30, "fc1.bias": 5, "fc2.weight": 20, "fc2.bias": 4, "fc3.weight": 12}


def _expected(bad_steps):
    want = dict.fromkeys(WATCHED, NONE)
    for t in sorted(bad_steps):
        for tensor, element, _ in bad_steps[t]:
            if tensor in want and element < NUMEL[tensor] and want[tensor] == NONE:
                want[tensor] = t
    return want


@pytest.mark.parametrize("name", ["sgd", "adam", "adam-vec4", "adagrad", "rmsprop", "adadelta"])
@pytest.mark.parametrize("case", list(CASES))
def test_update_flags_what_the_guard_dispatch_flags(device, name, case):
    bad = CASES[case]
    clip = 1.0 if name in ("adam", "adam-vec4", "sgd") else 0.0
    flags, first, weights, n_in = run(_update(device, True, name, clip, bad, 5))
    old_flags, old_first, old_weights, n_old = run(_update(device, False, name, clip, bad, 5))
    want = _expected(bad)
    assert flags == want == old_flags
    assert first == old_first
    if any(v != NONE for v in want.values()):
        step = min(want.values())
        tensor = next(k for k in WATCHED if want[k] == step)
        assert first[:2] == (step, tensor)
    else:
        assert first is None
    assert n_in == n_old - 1  # the guard's own dispatch is gone
    if case in ("healthy", "frozen_and_padding_ignored", "padding_after_a_tensor"):
        assert weights == old_weights  # the update's bits are unchanged


def test_clipping_ignores_a_frozen_tensors_nan(device):
    """The gradient norm sums trainable elements only: a NaN in a buffer's slot of G (no
    gradient torch would clip) leaves the clipped update finite and as without the guard."""
    bad = CASES["frozen_and_padding_ignored"]
    _, first, weights, _ = run(_update(device, True, "adam", 1.0, bad, 3))
    _, _, healthy, _ = run(_update(device, True, "adam", 1.0, {}, 3))
    assert first is None
    w, h = (np.frombuffer(b, np.float32) for b in (weights, healthy))
    off = Graph(_model()[0]).tensors["fc3.bias"]["offset"] // 4
    keep = np.ones(w.size, bool)
    keep[off:off + 3] = False
    assert np.isfinite(w).all() and np.array_equal(w[keep], h[keep])

"""The plan's ReLU fusions (engine/plan.py: ``fused_relu``, ``relu_grad_fused``,
``relu_sum_fused``): which nodes fuse in the fusion cases of tests/cases/plan.py (their numbers
against the float64 numpy engine: tests/test_plan.py, and here for the cases of this file), that
no ReLU dispatch is left where they fuse, and that nothing fuses where the ReLU's input has a
second consumer or is the graph output."""

from pathlib import Path

import pytest

from cases import by_id, case, plan as plan_cases
from conftest import f32, node, rng_for, run
from harness import check, check_case, one_step, oracle, same_memory
from webgpu_trainer.engine import builder

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.fixture
def entries(monkeypatch):
    """{id(dispatch list): [(shader, entry), ...]}: what each list of the plans built while
    the fixture is active dispatches (``Builder.kernel`` recorded)."""
    names: dict = {}
    kernel = builder.Builder.kernel

    async def recording(self, shader, entry, groups, **kw):
        await kernel(self, shader, entry, groups, **kw)
        names.setdefault(id(self.current), []).append((shader, entry))

    monkeypatch.setattr(builder.Builder, "kernel", recording)
    return names


def _relu_dispatches(names, plan) -> dict:
    """{list name: the ReLU kernels' entries in it} for fwd_train, fwd_eval and bwd."""
    return {part: [e for s, e in names.get(id(getattr(plan, part)), []) if e.startswith("relu")]
            for part in ("fwd_train", "fwd_eval", "bwd")}


def _fused(plan) -> tuple:
    return (sorted(plan.fused_relu), sorted(plan.relu_grad_fused.values()),
            sorted(plan.relu_sum_fused.values()))


@pytest.mark.parametrize("name, forward, grad, summed", [
    ("fused_gemm_relu_dropout_k8", ["/Gemm_h"], ["/Relu_r"], []),
    ("fused_gemm_relu_dropout_k256", ["/Gemm_h"], ["/Relu_r"], []),
    ("fused_matmul_add_relu", ["/Add_s"], ["/Relu_r"], []),
    ("fused_residual_relu_three_uses", ["/Add_s2", "/Gemm_h"], ["/Relu_r2"], ["/Relu_r"]),
    ("fused_conv_bn_relu_residual_train", ["/Add_s", "/BatchNormalization_b1"], [],
     ["/Relu_r"]),
    ("fused_conv_relu_pools", ["/Conv_c1", "/Conv_c2"], ["/Relu_r1", "/Relu_r2"], []),
])
def test_fused_cases_leave_no_relu_dispatch(device, entries, name, forward, grad, summed):
    """Each fusion case fuses what it says, computes the numpy engine's numbers and
    dispatches no ReLU kernel, except the ReLU backward of a ReLU whose gradient nothing can
    absorb. A Gemm reading an in-place ReLU's output as A masks its dA (the head Gemm after
    the last ReLU of the MatMul and three-uses cases)."""
    res, _ = check_case(device, by_id(plan_cases.CASES, name))
    p = res["plan"]
    assert _fused(p) == (forward, grad, summed)
    relus = _relu_dispatches(entries, p)
    assert relus["fwd_train"] == relus["fwd_eval"] == []
    left = len([n for n in p.graph.nodes if n["op_type"] == "Relu"]) - len(grad) - len(summed)
    assert relus["bwd"] == ["relu_backward"] * left


def test_bn_relu_eval_fused(device, entries):
    """The eval-mode case: BatchNorm (running statistics) and the Add apply their ReLUs."""
    res, _ = check_case(device, by_id(plan_cases.CASES, "fused_conv_bn_relu_residual_eval"))
    assert sorted(res["plan"].fused_relu) == ["/Add_s", "/BatchNormalization_b1"]
    assert _relu_dispatches(entries, res["plan"])["fwd_eval"] == []


def test_second_consumer_is_not_fused(device, entries):
    """plan/residual_block: h feeds the ReLU and the residual Add, so the ReLU cannot run in
    place and the Gemm must not apply it (the Add still reads h unrectified): a ReLU of its
    own forward and backward; the Add's ReLU (its only reader) is fused, its gradient into the
    head Gemm's dA."""
    res, _ = check_case(device, by_id(plan_cases.CASES, "residual_block"))
    p = res["plan"]
    assert _fused(p) == (["/Add_s"], ["/Relu_rs"], [])
    relus = _relu_dispatches(entries, p)
    assert relus["fwd_train"] == ["relu_forward_to"]
    assert relus["bwd"] == ["relu_backward_to"]


def _output_case(relu_is_output: bool):
    """Gemm h -> Relu r with h the graph output (r read by nothing; the loss is on h), or r
    the graph output."""
    batch, features, classes = 4, 6, 5
    rng = rng_for("fusion_output", relu_is_output)
    nodes = [node("Gemm", ["input", "w", "b"], ["h"], transB=1), node("Relu", ["h"], ["r"])]
    tensors = [("w", f32(rng.standard_normal((classes, features))), "param"),
               ("b", f32(rng.standard_normal(classes) * 0.3), "param")]
    x = f32(rng.standard_normal((batch, features)))
    return case(f"plan/relu_output_{relu_is_output}", nodes, tensors, x,
                rng.integers(0, classes, batch), output="r" if relu_is_output else "h",
                tag="Relu", acts=("r",))


def test_graph_output_is_not_fused(device, entries):
    """h is the graph output: the Gemm must not rectify it (the ReLU writes its own r). Only
    the forward is compared: the dead ReLU's backward overwrites h's gradient (a plan
    limitation of graph outputs that other nodes read, not of the fusion)."""
    c = _output_case(False)
    res = run(one_step(device, c.graph, c.blob, c.x, c.labels))
    want = oracle(c)
    p = res["plan"]
    assert _fused(p) == ([], [], [])
    assert _relu_dispatches(entries, p)["fwd_train"] == ["relu_forward_to"]
    assert (res["acts"]["h"] < 0).any()
    for name in ("h", "r"):
        check("Relu", "fwd", res["acts"][name], want["acts"][name], f"activation {name}")


def test_relu_as_graph_output(device, entries):
    """r is the graph output: the Gemm applies the ReLU (h is read by nothing else), and the
    ReLU's backward stays its own dispatch (the output's gradient is the loss's)."""
    res, _ = check_case(device, _output_case(True))
    p = res["plan"]
    assert _fused(p) == (["/Gemm_h"], [], [])
    relus = _relu_dispatches(entries, p)
    assert relus["fwd_train"] == [] and relus["bwd"] == ["relu_backward"]


def test_dispatch_counts(device, entries):
    """SeedNet's training step (forward, loss, backward) has no ReLU dispatch left."""
    from webgpu_trainer import onnx_io
    from webgpu_trainer.engine.graph import Graph
    from webgpu_trainer.engine.plan import Plan
    graph, _ = onnx_io.load_bundle(Path(__file__).resolve().parents[1] / "models" /
                                   "seednet.onnx")
    p = run(Plan.build(device, Graph(graph), 4, keep_grads=True))
    relus = _relu_dispatches(entries, p)
    assert relus == {"fwd_train": [], "fwd_eval": [], "bwd": []}
    assert sorted(p.fused_relu) == sorted(n["name"] for n in p.graph.nodes
                                          if n["op_type"] in ("Conv", "Gemm")
                                          and n["outputs"][0] in _relu_inputs(p.graph))


def _relu_inputs(graph) -> set:
    return {n["inputs"][0] for n in graph.nodes if n["op_type"] == "Relu"}


def test_residual_add_passes_its_gradient(device, entries):
    """An Add of two same-shaped tensors passes its output gradient through: r's use by
    s2 = s1 + r contributes s2's gradient itself, and the single-use inputs s1, g2, g3 share
    s2's gradient buffer, so neither Add writes a gradient; the numbers are the numpy
    engine's. g2's gradient is read after the Add's (by g2's Gemm)."""
    res, _ = check_case(device, by_id(plan_cases.CASES, "fused_residual_relu_three_uses"))
    p = res["plan"]
    assert p.contrib[("/Add_s2", 1)] is p.grads["s2"]
    assert same_memory(p.grads["s1"], p.grads["g2"], p.grads["g3"], p.grads["s2"])
    assert not same_memory(p.grads["h"], p.grads["s2"])
    assert [e for s, e in entries[id(p.bwd)] if s == "binary"] == []


@pytest.mark.parametrize("through", [True, False], ids=["shared", "copied"])
def test_broadcast_add_writes_its_gradients(device, entries, through):
    """MatMul + Add(bias): the bias is broadcast. m spans the output, so m's gradient is the
    Add's output gradient (Builder.GRAD_THROUGH_BROADCAST_ADD; off: backward_full writes a
    copy); the bias's is summed (backward). Numbers: the numpy engine's."""
    from harness import builder_patch
    with builder_patch({"GRAD_THROUGH_BROADCAST_ADD": through}):
        res, _ = check_case(device, by_id(plan_cases.CASES, "fused_matmul_add_relu"))
    p = res["plan"]
    assert same_memory(p.grads["m"], p.grads["s"]) == through
    assert [e for s, e in entries[id(p.bwd)] if s == "binary"] == \
        ["backward"] + ([] if through else ["backward_full"])


# ---- a Gelu's backward taken by the Gemm after it (fusion.gelu_grads) ---------------------

def _ffn(batch, feats, hidden, classes, key):
    """input -> Gemm fc1 -> Gelu -> Gemm fc2 -> LogSoftmax (a transformer's FFN shape), its
    bundle, input, labels and the float64 gradients of its four tensors (NLL, mean)."""
    import math

    import numpy as np
    from conftest import make_graph
    rng = rng_for("gelu_grad_fused", key)
    w1, b1 = 0.5 * rng.standard_normal((hidden, feats)), 0.1 * rng.standard_normal(hidden)
    w2, b2 = 0.5 * rng.standard_normal((classes, hidden)), 0.1 * rng.standard_normal(classes)
    nodes = [node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["t"], transB=1),
             node("Gelu", ["t"], ["u"]),
             node("Gemm", ["u", "fc2.weight", "fc2.bias"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("fc1.weight", w1, "param"), ("fc1.bias", b1, "param"),
               ("fc2.weight", w2, "param"), ("fc2.bias", b2, "param")]
    graph, blob = make_graph(nodes, tensors, [("input", ["N", feats])],
                             [("output", ["N", classes])])
    x = f32(rng.standard_normal((batch, feats)))
    labels = rng.integers(0, classes, batch)
    # float64 reference (torch's GeluBackward: Phi(t) + t * phi(t))
    w1, b1, w2, b2 = (f32(a).astype(np.float64) for a in (w1, b1, w2, b2))
    t = x.astype(np.float64) @ w1.T + b1
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(t / math.sqrt(2.0)))
    u = t * cdf
    z = u @ w2.T + b2
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dz = (p - np.eye(classes)[labels]) / batch
    dt = (dz @ w2) * (cdf + t * np.exp(-0.5 * t * t) / math.sqrt(2.0 * math.pi))
    want = {"fc2.weight": dz.T @ u, "fc2.bias": dz.sum(0), "fc1.weight": dt.T @ x,
            "fc1.bias": dt.sum(0)}
    return graph, blob, x, labels, want


# (batch, features, hidden, classes): fc2's input gradient unsplit, and summed over 600
# classes in parts (reduce.wgsl takes the slope; matmul_kpar off), and over 200 on the GPU
# paths' matmul_kpar (its stores take the slope); the GPU paths (TILED) and the CPU ones.
@pytest.mark.parametrize("shape,kpar", [((8, 12, 20, 5), None), ((4, 12, 16, 600), None),
                                        ((4, 12, 16, 200), 16384)],
                         ids=["whole", "split", "kpar"])
@pytest.mark.parametrize("tiled", [False, True], ids=["cpu-paths", "gpu-paths"])
def test_gelu_backward_fused_into_gemm(device, monkeypatch, shape, kpar, tiled):
    """fc2's dA kernel multiplies by the Gelu's slope and writes dt: no unary_backward
    dispatch, du never made, fc2's Gemm (or its split sum) specialised GELU_GRAD; the
    parameter gradients match float64 within GRAD_RTOL and the unfused plan's bit for bit."""
    import numpy as np
    from conftest import GRAD_RTOL, rel_err
    from harness import builder_patch, read_flat
    from webgpu_trainer.engine.tools import parity
    graph, blob, x, labels, want = _ffn(*shape, key=f"{shape}")
    seen = []
    kernel = builder.Builder.kernel

    async def recording(self, shader, entry, groups, **kw):
        await kernel(self, shader, entry, groups, **kw)
        seen.append((id(self.current), entry, (kw.get("constants") or {}).get("GELU_GRAD")))
    monkeypatch.setattr(builder.Builder, "kernel", recording)

    async def go(fuse):
        seen.clear()
        with builder_patch({"FUSE_GELU_GRAD": fuse, "TILED": tiled, "GEMM_KPAR": kpar}):
            plan = await parity.load(device, graph, blob, len(labels), x.tobytes(),
                                     np.asarray(labels, np.uint32).tobytes())
        parity.run_step(device, plan, 1)
        grads = {n: await read_flat(device, plan, plan.G, n) for n in want}
        bwd = [(e, g) for i, e, g in seen if i == id(plan.bwd)]
        return plan, grads, bwd

    plan, fused, bwd = run(go(True))
    assert [(g["name"], c) for g, c in plan.gelu_grad_fused.values()] == [("/Gelu_u", ["u"])]
    assert list(plan.gelu_grad_fused) == ["/Gemm_logits"] and "u" not in plan.grads
    assert "unary_backward" not in [e for e, _ in bwd], bwd
    assert any(g == 1 for _, g in bwd), bwd  # the slope's pipeline
    if shape[3] >= 200:
        entry = "matmul_kpar" if kpar and tiled else "reduce_splits"
        assert any(e.startswith(entry) and g == 1 for e, g in bwd), bwd
    for name, ref in want.items():
        assert rel_err(fused[name], ref) <= GRAD_RTOL, name
    plain, unfused, bwd = run(go(False))
    assert plain.gelu_grad_fused == {} and "unary_backward" in [e for e, _ in bwd]
    for name in want:
        assert np.array_equal(fused[name], unfused[name]), name


def test_gelu_backward_not_fused_when_its_input_is_read_twice(device):
    """A Gelu whose input also feeds a residual Add keeps its own backward (the Gemm cannot
    write a gradient that is a sum), as do one whose output gradient the caller keeps and one
    whose input activation the caller reads."""
    import numpy as np
    from conftest import make_graph
    from webgpu_trainer.engine.tools import parity
    nodes = [node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["t"], transB=1),
             node("Gelu", ["t"], ["u"]),
             node("Gemm", ["u", "fc2.weight", "fc2.bias"], ["v"], transB=1),
             node("Add", ["v", "t"], ["s"]),
             node("LogSoftmax", ["s"], ["output"], axis=-1)]
    rng = rng_for("gelu_grad_not_fused")
    tensors = [("fc1.weight", rng.standard_normal((6, 4)), "param"),
               ("fc1.bias", rng.standard_normal(6), "param"),
               ("fc2.weight", rng.standard_normal((6, 6)), "param"),
               ("fc2.bias", rng.standard_normal(6), "param")]
    graph, blob = make_graph(nodes, tensors, [("input", ["N", 4])], [("output", ["N", 6])])
    x = f32(rng.standard_normal((2, 4))).tobytes()
    labels = np.zeros(2, np.uint32).tobytes()
    plan = run(parity.load(device, graph, blob, 2, x, labels))
    assert plan.gelu_grad_fused == {}
    chain, blob2 = _ffn(2, 4, 6, 3, key="kept")[:2]
    kept = run(parity.load(device, chain, blob2, 2, x, labels, keep_grads=["u"]))
    assert kept.gelu_grad_fused == {} and "u" in kept.grads
    read = run(parity.load(device, chain, blob2, 2, x, labels, keep_acts=["t"]))
    assert read.gelu_grad_fused == {}  # t read after the step: no slope in its place


def test_gelu_training_forward_keeps_the_slope_and_evaluation_the_input(device, entries):
    """Fused, the training forward's Gelu (gelu_slope.wgsl) leaves GELU'(t) in
    t's buffer and u = GELU(t) in its own (float64 within 1e-5 relative); the evaluation
    forward runs the plain Gelu and leaves t itself there, for the probes."""
    import math

    import numpy as np
    from harness import read_f32
    from webgpu_trainer.engine.tools import parity
    graph, blob, x, labels, _ = _ffn(8, 12, 20, 5, key="slope")
    plan = run(parity.load(device, graph, blob, len(labels), x.tobytes(),
                           np.asarray(labels, np.uint32).tobytes()))
    gelus = ("unary", "gelu_slope")
    assert [e for s, e in entries[id(plan.fwd_train)] if s in gelus] == ["gelu_forward_slope"]
    assert [e for s, e in entries[id(plan.fwd_eval)] if s in gelus] == ["unary_forward"]
    w1, b1 = (run(read_flat_f64(device, plan, n)) for n in ("fc1.weight", "fc1.bias"))
    t = x.astype(np.float64) @ w1.T + b1
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(t / math.sqrt(2.0)))
    slope = cdf + t * np.exp(-0.5 * t * t) / math.sqrt(2.0 * math.pi)
    parity.run_step(device, plan, 1)
    kept, u = (run(read_f32(device, plan.acts[n])) for n in ("t", "u"))
    assert np.abs(kept - slope).max() <= 1e-5 * np.abs(slope).max()
    assert np.abs(u - t * cdf).max() <= 1e-5 * np.abs(t * cdf).max()
    parity.run_step(device, plan, 2, train=False)
    w1, b1 = (run(read_flat_f64(device, plan, n)) for n in ("fc1.weight", "fc1.bias"))
    t = x.astype(np.float64) @ w1.T + b1
    assert np.abs(run(read_f32(device, plan.acts["t"])) - t).max() <= 1e-5 * np.abs(t).max()


async def read_flat_f64(device, plan, name):
    from harness import read_flat
    return (await read_flat(device, plan, plan.P, name)).astype("float64")


def test_gelu_backward_not_fused_after_an_op_that_reads_its_output(device):
    """A Gelu after a Sigmoid (whose backward reads its saved output, which the slope would
    overwrite) keeps its own backward; after a Gemm seen through a Reshape (3-D tokens) it
    fuses, the Gemm after it reading its output through a Reshape back into rows."""
    import numpy as np
    from conftest import make_graph
    from webgpu_trainer.engine.tools import parity
    rng = rng_for("gelu_grad_after_sigmoid")
    tensors = [("fc1.weight", rng.standard_normal((6, 4)), "param"),
               ("fc2.weight", rng.standard_normal((3, 6)), "param")]
    consts = {"tokens": {"dtype": "int64", "shape": [3], "values": [2, 1, 6]},
              "rows": {"dtype": "int64", "shape": [2], "values": [2, 6]}}
    x = f32(rng.standard_normal((2, 4))).tobytes()
    labels = np.zeros(2, np.uint32).tobytes()
    for first, fused in (("Sigmoid", False), ("Reshape", True)):
        mid = node("Sigmoid", ["h"], ["s"]) if first == "Sigmoid" else \
            node("Identity", ["h"], ["s"])
        nodes = [node("Gemm", ["input", "fc1.weight"], ["h"], transB=1), mid,
                 node("Reshape", ["s", "tokens"], ["t"]),
                 node("Gelu", ["t"], ["u"]),
                 node("Reshape", ["u", "rows"], ["r"]),
                 node("Gemm", ["r", "fc2.weight"], ["v"], transB=1),
                 node("LogSoftmax", ["v"], ["output"], axis=-1)]
        graph, blob = make_graph(nodes, tensors, [("input", [2, 4])], [("output", [2, 3])],
                                 constants=consts)
        plan = run(parity.load(device, graph, blob, 2, x, labels))
        assert bool(plan.gelu_grad_fused) == fused, first


def test_gelu_backward_fused_in_the_zoo_vit(device):
    """The test zoo's ViT (TorchScript export: each FFN's Gelu feeds its second Linear through
    a Reshape into rows) fuses both Gelus' backward through that view; every parameter
    gradient is the unfused plan's bit for bit (the unfused one is checked against PyTorch in
    tests/test_zoo.py)."""
    import numpy as np
    from harness import builder_patch, read_flat
    from webgpu_trainer import onnx_io
    from webgpu_trainer.engine.tools import parity
    graph, blob = onnx_io.load_bundle(Path(__file__).parent / "fixtures" / "zoo" / "vit-ts.onnx")
    shape = [d for d in graph["inputs"][0]["shape"][1:]]
    classes = graph["outputs"][0]["shape"][-1]
    rng = rng_for("gelu_grad_vit")
    x = f32(rng.standard_normal((2, *shape))).tobytes()
    labels = rng.integers(0, classes, 2).astype(np.uint32).tobytes()

    async def go(fuse):
        with builder_patch({"FUSE_GELU_GRAD": fuse}):
            plan = await parity.load(device, graph, blob, 2, x, labels)
        parity.run_step(device, plan, 1)
        return plan, {n: await read_flat(device, plan, plan.G, n) for n in plan.trainable}

    fused_plan, fused = run(go(True))
    assert len(fused_plan.gelu_grad_fused) == 2
    assert all(len(chain) == 2 for _, chain in fused_plan.gelu_grad_fused.values())  # u, rows
    _, plain = run(go(False))
    assert fused.keys() == plain.keys() and len(fused) > 10
    for name in fused:
        assert np.array_equal(fused[name], plain[name]), name

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

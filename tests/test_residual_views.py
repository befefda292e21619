"""A residual Add whose input is a Linear's product reshaped back to tokens (plan._passing_add):
the product's gradient is the Add's output gradient, through the Reshape views, so the Add's
backward copies nothing. Trained against the float64 numpy engine; with a second reader of the
reshaped product, or of the product itself, the plan keeps buffers of their own (and the same
numbers)."""

import numpy as np
import pytest

from cases.blocks import flat_head_case, gemm_to, shape_const
from conftest import f32, node, rng_for, run
from harness import builder_patch, check_case, one_step, same_memory

TOKENS, D = 6, 8


def _case(second_reader=None):
    """input [N, 5] -> Gemm -> Reshape [N, 6, 8] (a) -> Reshape [N*6, 8] -> Gemm (p) ->
    Reshape [N, 6, 8] (q) -> Add(a, q) (s) -> Flatten -> head; ``second_reader``: "q" or "p"
    also read by a Mul into a second Add."""
    rng = rng_for("residual_views", second_reader)
    nodes, tensors, consts = gemm_to(rng, [TOKENS, D], name="a")
    consts.update({"rows": shape_const([-1, D]), "tokens": shape_const([-1, TOKENS, D])})
    nodes += [node("Reshape", ["a", "rows"], ["h"]),
              node("Gemm", ["h", "lin.w", "lin.b"], ["p"], transB=1),
              node("Reshape", ["p", "tokens"], ["q"]),
              node("Add", ["a", "q"], ["s"])]
    tensors += [("lin.w", f32(rng.standard_normal((D, D)) / np.sqrt(D)), "param"),
                ("lin.b", f32(rng.standard_normal(D) * 0.1), "param")]
    out = "s"
    if second_reader:
        nodes += [node("Reshape", ["p", "tokens"], ["q2"])] if second_reader == "p" else []
        other = "q2" if second_reader == "p" else "q"
        nodes += [node("Mul", [other, "s"], ["m"]), node("Add", ["s", "m"], ["t"])]
        out = "t"
    return flat_head_case(f"residual_views/{second_reader or 'plain'}", rng, nodes, tensors,
                          consts, out, [TOKENS, D], tag="residual Add through views",
                          acts=("a", "q", out), dacts=("a", "p", "q", "s"))


def _copies(plan) -> int:
    """Dispatches of binary.wgsl's backward kernels in the plan's backward list."""
    return sum(1 for d in plan.bwd if str(d[0][2]).startswith("binary:backward"))


def test_product_gradient_is_the_residual_sum_gradient(device):
    case = _case()
    res, _ = check_case(device, case)
    plan = res["plan"]
    assert same_memory(plan.grads["p"], plan.grads["s"])
    assert same_memory(plan.grads["q"], plan.grads["s"])
    assert _copies(plan) == 0


@pytest.mark.parametrize("reader", ["q", "p"])
def test_second_reader_keeps_its_own_buffer(device, reader):
    case = _case(reader)
    res, _ = check_case(device, case)
    plan = res["plan"]
    assert not same_memory(plan.grads["p"], plan.grads["s"])


def test_same_numbers_as_without_the_sharing(device):
    """The shared buffer gives the bits of the copy it replaces (Builder.GRAD_THROUGH_VIEWS)."""
    case = _case()
    on = run(one_step(device, case.graph, case.blob, case.x, case.labels))
    with builder_patch({"GRAD_THROUGH_VIEWS": False}):
        off = run(one_step(device, case.graph, case.blob, case.x, case.labels))
    assert _copies(off["plan"]) == 1 and _copies(on["plan"]) == 0
    for name, g in off["grads"].items():
        assert np.array_equal(on["grads"][name], g), name
    assert np.array_equal(on["dacts"]["a"], off["dacts"]["a"])


def _broadcast_case(first):
    """input [N, 5] -> Gemm -> Reshape [N, 6, 8] (a) -> Add with a learned [1, 6, 8] (a
    position embedding; ``first``: it is the Add's first input) (s) -> Flatten -> head."""
    rng = rng_for("broadcast_add", first)
    nodes, tensors, consts = gemm_to(rng, [TOKENS, D], name="a")
    ins = ["pos", "a"] if first else ["a", "pos"]
    nodes += [node("Add", ins, ["s"])]
    tensors += [("pos", f32(rng.standard_normal((1, TOKENS, D)) * 0.5), "param")]
    return flat_head_case(f"residual_views/broadcast_{'first' if first else 'second'}", rng,
                          nodes, tensors, consts, "s", [TOKENS, D], batch=3,
                          tag="Add of a broadcast parameter", acts=("a", "s"),
                          dacts=("a", "s"))


@pytest.mark.parametrize("first", [False, True], ids=["pos_second", "pos_first"])
def test_broadcast_add_passes_its_full_inputs_gradient(device, first):
    """Against the float64 numpy engine (check_case); the full-shaped input's gradient is the
    Add's output gradient (no copy, Builder.GRAD_THROUGH_BROADCAST_ADD), the same bits as the
    copy; the broadcast parameter's gradient still summed over the batch."""
    case = _broadcast_case(first)
    res, _ = check_case(device, case)
    plan = res["plan"]
    assert same_memory(plan.grads["a"], plan.grads["s"])
    on = run(one_step(device, case.graph, case.blob, case.x, case.labels))
    with builder_patch({"GRAD_THROUGH_BROADCAST_ADD": False}):
        off = run(one_step(device, case.graph, case.blob, case.x, case.labels))
    assert _copies(off["plan"]) == 2 and _copies(on["plan"]) == 1
    for name, g in off["grads"].items():
        assert np.array_equal(on["grads"][name], g), name
    assert np.array_equal(on["dacts"]["a"], off["dacts"]["a"])

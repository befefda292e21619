"""ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceSumSquare, ReduceL2, ReduceLogSumExp,
ReduceL1, ReduceProd (ops/reduction.py, shaders/reduce.wgsl): Gemm ->
Reshape [N, 3, 4, 5] -> Reduce(axes, keepdims) -> Flatten -> Gemm -> LogSoftmax; axes as an
attribute or an input, ties (the gradient split evenly, as torch.amax / amin), the batch axis,
everything to a scalar, empty axes with noop_with_empty_axes."""

import numpy as np

from cases.blocks import flat_head_case, gemm_to, shape_const
from conftest import f32, node, rng_for

BATCH = 2
AXES = {
    # id: (axes, keepdims, as_input)   on [N, 3, 4, 5]
    "a1_keep": ([1], 1, False),
    "a23_drop": ([2, 3], 0, False),
    "a13_keep": ([1, 3], 1, False),
    "a-1_drop_input": ([-1], 0, True),
    "a123_keep_wg": ([1, 2, 3], 1, False),
    "a2_drop_input": ([2], 0, True),
}
OPS = ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"]
NEW_OPS = ["ReduceSumSquare", "ReduceL2", "ReduceLogSumExp", "ReduceL1"]


def reduce_shape(shape, axes, keep):
    axes = [a % len(shape) for a in axes]
    return [1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes]


def _shape_is(shape):
    def check(res, want):
        assert list(res["acts"]["r"].shape) == shape
    return check


def _reduce(op, name):
    """Gemm -> Reshape [N, 3, 4, 5] -> Reduce(axes, keepdims) -> Flatten -> Gemm."""
    axes, keep, as_input = AXES[name]
    rng = rng_for("reduce", op, name)
    shape = [3, 4, 5]
    # sums of many values: smaller inputs keep the logits (and the loss) moderate
    count = np.prod([shape[a % 4 - 1] for a in axes])
    small = op in ("ReduceSum", "ReduceSumSquare")
    nodes, tensors, consts = gemm_to(rng, shape, gain=0.3 / np.sqrt(count) if small else 1.0)
    if as_input:
        consts["axes"] = {"dtype": "int64", "shape": [len(axes)], "values": list(axes)}
        nodes.append(node(op, ["h", "axes"], ["r"], keepdims=keep))
    else:
        nodes.append(node(op, ["h"], ["r"], axes=axes, keepdims=keep))
    out_shape = reduce_shape([BATCH] + shape, axes, keep)[1:]
    return flat_head_case(f"reduction/{op}_{name}", rng, nodes, tensors, consts, "r",
                          out_shape, tag=op, acts=("h", "r"), dacts=("h", "r"),
                          checks=(_shape_is([BATCH] + out_shape),))


def _ties(op, axes):
    """Small integers (exact in float32 and float64) give tied extremes: the gradient is split
    evenly among the ties (torch.amax / amin)."""
    rng = rng_for("reduce_ties", op, len(axes))
    shape = [3, 4, 5]
    nodes, tensors, consts = gemm_to(rng, shape, integer=True)
    nodes.append(node(op, ["h"], ["r"], axes=axes, keepdims=1))
    out_shape = reduce_shape([BATCH] + shape, axes, 1)[1:]
    def has_ties(res, want):
        h = want["acts"]["h"]
        extreme = h.max(axis=tuple(axes), keepdims=True) if op == "ReduceMax" else \
            h.min(axis=tuple(axes), keepdims=True)
        assert (h == extreme).sum(axis=tuple(axes)).max() > 1, "the case has ties"

    return flat_head_case(f"reduction/{op}_ties_axes{''.join(map(str, axes))}", rng, nodes,
                          tensors, consts, "r", out_shape, tag=op, acts=("r",),
                          dacts=("h", "r"), x=lambda rng: rng.integers(-1, 2, (BATCH, 5)),
                          checks=(has_ties,))


def _special(name):
    """ReduceMean over the batch axis 0 ([N, 7] -> [1, 7], mixed back by a Gemm with a [N, 1]
    parameter); ReduceSum of everything with keepdims 0 (a scalar, reshaped to [1, 1]);
    ReduceSum with empty axes and noop_with_empty_axes (the identity)."""
    rng = rng_for("reduce_special", name)
    f = 7
    nodes = [node("Gemm", ["input", "pre.w", "pre.b"], ["h"], transB=1)]
    tensors = [("pre.w", f32(rng.standard_normal((f, 5))), "param"),
               ("pre.b", f32(rng.standard_normal(f) * 0.3), "param")]
    consts = {}
    checks = ()
    if name == "batch_axis":
        nodes += [node("ReduceMean", ["h"], ["r"], axes=[0], keepdims=1),
                  node("Gemm", ["mix", "r"], ["out"])]
        tensors.append(("mix", f32(rng.standard_normal((BATCH, 1))), "param"))
        out_shape = [f]
    elif name == "all_scalar":
        consts = {"shape": shape_const([1, 1])}
        nodes += [node("ReduceSum", ["h"], ["r"], keepdims=0),
                  node("Reshape", ["r", "shape"], ["r2"]),
                  node("Gemm", ["mix", "r2"], ["m"]),
                  node("Gemm", ["m", "w2"], ["out"])]
        tensors += [("mix", f32(rng.standard_normal((BATCH, 1))), "param"),
                    ("w2", f32(rng.standard_normal((1, 4))), "param")]
        out_shape = [4]

        def scalar(res, want):
            assert res["acts"]["r"].shape == ()
            assert np.isclose(want["acts"]["r"], want["acts"]["h"].sum())
        checks = (scalar,)
    else:
        consts = {"axes": {"dtype": "int64", "shape": [0], "values": []}}
        nodes += [node("ReduceSum", ["h", "axes"], ["out"], keepdims=1, noop_with_empty_axes=1)]
        out_shape = [f]

        def identity(res, want):
            assert np.array_equal(res["acts"]["out"], res["acts"]["h"])
        checks = (identity,)
    return flat_head_case(f"reduction/special_{name}", rng, nodes, tensors, consts, "out",
                          out_shape, tag=nodes[1]["op_type"], acts=("h", "out"), dacts=("h",),
                          checks=checks)


def _l2_zero_row():
    """ReduceL2 of rows that are all zero (h = Relu of a negative Gemm): y = 0 and the
    gradient 0 there (torch's norm backward), not NaN."""
    rng = rng_for("reduce_l2_zero")
    nodes, tensors, consts = gemm_to(rng, [3, 4, 5])
    tensors[1] = ("pre.b", f32(np.where(np.arange(60) < 20, -50.0, 0.5)), "param")
    nodes += [node("Relu", ["h"], ["hr"]), node("ReduceL2", ["hr"], ["r"], axes=[2, 3],
                                                keepdims=0)]

    def zero_row(res, want):
        assert (res["acts"]["r"][:, 0] == 0).all() and (res["acts"]["r"][:, 1:] > 0).all()
        assert np.isfinite(res["dacts"]["hr"]).all()
    return flat_head_case("reduction/ReduceL2_zero_row", rng, nodes, tensors, consts, "r", [3],
                          tag="ReduceL2", acts=("hr", "r"), dacts=("hr", "r"),
                          checks=(zero_row,))


def _prod(name, zeros=False):
    """ReduceProd of values near 1 (h = 1 + small), so products of up to 60 values stay
    moderate; ``zeros``: h times a constant 0/1 mask, rows of [N, 3, 4, 5] holding one exact
    zero (the gradient at the zero is the product of the others) and two zeros (all 0), torch's
    prod_backward (the mask's Mul keeps the gradient of its output visible)."""
    axes, keep, as_input = AXES[name] if not zeros else ([3], 1, False)
    rng = rng_for("reduce_prod", name, zeros)
    nodes, tensors, consts = gemm_to(rng, [3, 4, 5], gain=0.1)
    tensors[1] = ("pre.b", f32(1 + rng.standard_normal(60) * 0.05), "param")
    src = "h"
    if zeros:
        mask = np.ones(60)
        mask[[0, 5, 6, 30]] = 0.0  # rows (0, 0), (0, 1), (1, 2) of 5: 1, 2, 1 zeros
        consts["mask"] = {"dtype": "float32", "shape": [3, 4, 5], "values": mask.tolist()}
        nodes.append(node("Mul", ["h", "mask"], ["hr"]))
        src = "hr"
    if as_input:
        consts["axes"] = {"dtype": "int64", "shape": [len(axes)], "values": list(axes)}
        nodes.append(node("ReduceProd", [src, "axes"], ["r"], keepdims=keep))
    else:
        nodes.append(node("ReduceProd", [src], ["r"], axes=axes, keepdims=keep))
    out_shape = reduce_shape([BATCH, 3, 4, 5], axes, keep)[1:]
    checks = [_shape_is([BATCH] + out_shape)]
    if zeros:
        def zero_rows(res, want):
            r, d = want["acts"]["r"], want["dacts"]["hr"]
            assert (r[:, 0, :2, 0] == 0).all() and (r[:, 1, 2, 0] == 0).all()
            assert (d[:, 0, 0, 0] != 0).all() and (d[:, 0, 0, 1:] == 0).all()
            assert (d[:, 1, 2, 0] != 0).all() and (d[:, 0, 1] == 0).all()
            assert np.isfinite(res["dacts"]["hr"]).all()
        checks.append(zero_rows)
    return flat_head_case(f"reduction/ReduceProd_{name}{'_zeros' if zeros else ''}", rng,
                          nodes, tensors, consts, "r", out_shape, tag="ReduceProd",
                          acts=(src, "r"), dacts=(src, "r"), checks=tuple(checks))


CASES = [_reduce(op, name) for op in OPS + NEW_OPS for name in AXES] + [_l2_zero_row()] + \
    [_prod(name) for name in AXES] + [_prod("a3_keep", zeros=True)] + \
    [_ties(op, axes) for op in ("ReduceMax", "ReduceMin") for axes in ([3], [1, 2, 3])] + \
    [_special(name) for name in ("batch_axis", "all_scalar", "noop_empty")]

"""Gather with constant indices (ops/gather.py, shaders/gather.wgsl).

Each case: input -> a layer with parameters (so the input gradient flows) -> Gather -> a head
(Flatten, or a Reshape to [N, -1]) -> Gemm -> LogSoftmax. The corners: a tensor of indices
with repeats (the backward sums them) and negative ones, a scalar index (the axis dropped),
indices that leave positions unselected (zero gradient), the batch axis moved away and back
(``nn.MultiheadAttention``'s packed q/k/v), a trainable table gathered, and the last axis.
"""

from cases import case
from cases.blocks import chain, conv_pre, gemm_pre
from conftest import f32, head, node, rng_for

BATCH, CLASSES = 2, 5


def _ints(values, shape=None):
    values = list(values)
    return {"dtype": "int64", "shape": [len(values)] if shape is None else list(shape),
            "values": values}


def gather_case(id, nodes, tensors, x, feats, constants, acts=("h", "y"), dacts=("h", "y"),
                **opts):
    """``nodes`` (tested output ``y``, batch first) + Reshape [N, feats] + the head."""
    rng = rng_for("gather", id, "head")
    constants = {**constants, "flat_shape": _ints([0, -1])}
    hn, ht = head("flat", feats, CLASSES, rng)
    nodes = nodes + [node("Reshape", ["y", "flat_shape"], ["flat"])] + hn
    labels = rng.integers(0, CLASSES, len(x))
    return case(f"gather/{id}", nodes, tensors + ht, x, labels, constants=constants,
                tag="Gather", acts=acts, dacts=dacts, **opts)


def _tensor_indices_repeated_negative():
    """h [2, 6, 3, 4], indices [[4, -1], [0, 4]] on axis 1 -> [2, 2, 2, 3, 4]: position 4 read
    twice (its gradient sums both), -1 is 5, positions 1-3 unselected (zero gradient)."""
    rng = rng_for("gather_tensor")
    pre, tensors = conv_pre(6, rng)
    nodes = pre + [node("Gather", ["h", "idx"], ["y"], axis=1)]
    x = f32(rng.standard_normal((BATCH, 6, 3, 4)))
    return gather_case("tensor_indices_repeated_negative_axis1", nodes, tensors, x, 48,
                       {"idx": _ints([4, -1, 0, 4], [2, 2])})


def _scalar_index_last_axis():
    """A scalar index -2 on the last axis (dropped): h [2, 5, 3, 7] -> [2, 5, 3]."""
    rng = rng_for("gather_scalar")
    pre, tensors = conv_pre(5, rng)
    nodes = pre + [node("Gather", ["h", "idx"], ["y"], axis=-1)]
    x = f32(rng.standard_normal((BATCH, 5, 3, 7)))
    return gather_case("scalar_index_last_axis", nodes, tensors, x, 15,
                       {"idx": _ints([-2], [])})


def _packed_qkv():
    """nn.MultiheadAttention's pattern: h [N, 12] -> [N, 3, 4] -> Transpose [3, N, 4] ->
    Gather 0 and Gather 2 on axis 0 (batch now second; the middle third unused) -> Mul."""
    rng = rng_for("gather_qkv")
    pre, tensors = gemm_pre(7, 12, rng)
    nodes = pre + [node("Reshape", ["h", "s3"], ["r"]),
                   node("Transpose", ["r"], ["t"], perm=[1, 0, 2]),
                   node("Gather", ["t", "i0"], ["q"], axis=0),
                   node("Gather", ["t", "i2"], ["v"], axis=0),
                   node("Mul", ["q", "v"], ["y"])]
    x = f32(rng.standard_normal((BATCH, 7)))
    return gather_case("packed_qkv_axis0", nodes, tensors, x, 4,
                       {"s3": _ints([0, 3, 4]), "i0": _ints([0], []), "i2": _ints([2], [])},
                       acts=("t", "q", "v"), dacts=("h", "t", "q", "v"))


def _packed_qkv_all():
    """Every index of the packed axis gathered: q by 0, k by [1] (the axis kept, then a
    Squeeze), v by -1; y = (q + k) * v. The plan folds the three into one Split
    (engine/rewrites/splits.py; tests/test_splits_fold.py)."""
    rng = rng_for("gather_qkv_all")
    pre, tensors = gemm_pre(7, 12, rng)
    nodes = pre + [node("Reshape", ["h", "s3"], ["r"]),
                   node("Transpose", ["r"], ["t"], perm=[1, 0, 2]),
                   node("Gather", ["t", "i0"], ["q"], axis=0),
                   node("Gather", ["t", "i1"], ["k1"], axis=0),
                   node("Squeeze", ["k1"], ["k"], axes=[0]),
                   node("Gather", ["t", "im1"], ["v"], axis=0),
                   node("Add", ["q", "k"], ["qk"]),
                   node("Mul", ["qk", "v"], ["y"])]
    x = f32(rng.standard_normal((BATCH, 7)))
    return gather_case("packed_qkv_all_axis0", nodes, tensors, x, 4,
                       {"s3": _ints([0, 3, 4]), "i0": _ints([0], []), "i1": _ints([1]),
                        "im1": _ints([-1], [])},
                       acts=("t", "q", "k1", "v"), dacts=("h", "t", "q", "k1", "v"))


def _param_table():
    """A trainable table p [5, 7] gathered with indices [3, 0, 3, -1] (its gradient: the
    scatter-add over repeats, zero rows 1, 2) and added to the activation [N, 4, 7]."""
    rng = rng_for("gather_param")
    pre, tensors = gemm_pre(6, 28, rng)
    tensors.append(("table", f32(rng.standard_normal((5, 7))), "param"))
    nodes = pre + [node("Reshape", ["h", "s"], ["hr"]),
                   node("Gather", ["table", "idx"], ["g"], axis=0),
                   node("Add", ["hr", "g"], ["y"])]
    x = f32(rng.standard_normal((BATCH, 6)))
    return gather_case("param_table_axis0", nodes, tensors, x, 28,
                       {"s": _ints([0, 4, 7]), "idx": _ints([3, 0, 3, -1])},
                       acts=("g", "y"), dacts=("hr",))


def _chain():
    """The composite of the self-check: Gather of channels [2, 0, 2] then of a row."""
    rng = rng_for("gather_chain")
    c, hw = 3, 5
    return chain(rng, "gather/chain_channels_then_row", c, hw, [
        node("Gather", ["pre", "ch"], ["g"], axis=1),
        node("Gather", ["g", "row"], ["body_out"], axis=2)], 3 * hw,
        constants={"ch": _ints([2, 0, 2]), "row": _ints([-1], [])},
        tag="Gather", acts=("g", "body_out"), dacts=("pre", "g"))


CASES = [_tensor_indices_repeated_negative(), _scalar_index_last_axis(), _packed_qkv(),
         _packed_qkv_all(), _param_table(), _chain()]

"""Flatten, Identity, Reshape, Squeeze, Unsqueeze (ops/views.py): the output aliases the input,
so no dispatch; the gradient flows through the alias, or through a buffer of its own when the
viewed tensor has several consumers (the view's backward then hands it on)."""

import numpy as np

from cases import case
from cases.blocks import gemm_pre, shape_const
from conftest import f32, head, node, rng_for

BATCH, CLASSES = 3, 4


def _chain(name, body, feats, constants=None, opset=17, weight=False, **opts):
    """input [N, 6] -> Gemm -> h [N, 12] -> ``body`` (ending in "y") -> Flatten -> head;
    ``weight``: body also reads a parameter "wv" [3, 4] ("unchanged": the step must leave it as
    it was)."""
    rng = rng_for("views", name)
    pre, tensors = gemm_pre(6, 12, rng)
    if weight:
        wv = f32(rng.standard_normal((3, 4)))
        tensors.append(("wv", wv, "param"))
    if weight == "unchanged":
        def unchanged(res, want):  # one step, no optimizer: the weight as it was
            assert np.array_equal(res["P"]["wv"], wv), "wv changed by the step"
        opts["checks"] = (unchanged,)
    hn, ht = head("flat", feats, CLASSES, rng)
    nodes = pre + body + [node("Flatten", ["y"], ["flat"], axis=1)] + hn
    x = f32(rng.standard_normal((BATCH, 6)))
    labels = rng.integers(0, CLASSES, BATCH)
    return case(f"views/{name}", nodes, tensors + ht, x, labels, constants=constants,
                opset=opset, tag=opts.pop("tag", "views"), **opts)


CASES = [
    # a view of a weight aliases it (its gradient is the weight's part of G), read once or twice
    _chain("weight_view", [
        node("Reshape", ["wv", "s"], ["r"]), node("Mul", ["h", "r"], ["y"])], 12,
        constants={"s": shape_const([12])}, weight=True, acts=("h", "y"), dacts=("h",)),
    _chain("weight_viewed_and_read", [
        node("Reshape", ["wv", "s"], ["r"]), node("Mul", ["h", "r"], ["m"]),
        node("Reshape", ["m", "s3"], ["m3"]), node("Add", ["m3", "wv"], ["y"])], 12,
        constants={"s": shape_const([12]), "s3": shape_const([-1, 3, 4])}, weight=True,
        acts=("h", "y"), dacts=("h",)),
    # a view of a view of a weight (its gradient at the weight's offset in G); a ReLU of a
    # weight's view computes into a buffer of its own, never over the weight in P
    _chain("weight_view_of_view", [
        node("Unsqueeze", ["wv", "ax"], ["u"]), node("Reshape", ["u", "s"], ["r"]),
        node("Mul", ["h", "r"], ["y"])], 12,
        constants={"s": shape_const([12]), "ax": shape_const([0])}, weight=True,
        acts=("h", "y"), dacts=("h",)),
    _chain("weight_view_relu", [
        node("Reshape", ["wv", "s"], ["r"]), node("Relu", ["r"], ["rr"]),
        node("Mul", ["h", "rr"], ["y"])], 12,
        constants={"s": shape_const([12])}, weight="unchanged", acts=("h", "y"),
        dacts=("h",)),
    # a rearrangement of one weight (engine/rewrites/weight_layouts.py: folded into one Gather)
    _chain("weight_rearranged", [
        node("Transpose", ["wv"], ["t"], perm=[1, 0]),
        node("Slice", ["t", "s2", "e4", "ax0"], ["lo"]),
        node("Slice", ["t", "s0", "e2", "ax0"], ["hi"]),
        node("Concat", ["lo", "hi"], ["cat"], axis=0),
        node("Reshape", ["cat", "s"], ["r"]), node("Mul", ["h", "r"], ["y"])], 12,
        constants={"s": shape_const([12]), "s0": shape_const([0]), "s2": shape_const([2]),
                   "e2": shape_const([2]), "e4": shape_const([4]), "ax0": shape_const([0])},
        weight=True, acts=("h", "y"), dacts=("h",)),
    # [N, 12] -> [N, 2, 2, 3] -> Flatten(axis 2) [2N, 6] -> [N, 12]
    _chain("reshape_zero_minus1_flatten_axis2", [
        node("Reshape", ["h", "s"], ["r"]), node("Flatten", ["r"], ["f"], axis=2),
        node("Reshape", ["f", "back"], ["b"]), node("Identity", ["b"], ["y"])], 12,
        constants={"s": shape_const([0, 2, -1, 3]), "back": shape_const([-1, 12])},
        acts=("h", "f", "y"), dacts=("h",)),
    _chain("unsqueeze_input_squeeze_attr", [
        node("Unsqueeze", ["h", "ax"], ["u"]), node("Squeeze", ["u"], ["y"], axes=[1, 3])], 12,
        constants={"ax": shape_const([1, -1])}, opset=13, acts=("h", "u", "y"), dacts=("h",)),
    # Squeeze without axes drops every 1
    _chain("squeeze_all_ones", [
        node("Unsqueeze", ["h", "ax"], ["u"]), node("Squeeze", ["u"], ["y"])], 12,
        constants={"ax": shape_const([0, 3])}, acts=("u", "y"), dacts=("h",)),
    # opset < 13: the axes are an attribute and the node has one input
    _chain("unsqueeze_axes_attribute_opset11", [
        node("Unsqueeze", ["h"], ["u"], axes=[1]), node("Squeeze", ["u"], ["y"], axes=[1])], 12,
        opset=11, acts=("u", "y"), dacts=("h",)),
    # h feeds the views and the Mul: each use gets its own gradient, summed by the plan
    _chain("viewed_tensor_with_two_consumers", [
        node("Unsqueeze", ["h", "ax"], ["u"]), node("Squeeze", ["u", "ax"], ["s"]),
        node("Mul", ["s", "h"], ["y"])], 12,
        constants={"ax": shape_const([2])}, acts=("s", "y"), dacts=("h", "y")),
]

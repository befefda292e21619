"""Transpose, Concat, Slice, Pad, Expand, Split (ops/layout.py, shaders/layout.wgsl).

Each op sits in a small graph: input -> 1x1 Conv (or Gemm) -> op -> Flatten (a Reshape to
[N, -1] where the op moved the batch dim) -> Gemm -> LogSoftmax, so one training step exercises
the op's forward, its input gradient and the parameter gradients before it.
"""

import numpy as np

from cases import case
from cases.blocks import chain, conv_pre, floats, gemm_pre, ints
from conftest import f32, head, make_graph, node, rng_for

I64_MAX = 9223372036854775807
I64_MIN = -9223372036854775808
BATCH, CLASSES = 2, 5


def _const(values, dtype="int64"):
    values = list(values)
    return {"dtype": dtype, "shape": [len(values)], "values": values}


def _shape_of(nodes, tensors, x_shape, constants, name, opset):
    from webgpu_trainer.engine.graph import Graph
    graph, _ = make_graph(nodes, tensors, [("input", ["N"] + list(x_shape[1:]))],
                          [(name, [])], constants=constants)
    graph["opset"] = opset
    return Graph(graph).shapes(x_shape[0])[name]


def layout_case(id, tag, nodes, tensors, x, y="y", constants=None, opset=17, acts=("h", "y"),
                dacts=("h", "y"), batch=BATCH, **opts):
    """``nodes`` (whose tested output is ``y``) + the head (a Flatten, or a Reshape to [N, -1]
    where the op moved the batch dim) on the input ``x``."""
    constants = dict(constants or {})
    rng = rng_for(tag, "head", len(nodes))
    shape = _shape_of(nodes, tensors, x.shape, constants, y, opset)
    feats = int(np.prod(shape[1:])) if shape[0] == batch else int(np.prod(shape)) // batch
    if shape[0] == batch:
        tail = [node("Flatten", [y], ["flat"], axis=1)]
    else:  # the op moved the batch dim: any [N, -1] view feeds the head
        constants["flat_shape"] = _const([batch, -1])
        tail = [node("Reshape", [y, "flat_shape"], ["flat"])]
    hn, ht = head("flat", feats, CLASSES, rng)
    labels = rng.integers(0, CLASSES, batch)
    return case(f"layout/{id}", nodes + tail + hn, tensors + ht, x, labels,
                constants=constants, opset=opset, tag=tag, acts=acts, dacts=dacts, **opts)


# ---- Transpose ------------------------------------------------------------------------------

def _is_transpose(perm):
    def check(res, want):
        assert np.array_equal(res["acts"]["y"], np.transpose(res["acts"]["h"], perm))
    return check


def _transpose(perm, chw):
    rng = rng_for("transpose", perm, chw)
    pre, tensors = conv_pre(chw[0], rng)
    attrs = {} if perm is None else {"perm": perm}
    nodes = pre + [node("Transpose", ["h"], ["y"], **attrs)]
    x = f32(rng.standard_normal((BATCH,) + chw))
    name = "default" if perm is None else "".join(map(str, perm))
    return layout_case(f"transpose_{name}_{'x'.join(map(str, chw))}", "Transpose", nodes,
                       tensors, x, checks=(_is_transpose(perm),))


def _transpose_2d_after_gemm():
    rng = rng_for("transpose2d")
    pre, tensors = gemm_pre(7, 33, rng)
    nodes = pre + [node("Transpose", ["h"], ["y"])]
    return layout_case("transpose_2d_after_gemm", "Transpose", nodes, tensors,
                       f32(rng.standard_normal((BATCH, 7))))


# ---- Concat -----------------------------------------------------------------------------------

def _is_concat(axis):
    def check(res, want):
        assert np.array_equal(res["acts"]["y"], np.concatenate(
            [res["acts"]["h"], res["P"]["p"], res["acts"]["h"]], axis=axis))
    return check


def _concat(axis):
    """Concat(h, p, h): a param between two uses of the same activation (its gradient sums
    the two slices)."""
    rng = rng_for("concat", axis)
    c, h, w = 3, 1, 7
    pre, tensors = conv_pre(c, rng)
    pshape = [BATCH, c, h, w]
    pshape[axis] = {1: 1, -1: 33, 2: 2}[axis]
    tensors.append(("p", f32(rng.standard_normal(pshape)), "param"))
    nodes = pre + [node("Concat", ["h", "p", "h"], ["y"], axis=axis)]
    x = f32(rng.standard_normal((BATCH, c, h, w)))
    return layout_case(f"concat_param_and_repeated_activation_axis{axis}", "Concat", nodes,
                       tensors, x, checks=(_is_concat(axis),))


def _concat_constant_and_gemm():
    """Concat of an activation, a constant, a param and the graph input (no gradient) on the
    last axis of a 2-D tensor; then a second Concat of one input (a copy)."""
    rng = rng_for("concat_const")
    pre, tensors = gemm_pre(7, 33, rng)
    tensors.append(("p", f32(rng.standard_normal((BATCH, 1))), "param"))
    consts = {"k": {"dtype": "float32", "shape": [BATCH, 7],
                    "values": [float(v) for v in rng.standard_normal(BATCH * 7)]}}
    nodes = pre + [node("Concat", ["h", "k", "p", "input"], ["c"], axis=-1),
                   node("Concat", ["c"], ["y"], axis=0)]
    return layout_case("concat_constant_and_gemm", "Concat", nodes, tensors,
                       f32(rng.standard_normal((BATCH, 7))), constants=consts,
                       acts=("h", "c", "y"), dacts=("h", "c", "y"))


def _concat_reads(kind):
    """Concats that read an input through an op folded into them (engine/rewrites/concats.py):
    "transpose": h [N, 3, 2, 5] -> Transpose [0, 2, 3, 1] (not its own inverse) beside h
    reshaped to the same [N, 2, 5, 3], on axis 1 (h's gradient sums both parts); "expand": a
    param [5, 1] (rank 2) -> Expand [N, 2, 5, 1] beside h reshaped, on the last axis."""
    rng = rng_for("concat_reads", kind)
    pre, tensors = conv_pre(3, rng)
    consts = {"r": _const([0, 2, 5, 3])}
    if kind == "transpose":
        nodes = [node("Transpose", ["h"], ["t"], perm=[0, 2, 3, 1]),
                 node("Concat", ["t", "hr"], ["y"], axis=1)]
    else:
        tensors.append(("p", f32(rng.standard_normal((5, 1))), "param"))
        consts["e"] = _const([BATCH, 2, 5, 1])
        nodes = [node("Expand", ["p", "e"], ["t"]), node("Concat", ["hr", "t"], ["y"], axis=3)]
    nodes = pre + [node("Reshape", ["h", "r"], ["hr"])] + nodes
    return layout_case(f"concat_reads_{kind}", "Concat", nodes, tensors,
                       f32(rng.standard_normal((BATCH, 3, 2, 5))), constants=consts)


def _concat_one_element():
    """Concat of a one-element param [1] and a [3] param on axis 0, added to h [N, 4]: every
    dim of the first input's copy has size 1 (it once left the copy no dims at all)."""
    rng = rng_for("concat_one")
    pre, tensors = gemm_pre(7, 4, rng)
    tensors += [("pa", f32(rng.standard_normal(1)), "param"),
                ("pb", f32(rng.standard_normal(3)), "param")]
    nodes = pre + [node("Concat", ["pa", "pb"], ["p"], axis=0), node("Add", ["h", "p"], ["y"])]
    return layout_case("concat_one_element", "Concat", nodes, tensors,
                       f32(rng.standard_normal((BATCH, 7))), acts=("h", "p", "y"))


# ---- Slice ------------------------------------------------------------------------------------

SLICES = {
    # id: (starts, ends, axes, steps) on h [2, 7, 5, 33]; None = input absent
    "neg_start_int64max_end": ([-3], [I64_MAX], [3], None),
    "step2_axes_subset": ([1, -30], [I64_MAX, -1], [1, 3], [2, 3]),
    "reverse_int64min": ([-1], [I64_MIN], [2], [-1]),
    "neg_step2_two_axes": ([30, -2], [2, I64_MIN], [-1, 1], [-5, -2]),
    "no_axes_no_steps": ([0, 2], [I64_MAX, 5], None, None),
    "start_clamped_neg_step": ([-10, 100], [I64_MIN, 0], [2, 3], [-1, -7]),
    "one_element": ([4], [5], [1], [1]),
}


def _slice(name):
    starts, ends, axes, steps = SLICES[name]
    rng = rng_for("slice", name)
    pre, tensors = conv_pre(7, rng)
    consts = {"starts": _const(starts), "ends": _const(ends)}
    inputs = ["h", "starts", "ends"]
    if axes is not None or steps is not None:
        inputs.append("axes" if axes is not None else "")
        if axes is not None:
            consts["axes"] = _const(axes)
    if steps is not None:
        consts["steps"] = _const(steps)
        inputs.append("steps")
    nodes = pre + [node("Slice", inputs, ["y"])]
    x = f32(rng.standard_normal((BATCH, 7, 5, 33)))
    return layout_case(f"slice_{name}", "Slice", nodes, tensors, x, constants=consts)


def _slice_opset9_attributes():
    rng = rng_for("slice9")
    pre, tensors = conv_pre(7, rng)
    nodes = pre + [node("Slice", ["h"], ["y"], starts=[-4, 1], ends=[I64_MAX, -1], axes=[3, 1])]
    return layout_case("slice_opset9_attributes", "Slice", nodes, tensors,
                       f32(rng.standard_normal((BATCH, 7, 1, 33))), opset=9)


def _slice_2d_after_gemm():
    rng = rng_for("slice2d")
    pre, tensors = gemm_pre(7, 33, rng)
    consts = {"s": _const([5]), "e": _const([-7]), "a": _const([-1]), "st": _const([3])}
    nodes = pre + [node("Slice", ["h", "s", "e", "a", "st"], ["y"])]
    return layout_case("slice_2d_after_gemm", "Slice", nodes, tensors,
                       f32(rng.standard_normal((BATCH, 7))), constants=consts)


# ---- Pad --------------------------------------------------------------------------------------

PADS = {
    # id: (pads, constant_value or None, axes or None) on h [2, 3, 5, 7]
    "asymmetric_value": ([0, 1, 2, 0, 0, 2, 1, 3], 0.5, None),
    "negative_crop": ([0, 0, -1, 2, 0, 1, 3, -2], -1.25, None),
    "all_negative": ([0, -1, -2, -3, 0, -1, -1, -3], 2.0, None),
    "axes_opset18": ([1, -1, 2, 0], 0.75, [-1, 2]),
    "default_value": ([0, 0, 1, 1, 0, 0, 1, 1], None, None),
}


def _fills(value):
    def check(res, want):  # the constant fills the padded cells
        assert (res["acts"]["y"] == np.float32(value)).sum() > 0
    return check


def _pad(name):
    pads, value, axes = PADS[name]
    rng = rng_for("pad", name)
    pre, tensors = conv_pre(3, rng)
    consts = {"pads": _const(pads)}
    inputs = ["h", "pads"]
    if value is not None or axes is not None:
        inputs.append("value" if value is not None else "")
        if value is not None:
            consts["value"] = {"dtype": "float32", "shape": [], "values": [value]}
    if axes is not None:
        consts["axes"] = _const(axes)
        inputs.append("axes")
    nodes = pre + [node("Pad", inputs, ["y"], mode="constant")]
    x = f32(rng.standard_normal((BATCH, 3, 5, 7)))
    checks = (_fills(value),) if value and max(pads) > 0 else ()
    return layout_case(f"pad_{name}", "Pad", nodes, tensors, x, constants=consts,
                       opset=18 if axes else 17, checks=checks)


PAD_MODES = {
    # id: (mode, pads, axes or None, opset) on h [2, 3, 5, 7]
    "reflect_every_dim": ("reflect", [0, 2, 4, 1, 0, 1, 0, 6], None, 13),
    "edge_beyond_the_dims": ("edge", [0, 0, 3, 0, 0, 4, 0, 9], None, 13),
    "reflect_axes_opset18": ("reflect", [3, 2], [-1], 18),
}


def _pad_mode(name):
    """Pad reflect / edge: the gradient of a cell sums every padded cell that copies it."""
    mode, pads, axes, opset = PAD_MODES[name]
    rng = rng_for("pad_mode", name)
    pre, tensors = conv_pre(3, rng)
    consts = {"pads": _const(pads)}
    inputs = ["h", "pads"] + (["", "axes"] if axes else [])
    if axes:
        consts["axes"] = _const(axes)
    nodes = pre + [node("Pad", inputs, ["y"], mode=mode)]
    x = f32(rng.standard_normal((BATCH, 3, 5, 7)))
    return layout_case(f"pad_{name}", "Pad", nodes, tensors, x, constants=consts, opset=opset)


def _pad_edge_opset2_attributes():
    rng = rng_for("pad_edge2")
    pre, tensors = gemm_pre(7, 5, rng)
    nodes = pre + [node("Pad", ["h"], ["y"], mode="edge", pads=[0, 3, 0, 2])]
    return layout_case("pad_edge_opset2_attributes", "Pad", nodes, tensors,
                       f32(rng.standard_normal((BATCH, 7))), opset=2)


def _pad_opset2_attributes():
    rng = rng_for("pad2")
    pre, tensors = gemm_pre(7, 33, rng)
    nodes = pre + [node("Pad", ["h"], ["y"], mode="constant", pads=[0, -3, 0, 7], value=1.5)]
    return layout_case("pad_opset2_attributes", "Pad", nodes, tensors,
                       f32(rng.standard_normal((BATCH, 7))), opset=2)


def _pad_value_tensor(chunk):
    """constant_value as a trainable float initializer (how exporters may store it): read on
    the device, its gradient = the sum of dy over the padded cells (in parts with chunk 64;
    a patched Builder, so not in the browser)."""
    rng = rng_for("pad_value_tensor")
    pre, tensors = conv_pre(3, rng)
    tensors.append(("pad.value", f32([0.3]).reshape(()), "param"))
    consts = {"pads": _const([0, 1, 2, -1, 0, 0, 1, 3])}
    nodes = pre + [node("Pad", ["h", "pads", "pad.value"], ["y"], mode="constant")]
    patch = {"REDUCE_CHUNK": chunk} if chunk else {}
    return layout_case(f"pad_value_tensor_chunk{chunk}", "Pad", nodes, tensors,
                       f32(rng.standard_normal((BATCH, 3, 5, 7))), constants=consts,
                       patch=patch, browser=not patch)


# ---- Expand -----------------------------------------------------------------------------------

def _expand_3x1_to_2x3x4():
    """h [3, 1] (batch 3) -> Expand [2, 3, 4] -> Transpose [3, 2, 4] (batch first again)."""
    rng = rng_for("expand_basic")
    pre, tensors = gemm_pre(7, 1, rng)
    consts = {"shape": _const([2, 3, 4])}
    nodes = pre + [node("Expand", ["h", "shape"], ["e"]),
                   node("Transpose", ["e"], ["y"], perm=[1, 0, 2])]
    return layout_case("expand_3x1_to_2x3x4", "Expand", nodes, tensors,
                       f32(rng.standard_normal((3, 7))), constants=consts,
                       acts=("h", "e", "y"), dacts=("h", "e", "y"), batch=3)


def _expand_middle_dim_bidirectional():
    """h [2, 7, 1, 33] -> Expand with shape [1, 1, 5, 1] (smaller than h elsewhere)."""
    rng = rng_for("expand_mid")
    pre, tensors = conv_pre(7, rng)
    consts = {"shape": _const([1, 1, 5, 1])}
    nodes = pre + [node("Expand", ["h", "shape"], ["y"])]
    return layout_case("expand_middle_dim_bidirectional", "Expand", nodes, tensors,
                       f32(rng.standard_normal((BATCH, 7, 1, 33))), constants=consts)


def _expand_param_then_concat():
    """A param [1, 7] expanded over the batch and concatenated with the activation."""
    rng = rng_for("expand_param")
    pre, tensors = gemm_pre(5, 7, rng)
    tensors.append(("p", f32(rng.standard_normal((1, 7))), "param"))
    consts = {"shape": _const([BATCH, 7])}
    nodes = pre + [node("Expand", ["p", "shape"], ["e"]),
                   node("Concat", ["h", "e"], ["y"], axis=1)]
    return layout_case("expand_param_then_concat", "Expand", nodes, tensors,
                       f32(rng.standard_normal((BATCH, 5))), constants=consts,
                       acts=("h", "e", "y"))


def _expand_long_sum_split():
    """h [2, 3] viewed [2, 3, 1] -> Expand [1, 1, 200]: 6 sums of 200 values (split-K)."""
    rng = rng_for("expand_long")
    pre, tensors = gemm_pre(7, 3, rng)
    consts = {"v": _const([BATCH, 3, 1]), "shape": _const([1, 1, 200])}
    nodes = pre + [node("Reshape", ["h", "v"], ["hv"]),
                   node("Expand", ["hv", "shape"], ["y"])]
    return layout_case("expand_long_sum_split", "Expand", nodes, tensors,
                       f32(rng.standard_normal((BATCH, 7))), constants=consts)


def _expand_lanes_class_token():
    """A class token: param [1, 1, 6] expanded over a batch of 20 and concatenated before the
    activation's 3 rows ([20, 4, 6]). Its gradient sums 20 terms for each of 6 outputs: on GPU
    adapters (the patch) ``sum_expanded_lanes`` with 4 lanes of 5 terms (the four-sum loop once,
    then the tail)."""
    rng = rng_for("expand_lanes_cls")
    batch = 20
    pre, tensors = gemm_pre(7, 18, rng)
    tensors.append(("cls", f32(rng.standard_normal((1, 1, 6))), "param"))
    consts = {"v": _const([batch, 3, 6]), "shape": _const([batch, 1, 6])}
    nodes = pre + [node("Reshape", ["h", "v"], ["hv"]),
                   node("Expand", ["cls", "shape"], ["e"]),
                   node("Concat", ["e", "hv"], ["y"], axis=1)]
    return layout_case("expand_lanes_class_token", "Expand", nodes, tensors,
                       f32(rng.standard_normal((batch, 7))), constants=consts,
                       acts=("h", "e", "y"), batch=batch, patch={"TILED": True},
                       browser=False)  # a Builder patch (cases.Case)


def _expand_lanes(name, view, shape):
    """h [2, 6] viewed as ``view`` -> Expand ``shape`` on GPU adapters (the patch):
    ``sum_expanded_lanes``. "long": 6 sums of 200 terms (32 lanes); "two_dims": 6 sums over
    two reduced dims that the kept dims separate (red_rank 2: [2, 1, 3, 1, 2] -> [2, 6, 3, 5,
    2], 30 terms, 4 lanes)."""
    rng = rng_for("expand_lanes", name)
    pre, tensors = gemm_pre(7, 6, rng)
    consts = {"v": _const(view), "shape": _const(shape)}
    nodes = pre + [node("Reshape", ["h", "v"], ["hv"]),
                   node("Expand", ["hv", "shape"], ["y"])]
    return layout_case(f"expand_lanes_{name}", "Expand", nodes, tensors,
                       f32(rng.standard_normal((BATCH, 7))), constants=consts,
                       patch={"TILED": True}, browser=False)  # a Builder patch (cases.Case)


# ---- composites (the browser's first parity list) ---------------------------------------------

def _transpose_slice_pad_concat():
    rng = rng_for("transpose_slice_pad_concat")
    c, hw = 3, 7
    return chain(rng, "layout/chain_transpose_slice_pad_concat", c, hw, [
        node("Transpose", ["pre"], ["t"], perm=[0, 3, 1, 2]),
        node("Slice", ["t", "st", "en", "ax", "sp"], ["sl"]),
        node("Pad", ["sl", "pads", "pv"], ["pd"], mode="constant"),
        node("Concat", ["pd", "pd"], ["body_out"], axis=1)], 6 * c * 5,
        constants={"st": ints(-1, 0), "en": ints(-(2 ** 63), I64_MAX), "ax": ints(1, 3),
                   "sp": ints(-2, 2), "pads": ints(0, 0, 0, 1, 0, -1, 0, 0),
                   "pv": floats(0.5, shape=[])},
        tag="Concat", acts=("t", "sl", "pd", "body_out"), dacts=("pre", "t", "sl", "pd"))


def _slice_steps():
    """Slice's gradient maps dx index j to (j - start) / step: negative for j < start, and a
    negative step (GLSL's % of negatives is undefined: this failed on OpenGL)."""
    rng = rng_for("slice_steps")
    c, hw = 3, 7
    return chain(rng, "layout/chain_slice_steps", c, hw, [
        node("Slice", ["pre", "st2", "en2", "ax2", "sp2"], ["body_out"])], c * 3 * 3,
        constants={"st2": ints(1, 5), "en2": ints(7, 0), "ax2": ints(2, 3), "sp2": ints(2, -2)},
        tag="Slice", acts=("body_out",), dacts=("pre", "body_out"))


def _expand_after_reduce():
    rng = rng_for("expand_reduce")
    c, hw = 3, 7
    return chain(rng, "layout/chain_expand_after_reduce", c, hw, [
        node("ReduceMean", ["pre"], ["rm"], axes=[2, 3], keepdims=1),
        node("Expand", ["rm", "eshape"], ["e"]),
        node("ReduceMax", ["pre"], ["mx"], axes=[1], keepdims=1),
        node("Mul", ["e", "mx"], ["body_out"])], c * hw * hw,
        constants={"eshape": ints(1, c, hw, hw)}, opset=13, tag="Expand",
        acts=("rm", "e", "mx", "body_out"), dacts=("pre", "rm", "e", "mx"))


# ---- Split ------------------------------------------------------------------------------------

def _split(id, inputs, outs, attrs, uses, shape, opset, constants=None):
    """h ``shape`` -> Split -> Concat of the outputs ``uses`` (in that order) -> y; an output
    left out of ``uses`` has no consumer (its part of dh is zero)."""
    rng = rng_for("split", id)
    if len(shape) == 4:
        pre, tensors = conv_pre(shape[1], rng)
        x = f32(rng.standard_normal((BATCH,) + tuple(shape[1:])))
    else:
        pre, tensors = gemm_pre(5, shape[1], rng)
        x = f32(rng.standard_normal((BATCH, 5)))
    nodes = pre + [node("Split", ["h"] + inputs, outs, **attrs),
                   node("Concat", uses, ["y"], axis=attrs.get("axis", 0))]
    checks = ()
    if id == "input_unused_middle":  # b (channels 1-3) has no consumer: its gradient is 0
        checks = (lambda res, want: np.testing.assert_array_equal(res["dacts"]["h"][:, 1:4],
                                                                  0),)
    return layout_case(f"split_{id}", "Split", nodes, tensors, x, constants=constants,
                       opset=opset, acts=("h",) + tuple(uses), dacts=("h",) + tuple(uses),
                       checks=checks)


SPLITS = [  # the input form (opset 13), an unused output; the attribute form (opset 11);
    # num_outputs with a smaller last part (opset 18); equal parts of the outputs' count
    ("input_unused_middle", ["sp"], ["a", "b", "c"], {"axis": 1}, ["c", "a"], (BATCH, 6, 3, 4),
     13, {"sp": _const([1, 3, 2])}),
    ("attribute_last_axis", [], ["a", "b"], {"axis": -1, "split": [2, 5]}, ["b", "a", "b"],
     (BATCH, 7), 11, None),
    ("num_outputs_uneven", [], ["a", "b", "c"], {"axis": 3, "num_outputs": 3}, ["c", "b", "a"],
     (BATCH, 3, 2, 7), 18, None),
    ("equal_parts_axis2", [], ["a", "b"], {"axis": 2}, ["b"], (BATCH, 2, 6, 3), 13, None),
]


TRANSPOSE = [_transpose(perm, chw) for chw in [(3, 7, 33), (7, 1, 5)]
             for perm in [[0, 2, 3, 1], [0, 3, 1, 2], [3, 1, 0, 2], [1, 0, 2, 3], [2, 3, 0, 1],
                          [0, 1, 2, 3], None]]
CASES = TRANSPOSE + [_transpose_2d_after_gemm()] + [_concat(a) for a in (1, -1, 2)] + \
    [_concat_constant_and_gemm(), _concat_one_element(), _concat_reads("transpose"),
     _concat_reads("expand")] + [_slice(name) for name in SLICES] + \
    [_slice_opset9_attributes(), _slice_2d_after_gemm()] + [_pad(name) for name in PADS] + \
    [_pad_opset2_attributes(), _pad_value_tensor(None), _pad_value_tensor(64),
     _expand_3x1_to_2x3x4(), _expand_middle_dim_bidirectional(), _expand_param_then_concat(),
     _expand_long_sum_split(), _expand_lanes_class_token(),
     _expand_lanes("long", [BATCH, 6, 1], [1, 1, 200]),
     _expand_lanes("two_dims", [BATCH, 1, 3, 1, 2], [BATCH, 6, 3, 5, 2]),
     _transpose_slice_pad_concat(), _slice_steps(),
     _expand_after_reduce()] + [_split(*spec) for spec in SPLITS] + \
    [_pad_mode(name) for name in PAD_MODES] + [_pad_edge_opset2_attributes()]

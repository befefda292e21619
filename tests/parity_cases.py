"""Op and optimizer cases for the browser-vs-native parity test (tests/test_parity.py).

Each builder returns a case dict of ``webgpu_trainer.engine.parity`` (graph, base64 weights, input,
labels). Graphs reuse the op tests' tiny-model helpers; every op family the engine registers
should appear in at least one case.
"""

import numpy as np

from conftest import f32, head, make_graph, node, rng_for
from webgpu_trainer.engine.parity import b64

CLASSES = 5
BATCH = 4


def case(name, nodes, tensors, in_shape, x, labels=None, optimizer=None, steps=1, train=True,
         constants=None, seed=3, loss=None, opset=17):
    graph, blob = make_graph(nodes, tensors, [("input", ["N"] + list(in_shape))],
                             [(nodes[-1]["outputs"][0], ["N", CLASSES])], constants=constants,
                             name=name)
    graph["opset"] = opset
    if labels is None:
        labels = np.arange(len(x)) % CLASSES
    return {"name": name, "graph": graph, "weights": b64(blob), "x": b64(f32(x).tobytes()),
            "labels": b64(np.asarray(labels, "<u4").tobytes()), "batch": len(x),
            "steps": steps, "optimizer": optimizer, "train": train, "seed": seed, "loss": loss}


def _conv_bn_case(rng, name, train=True):
    c, k = 2, 6
    x = rng.standard_normal((BATCH, c, 7, 7))
    nodes = [node("Conv", ["input", "cw", "cb"], ["c1"], kernel_shape=[3, 3], pads=[1, 0, 1, 1],
                  strides=[2, 1], dilations=[1, 1], group=1),
             node("BatchNormalization", ["c1", "g", "bt", "rm", "rv"], ["b1"], epsilon=1e-5,
                  momentum=0.9),
             node("Relu", ["b1"], ["r1"]),
             node("Dropout", ["r1"], ["d1"], ratio=0.25),
             node("Flatten", ["d1"], ["flat"], axis=1)]
    hn, ht = head("flat", k * 4 * 6, CLASSES, rng)
    tensors = [("cw", f32(rng.standard_normal((k, c, 3, 3)) / 4), "param"),
               ("cb", f32(rng.standard_normal(k) * 0.1), "param"),
               ("g", f32(1 + 0.1 * rng.standard_normal(k)), "param"),
               ("bt", f32(0.1 * rng.standard_normal(k)), "param"),
               ("rm", f32(0.1 * rng.standard_normal(k)), "buffer"),
               ("rv", f32(1 + 0.1 * rng.random(k)), "buffer")] + ht
    out = case(name, nodes + hn, tensors, [c, 7, 7], x, train=train)
    out["init_seed"] = 11  # PyTorch's default init on the GPU (Plan.init_weights) first
    return out


def _mlp(rng, name, optimizer, steps):
    f, hdim = 7, 33
    x = rng.standard_normal((BATCH, f))
    nodes = [node("Gemm", ["input", "w1", "b1"], ["h"], transB=1), node("Relu", ["h"], ["r"])]
    hn, ht = head("r", hdim, CLASSES, rng)
    tensors = [("w1", f32(rng.standard_normal((hdim, f)) / np.sqrt(f)), "param"),
               ("b1", f32(rng.standard_normal(hdim) * 0.1), "param")] + ht
    return case(name, nodes + hn, tensors, [f], x, optimizer=optimizer, steps=steps)


def _tied(rng):
    f = 6
    nodes = [node("Gemm", ["input", "w"], ["h"], transB=1),
             node("Gemm", ["h", "w"], ["logits"], transB=1),
             node("Gemm", ["logits", "p", "pb"], ["z"], transB=1),
             node("LogSoftmax", ["z"], ["output"], axis=-1)]
    tensors = [("w", f32(rng.standard_normal((f, f)) / 2), "param"),
               ("p", f32(rng.standard_normal((CLASSES, f))), "param"),
               ("pb", f32(rng.standard_normal(CLASSES) * 0.1), "param")]
    return case("tied_weight_accumulation", nodes, tensors, [f], rng.standard_normal((BATCH, f)))


def _ints(*values):
    return {"dtype": "int64", "shape": [len(values)], "values": list(values)}


def _floats(*values, shape=None):
    return {"dtype": "float32", "shape": [len(values)] if shape is None else shape,
            "values": list(values)}


def _chain(rng, name, c, hw, body, feat, extra=(), constants=None, loss=None, opset=17):
    """input [N, c, hw, hw] -> 1x1 Conv (so the input gradient of ``body`` flows) -> body
    (nodes from "pre" to "body_out") -> Reshape [N, feat] -> Gemm -> LogSoftmax."""
    x = rng.standard_normal((BATCH, c, hw, hw))
    nodes = [node("Conv", ["input", "pre.w", "pre.b"], ["pre"], kernel_shape=[1, 1],
                  pads=[0, 0, 0, 0], strides=[1, 1], dilations=[1, 1], group=1)] + body + [
        node("Reshape", ["body_out", "flat_shape"], ["flat"])]
    hn, ht = head("flat", feat, CLASSES, rng)
    tensors = [("pre.w", f32(rng.standard_normal((c, c, 1, 1)) / np.sqrt(c)), "param"),
               ("pre.b", f32(rng.standard_normal(c) * 0.1), "param")] + list(extra) + ht
    consts = {"flat_shape": _ints(0, -1), **(constants or {})}
    return case(name, nodes + hn, tensors, [c, hw, hw], x, constants=consts, loss=loss,
                opset=opset)


def op_cases(rng) -> list:
    """One case per op family beyond SeedNet's (pools, binary, layout, norms, reductions)."""
    c, hw = 3, 7
    out = []
    out.append(_chain(rng, "maxpool_ceil_avgpool_pad", c, hw, [
        node("MaxPool", ["pre"], ["m"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1],
             ceil_mode=1),
        node("AveragePool", ["m"], ["body_out"], kernel_shape=[2, 2], strides=[1, 1],
             pads=[1, 1, 0, 0], count_include_pad=1)], c * 4 * 4))
    out.append(_chain(rng, "global_pools", c, hw, [
        node("GlobalAveragePool", ["pre"], ["ga"]), node("GlobalMaxPool", ["pre"], ["gm"]),
        node("Add", ["ga", "gm"], ["body_out"])], c))
    out.append(_chain(rng, "binary_broadcast_residual", c, hw, [
        node("Mul", ["pre", "scale"], ["s"]), node("Div", ["s", "two"], ["d"]),
        node("Pow", ["d", "two"], ["p"]), node("Sub", ["p", "pre"], ["q"]),
        node("Add", ["q", "pre"], ["body_out"])], c * hw * hw,
        extra=[("scale", f32(rng.standard_normal((c, 1, 1))), "param")],
        constants={"two": _floats(2.0, shape=[])}))
    out.append(_chain(rng, "transpose_slice_pad_concat", c, hw, [
        node("Transpose", ["pre"], ["t"], perm=[0, 3, 1, 2]),
        node("Slice", ["t", "st", "en", "ax", "sp"], ["sl"]),
        node("Pad", ["sl", "pads", "pv"], ["pd"], mode="constant"),
        node("Concat", ["pd", "pd"], ["body_out"], axis=1)], 6 * c * 5,
        constants={"st": _ints(-1, 0), "en": _ints(-(2 ** 63), 9223372036854775807),
                   "ax": _ints(1, 3), "sp": _ints(-2, 2), "pads": _ints(0, 0, 0, 1, 0, -1, 0, 0),
                   "pv": _floats(0.5, shape=[])}))
    # Slice's gradient maps dx index j to (j - start) / step: negative for j < start, and a
    # negative step (GLSL's % of negatives is undefined: this failed on OpenGL).
    out.append(_chain(rng, "slice_steps", c, hw, [
        node("Slice", ["pre", "st2", "en2", "ax2", "sp2"], ["body_out"])], c * 3 * 3,
        constants={"st2": _ints(1, 5), "en2": _ints(7, 0), "ax2": _ints(2, 3),
                   "sp2": _ints(2, -2)}))
    out.append(_chain(rng, "expand_reduce", c, hw, [
        node("ReduceMean", ["pre"], ["rm"], axes=[2, 3], keepdims=1),
        node("Expand", ["rm", "eshape"], ["e"]), node("ReduceMax", ["pre"], ["mx"], axes=[1],
                                                      keepdims=1),
        node("Mul", ["e", "mx"], ["body_out"])], c * hw * hw,
        constants={"eshape": _ints(1, c, hw, hw)}, opset=13))
    out.append(_chain(rng, "softmax_layernorm", c, hw, [
        node("Softmax", ["pre"], ["sm"], axis=1),
        node("LayerNormalization", ["sm", "ln.g", "ln.b"], ["body_out"], axis=-2,
             epsilon=1e-5)], c * hw * hw,
        extra=[("ln.g", f32(1 + 0.1 * rng.standard_normal((hw, hw))), "param"),
               ("ln.b", f32(0.1 * rng.standard_normal((hw, hw))), "param")]))
    unary = [("LeakyRelu", {"alpha": 0.1}), ("Sigmoid", {}), ("Tanh", {}),
             ("Gelu", {"approximate": "tanh"}), ("Erf", {}), ("Exp", {}), ("Abs", {}),
             ("Neg", {}), ("Softplus", {}), ("Elu", {}), ("HardSigmoid", {}),
             ("HardSwish", {})]
    body, prev = [], "pre"
    for k, (op, attrs) in enumerate(unary):
        out_name = "body_out" if k == len(unary) - 1 else f"u{k}"
        body.append(node(op, [prev], [out_name], **attrs))
        prev = out_name
    out.append(_chain(rng, "unary_chain", c, hw, body, c * hw * hw))
    out.append(_chain(rng, "clip_sqrt_log_reciprocal", c, hw, [
        node("Clip", ["pre", "lo", "hi"], ["cl"]), node("Sqrt", ["cl"], ["sq"]),
        node("Log", ["sq"], ["lg"]), node("Reciprocal", ["cl"], ["rc"]),
        node("Add", ["lg", "rc"], ["body_out"])], c * hw * hw,
        constants={"lo": _floats(0.5, shape=[]), "hi": _floats(2.0, shape=[])}))
    out.append(_chain(rng, "matmul_batched_weight", c, hw, [
        node("MatMul", ["pre", "mm.w"], ["body_out"])], c * hw * 5,
        extra=[("mm.w", f32(rng.standard_normal((hw, 5)) / np.sqrt(hw)), "param")]))
    for loss in ({"loss": "cross_entropy", "label_smoothing": 0.1,
                  "weight": [1.0, 2.0, 0.5, 1.5, 1.0]},
                 {"loss": "mse", "reduction": "sum"}, {"loss": "bce_with_logits"}):
        f = 6
        nodes = [node("Gemm", ["input", "w", "b"], ["logits"], transB=1)]
        tensors = [("w", f32(rng.standard_normal((CLASSES, f))), "param"),
                   ("b", f32(rng.standard_normal(CLASSES) * 0.1), "param")]
        out.append(case(f"loss_{loss['loss']}", nodes, tensors, [f],
                        rng.standard_normal((BATCH, f)), loss=loss))
    return out


OPTIMIZERS = [
    {"name": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3},
    {"name": "sgd", "lr": 0.05, "momentum": 0.5, "dampening": 0.1},
    {"name": "adam", "lr": 0.01, "clip_grad_norm": 0.5},
    {"name": "adamw", "lr": 0.01, "amsgrad": True},
    {"name": "adagrad", "lr": 0.1, "lr_decay": 0.01},
    {"name": "rmsprop", "lr": 0.01, "centered": True, "momentum": 0.9},
    {"name": "adadelta", "lr": 1.0, "weight_decay": 1e-2},
]


def all_cases() -> list:
    """Every parity case (op families in training and eval mode, gradient accumulation, each
    optimizer for 5 steps)."""
    rng = rng_for("parity")
    cases = [_conv_bn_case(rng, "conv_bn_relu_dropout_train"),
             _conv_bn_case(rng, "conv_bn_relu_dropout_eval", train=False),
             _tied(rng)] + op_cases(rng)
    for k, opt in enumerate(OPTIMIZERS):
        cases.append(_mlp(rng, f"optim_{k}_{opt['name']}", opt, steps=5))
    return cases

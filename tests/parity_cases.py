"""Op and optimizer cases for the browser-vs-native parity test (tests/test_parity.py).

Each builder returns a case dict of ``webgpu_trainer.parity`` (graph, base64 weights, input,
labels). Graphs reuse the op tests' tiny-model helpers; every op family the engine registers
should appear in at least one case.
"""

import numpy as np

from conftest import f32, head, make_graph, node, rng_for
from webgpu_trainer.parity import b64

CLASSES = 5
BATCH = 4


def case(name, nodes, tensors, in_shape, x, labels=None, optimizer=None, steps=1, train=True,
         constants=None, seed=3):
    graph, blob = make_graph(nodes, tensors, [("input", ["N"] + list(in_shape))],
                             [(nodes[-1]["outputs"][0], ["N", CLASSES])], constants=constants,
                             name=name)
    if labels is None:
        labels = np.arange(len(x)) % CLASSES
    return {"name": name, "graph": graph, "weights": b64(blob), "x": b64(f32(x).tobytes()),
            "labels": b64(np.asarray(labels, "<u4").tobytes()), "batch": len(x),
            "steps": steps, "optimizer": optimizer, "train": train, "seed": seed}


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
    return case(name, nodes + hn, tensors, [c, 7, 7], x, train=train)


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
             _tied(rng)]
    for k, opt in enumerate(OPTIMIZERS):
        cases.append(_mlp(rng, f"optim_{k}_{opt['name']}", opt, steps=5))
    return cases

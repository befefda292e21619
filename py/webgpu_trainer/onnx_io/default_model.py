"""A default model for any dataset (issue 18): ``make_default_model(sample_shape, classes,
seed)`` -> ONNX bytes, built with onnx.helper (no torch at run time).

Images ``[C, H, W]`` get a SeedNet-like convolutional net, tables ``[F]`` an MLP
(``architecture`` lists the layers; scripts/make_default_models.py builds the same layers as a
torch module and exports the shipped ``models/seednet-*.onnx``). The graph is what
``torch.onnx.export`` writes for SeedNet in training mode (scripts/make_seednet.py): Conv /
Gemm (transB=1) named ``conv1.weight`` ..., BatchNormalization with ``training_mode=1`` and its
running statistics as outputs, Dropout with constant ``ratio`` and ``training_mode`` inputs,
a final LogSoftmax; opset 18, input ``input`` [N, ...], output ``output`` [N, K], dynamic batch
``N``. Weights and biases start as torch's defaults (``kaiming_uniform_(a=sqrt(5))``: U(+-1 /
sqrt(fan_in)) for both), drawn by numpy's ``default_rng(seed)``; BatchNorm scale 1, bias 0,
running mean 0, running variance 1.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 18
CHANNELS = (16, 32)  # the two conv blocks' output channels (3x3, padding 1, ReLU, MaxPool 2)
MAX_FEATURES = 4096  # more MaxPools after the blocks while the flattened size exceeds this
HIDDEN = 64  # units of the hidden Linear layers
DROPOUT = 0.3  # as SeedNet's
MAX_CLASSES = 256  # the manifest's limit (DATASETS.md)


def architecture(sample_shape, classes: int) -> list[tuple]:
    """The layers of the default model for samples ``sample_shape`` ([C, H, W] or [F]) and
    ``classes`` classes, in order: ``("conv", name, in, out)`` (3x3, padding 1), ``("relu",)``,
    ``("maxpool",)`` (2x2, stride 2), ``("batchnorm", name, channels)``, ``("flatten",)``,
    ``("linear", name, in, out)``, ``("dropout", ratio)``, ``("logsoftmax",)``. Raises ValueError
    naming a shape or class count it cannot serve."""
    shape = [int(d) for d in sample_shape]
    if len(shape) not in (1, 3) or min(shape, default=0) < 1 or \
            any(d != s for d, s in zip(shape, sample_shape)):
        raise ValueError(f"sample shape {list(sample_shape)}: a default model needs images "
                         "[C, H, W] or table rows [F] of positive sizes")
    if not 2 <= int(classes) <= MAX_CLASSES or int(classes) != classes:
        raise ValueError(f"classes {classes!r}: a default model needs 2..{MAX_CLASSES} classes")
    k = int(classes)
    if len(shape) == 1:
        return [("linear", "fc1", shape[0], HIDDEN), ("relu",), ("linear", "fc2", HIDDEN, HIDDEN),
                ("relu",), ("linear", "fc3", HIDDEN, k), ("logsoftmax",)]
    c, h, w = shape
    layers = []
    for i, out in enumerate(CHANNELS, 1):
        layers += [("conv", f"conv{i}", c, out), ("relu",)]
        c = out
        if min(h, w) >= 4:
            layers.append(("maxpool",))
            h, w = h // 2, w // 2
    while c * h * w > MAX_FEATURES and min(h, w) >= 4:
        layers.append(("maxpool",))
        h, w = h // 2, w // 2
    return layers + [("batchnorm", "norm1", c), ("flatten",), ("linear", "fc1", c * h * w, HIDDEN),
                     ("relu",), ("dropout", DROPOUT), ("linear", "fc2", HIDDEN, k),
                     ("batchnorm", "norm2", k), ("logsoftmax",)]


def multiply_adds(sample_shape, classes: int) -> int:
    """Multiply-adds of one sample's forward through the convolutions and Linear layers."""
    shape, total = list(sample_shape), 0
    h, w = (shape[1], shape[2]) if len(shape) == 3 else (1, 1)
    for layer in architecture(sample_shape, classes):
        if layer[0] == "conv":
            total += h * w * layer[3] * layer[2] * 9
        elif layer[0] == "maxpool":
            h, w = h // 2, w // 2
        elif layer[0] == "linear":
            total += layer[2] * layer[3]
    return total


def _uniform(rng, bound: float, shape) -> np.ndarray:
    return rng.uniform(-bound, bound, shape).astype(np.float32)


def _params(layer, rng) -> dict:
    """The initializers of one layer (torch's state_dict names and defaults)."""
    kind, name = layer[0], layer[1]
    if kind == "batchnorm":
        n = layer[2]
        return {f"{name}.weight": np.ones(n, np.float32), f"{name}.bias": np.zeros(n, np.float32),
                f"{name}.running_mean": np.zeros(n, np.float32),
                f"{name}.running_var": np.ones(n, np.float32)}
    fan_in, out = (layer[2] * 9, layer[3]) if kind == "conv" else (layer[2], layer[3])
    shape = (out, layer[2], 3, 3) if kind == "conv" else (out, layer[2])
    bound = 1 / math.sqrt(fan_in)
    return {f"{name}.weight": _uniform(rng, bound, shape), f"{name}.bias": _uniform(rng, bound,
                                                                                      out)}


def _node(layer, x: str, i: int, nodes: list) -> str:
    """Append the node(s) of ``layer`` reading ``x`` (the ``i``-th layer); returns its output."""
    kind, y = layer[0], f"/{layer[0]}_{i}/output_0"
    if kind == "conv":
        nodes.append(helper.make_node("Conv", [x, f"{layer[1]}.weight", f"{layer[1]}.bias"], [y],
                                      kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1],
                                      dilations=[1, 1], group=1, name=f"/{layer[1]}/Conv"))
    elif kind == "linear":
        nodes.append(helper.make_node("Gemm", [x, f"{layer[1]}.weight", f"{layer[1]}.bias"], [y],
                                      alpha=1.0, beta=1.0, transB=1, name=f"/{layer[1]}/Gemm"))
    elif kind == "batchnorm":
        n = layer[1]
        nodes.append(helper.make_node(
            "BatchNormalization", [x] + [f"{n}.{p}" for p in ("weight", "bias", "running_mean",
                                                                "running_var")],
            [y, f"/{n}/running_mean", f"/{n}/running_var"], epsilon=1e-5, momentum=0.9,
            training_mode=1, name=f"/{n}/BatchNormalization"))
    elif kind == "dropout":
        ratio, mode = f"/dropout_{i}/ratio", f"/dropout_{i}/training_mode"
        nodes += [helper.make_node("Constant", [], [ratio], value=numpy_helper.from_array(
                      np.array(layer[1], np.float32)), name=f"/dropout_{i}/Constant"),
                  helper.make_node("Constant", [], [mode], value=numpy_helper.from_array(
                      np.array(True)), name=f"/dropout_{i}/Constant_1"),
                  helper.make_node("Dropout", [x, ratio, mode], [y], name=f"/dropout_{i}/Dropout")]
    else:
        pool = {"ceil_mode": 0, "dilations": [1, 1], "kernel_shape": [2, 2],
                "pads": [0, 0, 0, 0], "strides": [2, 2]}
        op, attrs = {"relu": ("Relu", {}), "maxpool": ("MaxPool", pool),
                     "flatten": ("Flatten", {"axis": 1}),
                     "logsoftmax": ("LogSoftmax", {"axis": 1})}[kind]
        nodes.append(helper.make_node(op, [x], [y], name=f"/{op}_{i}", **attrs))
    return y


def make_default_model(sample_shape, classes: int, seed: int = 0) -> bytes:
    """The default model (``architecture``) for samples ``sample_shape`` and ``classes``
    classes as a serialised ONNX ModelProto (opset 18, checked by ``onnx.checker``), its
    weights drawn from ``seed``. Raises ValueError for a shape or class count it cannot
    serve."""
    layers = architecture(sample_shape, classes)
    rng = np.random.default_rng(seed)
    inits, nodes, x = {}, [], "input"
    for i, layer in enumerate(layers):
        if layer[0] in ("conv", "linear", "batchnorm"):
            inits.update(_params(layer, rng))
        x = _node(layer, x, i, nodes)
    nodes[-1].output[0] = "output"
    kind = "image" if len(sample_shape) == 3 else "table"
    graph = helper.make_graph(
        nodes, "default_model",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                       ["N"] + [int(d) for d in sample_shape])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", int(classes)])],
        [numpy_helper.from_array(a, name) for name, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="webgpu-trainer", ir_version=8)
    model.doc_string = (f"default {kind} model for {list(sample_shape)} x {classes} classes, "
                        f"seed {seed}: made by onnx_io/default_model.py")
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString()

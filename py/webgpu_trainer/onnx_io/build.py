"""A model from the page's layer list (``build_spec``): ``build_model(spec, input_shape,
classes, seed) -> (onnx bytes, Checked)``, written with onnx.helper, that goes through the
same import as an upload (so the summary, training, export and live views are the usual ones).

The graph is what ``torch.onnx.export`` writes for the same ``nn.Sequential`` in training mode
(the layers as a module ``layers``: parameters ``layers.3.weight``, a residual block's
``layers.5.layers.0.weight``): Conv, Gemm (transB=1), MaxPool / AveragePool, GlobalAveragePool,
Flatten, BatchNormalization with ``training_mode=1`` and its running statistics as outputs,
Dropout with constant ``ratio`` / ``training_mode`` inputs, Relu / LeakyRelu / Gelu / Tanh /
Sigmoid / Elu, Add for a residual block. Opset 18 (20 when a GELU needs the Gelu op); input
``input`` [N, ...], output ``output`` [N, classes]; no softmax (the loss is then
CrossEntropyLoss). Weights start as torch's defaults (U(+-1/sqrt(fan_in)), BatchNorm 1 / 0 / 0 /
1) from numpy's ``default_rng(seed)``; a run re-draws them from its own seed. The normalised
spec is kept in ``metadata_props`` under ``webgpu-trainer.layers``.
"""
from __future__ import annotations

import json
import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .build_spec import checked, model_name

SPEC_KEY = "webgpu-trainer.layers"
ONNX_OPS = {"relu": "Relu", "gelu": "Gelu", "tanh": "Tanh", "sigmoid": "Sigmoid", "elu": "Elu",
            "leaky_relu": "LeakyRelu", "global_avgpool": "GlobalAveragePool"}


class _Writer:
    """Nodes and initializers, appended layer by layer."""

    def __init__(self, rng):
        self.rng, self.nodes, self.inits, self.count = rng, [], [], 0

    def out(self, name: str) -> str:
        self.count += 1
        return f"/{name}/output_{self.count}"

    def uniform(self, name, bound, shape):
        a = self.rng.uniform(-bound, bound, shape).astype(np.float32)
        self.inits.append(numpy_helper.from_array(a, name))

    def fill(self, name, value, n):
        self.inits.append(numpy_helper.from_array(np.full(n, value, np.float32), name))

    def node(self, op, ins, name, **attrs) -> str:
        y = self.out(name)
        self.nodes.append(helper.make_node(op, ins, [y], name=f"/{name}/{op}", **attrs))
        return y


def _layer(wr: _Writer, f: dict, x: str, shape: list, path: str, classes) -> tuple[str, list]:
    """Append one layer (fields ``f``) reading ``x`` of ``shape``; returns (output, shape)."""
    op, p = f["op"], path
    if op == "residual":
        y, s = x, shape
        for j, inner in enumerate(f["layers"]):
            y, s = _layer(wr, inner, y, s, f"{path}.layers.{j}", classes)
        return wr.node("Add", [x, y], path), shape
    if op in ("conv", "linear"):
        width = f.get("out_channels", f.get("out_features"))
        width = classes if width == "classes" else width
        k = f.get("kernel_size", 1)
        fan_in = shape[0] * k * k
        wshape = (width, shape[0], k, k) if op == "conv" else (width, shape[0])
        wr.uniform(f"{p}.weight", 1 / math.sqrt(fan_in), wshape)
        wr.uniform(f"{p}.bias", 1 / math.sqrt(fan_in), (width,))
        ins = [x, f"{p}.weight", f"{p}.bias"]
        if op == "linear":
            return wr.node("Gemm", ins, p, alpha=1.0, beta=1.0, transB=1), [width]
        s, pad = f["stride"], f["padding"]
        y = wr.node("Conv", ins, p, kernel_shape=[k, k], pads=[pad] * 4, strides=[s, s],
                    dilations=[1, 1], group=1)
        return y, [width] + [(d + 2 * pad - k) // s + 1 for d in shape[1:]]
    if op in ("maxpool", "avgpool"):
        k, s = f["kernel_size"], f["stride"]
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [0] * 4, "ceil_mode": 0}
        if op == "maxpool":
            attrs["dilations"] = [1, 1]
        else:
            attrs["count_include_pad"] = 1
        y = wr.node("MaxPool" if op == "maxpool" else "AveragePool", [x], p, **attrs)
        return y, [shape[0]] + [(d - k) // s + 1 for d in shape[1:]]
    if op == "flatten":
        return wr.node("Flatten", [x], p, axis=1), [math.prod(shape)]
    if op == "batchnorm":
        c = shape[0]
        wr.fill(f"{p}.weight", 1, c)
        wr.fill(f"{p}.bias", 0, c)
        wr.fill(f"{p}.running_mean", 0, c)
        wr.fill(f"{p}.running_var", 1, c)
        y = wr.out(p)
        wr.nodes.append(helper.make_node(
            "BatchNormalization", [x] + [f"{p}.{n}" for n in ("weight", "bias", "running_mean",
                                                             "running_var")],
            [y, f"/{p}/running_mean", f"/{p}/running_var"], epsilon=1e-5, momentum=0.9,
            training_mode=1, name=f"/{p}/BatchNormalization"))
        return y, shape
    if op == "dropout":
        ratio, mode = f"/{p}/ratio", f"/{p}/training_mode"
        wr.nodes += [
            helper.make_node("Constant", [], [ratio], name=f"/{p}/Constant",
                             value=numpy_helper.from_array(np.array(f["p"], np.float32))),
            helper.make_node("Constant", [], [mode], name=f"/{p}/Constant_1",
                             value=numpy_helper.from_array(np.array(True)))]
        return wr.node("Dropout", [x, ratio, mode], p), shape
    if op == "global_avgpool":
        return wr.node("GlobalAveragePool", [x], p), [shape[0], 1, 1]
    attrs = {"alpha": float(f["negative_slope"])} if op == "leaky_relu" else {}
    return wr.node(ONNX_OPS[op], [x], p, **attrs), shape


def build_model(spec, input_shape, classes, seed: int = 0) -> tuple[bytes, object]:
    """The ONNX model (serialised ModelProto, ``onnx.checker`` full check passed) of ``spec``
    for samples ``input_shape`` and ``classes`` classes, and ``build_spec.checked``'s result.
    Raises ``SpecError`` (a ValueError) listing every problem of the spec."""
    chk = checked(spec, input_shape, classes)
    wr = _Writer(np.random.default_rng(seed))
    x, shape = "input", list(chk.input)
    for i, f in enumerate(chk.spec):
        x, shape = _layer(wr, f, x, shape, f"layers.{i}", chk.classes)
    wr.nodes[-1].output[0] = "output"
    graph = helper.make_graph(
        wr.nodes, model_name(chk),
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", *chk.input])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", chk.classes])],
        wr.inits)
    gelu = any(n.op_type == "Gelu" for n in wr.nodes)
    model = helper.make_model(graph, producer_name="webgpu-trainer builder",
                              opset_imports=[helper.make_opsetid("", 20 if gelu else 18)])
    model.ir_version = 9 if gelu else 8
    helper.set_model_props(model, {SPEC_KEY: json.dumps(chk.spec, separators=(",", ":"))})
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString(), chk

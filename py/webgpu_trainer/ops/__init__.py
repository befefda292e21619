"""Op families, forward and backward side by side, each dispatching WGSL from ``shaders/``.

Each module exposes ``forward(b, node, ins, outs, train)`` and ``backward(b, node, ins, outs,
gins, gouts)`` coroutines that append dispatches to the plan's builder ``b``
(``plan.Builder``); ``ins``/``outs`` are ``plan.Tensor`` (None for an absent optional input),
``gins`` the gradient tensors of the inputs (None where no gradient is needed), ``gouts`` those of
the outputs. OPS maps ONNX op_type -> module.
"""

from . import activation, batchnorm, conv, dropout, gemm, softmax

OPS = {
    "Conv": conv,
    "Gemm": gemm,
    "Relu": activation,
    "BatchNormalization": batchnorm,
    "Dropout": dropout,
    "LogSoftmax": softmax,
}
# Flatten and Identity are views: the plan aliases their output (and gradient) to the input.
VIEWS = ("Flatten", "Identity")

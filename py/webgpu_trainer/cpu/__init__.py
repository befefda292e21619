"""The numpy engine: the model description run on the CPU, forward and backward.

Two uses: the "no GPU" engine of the training loop (``cpu_engine.CpuEngine``, ``--device cpu``,
float32) and the float64 oracle of the tests. It shares no arithmetic with the WGSL kernels: each
op is written again from the ONNX operator definitions and PyTorch's autograd formulas. It shares
their random numbers: ``philox.py`` draws the GPU's initial weights and dropout masks bit for bit.

Each module declares ``TYPES`` (ONNX op_types) and exposes
``forward(node, ins, ctx) -> (outs, cache)`` and
``backward(node, ins, outs, cache, douts, ctx) -> dins``: ``ins`` are numpy arrays (None for an
absent optional input; constants keep their dtype), ``douts`` the output gradients (None where
an output has no gradient), ``dins`` one entry per input (None where no gradient flows).
``ctx`` is ``engine.Context`` (train flag, dtype, dropout masks, running-statistic updates).
CPython only (numpy).
"""

from . import (activation, batchnorm, binary, conv, dropout, gather, gemm, layernorm, layout,
               matmul, pool, reduction, rnn, softmax, unary, views)
from . import resize

_MODULES = (activation, batchnorm, binary, conv, dropout, gather, gemm, layernorm, layout, pool,
            reduction, rnn, softmax, views, unary, matmul, resize)

KERNELS = {t: m for m in _MODULES for t in m.TYPES}

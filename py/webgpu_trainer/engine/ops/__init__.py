"""Op families, forward and backward side by side, each dispatching WGSL from ``shaders/``.

Each module declares ``TYPES`` (the ONNX op_types it implements) and exposes:

- ``infer(node, ins, consts) -> [shape, ...]``: output shapes (lists of int) from the input
  shapes ``ins`` (None for an absent optional input) and ``consts`` (per input: the list of
  values when that input is a constant of the model description, else None); raises
  ``graph.GraphError`` naming the node when the shapes do not fit;
- ``forward(b, node, ins, outs, train)`` and ``backward(b, node, ins, outs, gins, gouts)``
  coroutines that append dispatches to the plan's builder ``b`` (``builder.Builder``).
  ``ins``/``outs`` are ``builder.Tensor`` (None for an absent optional input), ``gins`` the
  gradient tensors of the inputs (None where no gradient is needed), ``gouts`` those of the
  outputs. A backward WRITES (never adds to) every non-None ``gins``: the plan gives each use of
  a tensor with several consumers its own gradient buffer and sums them;
- optionally ``init(node, graph) -> [(tensor name, "uniform", fan_in) | (tensor name, "fill",
  value)]``: PyTorch's default init of the node's parameters (``engine/init.py``; both engines
  draw it with the same generator).

OPS maps ONNX op_type -> module; VIEWS are the op_types whose output aliases the input.
"""

from . import activation, batchnorm, binary, conv, dropout, gemm, layernorm, layout, pool, reduction, softmax, views, unary, matmul

_MODULES = (activation, batchnorm, binary, conv, dropout, gemm, layernorm, layout, pool, reduction, softmax, views, unary, matmul)

OPS = {t: m for m in _MODULES for t in m.TYPES}
VIEWS = views.TYPES

"""Op families, forward and backward side by side, each dispatching WGSL from ``shaders/``.

Each module is the CARD of its family: everything about its ops in one place. It declares

- ``TYPES``: the ONNX op_types the engine runs;
- ``ATTRS``: per op_type (those of TYPES and those the importer only maps), the ONNX attribute
  defaults the importer fills, in order (values, or callables for rank- / opset-dependent
  ones: ``card.py``); ``card.read(node, ATTRS)`` reads a node's attributes with them;
- optionally ``normalize(node, opset, shapes) -> [problem, ...]``: opset-dependent forms made
  explicit after the defaults (auto_pad, BatchNormalization's training_mode before 14);
- optionally ``macs(node, shapes)``: multiply-adds of one sample (``summary.py``);
- optionally ``FUSES_RELU_FORWARD`` / ``TAKES_RELU_GRAD``: the op applies a following
  in-place Relu in its forward / masks a preceding one's gradient in its backward
  (``plan.py`` decides, ``Builder.fused(node)`` answers); True for every op of the card or a
  tuple of the op_types it holds for (binary: Add, Sub);
- optionally ``GRAD_EVERY_OUTPUT``: the plan gives every output a gradient (Split; LSTM /
  GRU's Y_h, Y_c), not only the first (the others of BatchNormalization, Dropout,
  LayerNormalization carry none);

and exposes:

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

OPS maps ONNX op_type -> module; RUNS adds the op types only rewrites make (never imported:
attention.py's FusedAttention); VIEWS are the op_types whose output aliases the input;
CARDS maps every op_type with ATTRS (OPS' and the import-only ones) -> module.
"""

from . import (activation, batchnorm, binary, card, conv, dropout, gather, gemm, layernorm,
               layout, pool, reduction, rnn, softmax, views, unary, matmul)
from . import resize
from . import attention

_MODULES = (activation, batchnorm, binary, conv, dropout, gather, gemm, layernorm, layout, pool,
            reduction, rnn, softmax, views, unary, matmul, resize)

OPS = {t: m for m in _MODULES for t in m.TYPES}
RUNS = {**OPS, **{t: attention for t in attention.TYPES}}
VIEWS = views.TYPES
CARDS = {t: m for m in _MODULES for t in m.ATTRS}


def fill_defaults(node: dict, opset: int, shapes) -> list:
    """The ONNX defaults of ``node``'s attributes filled in place by its card (``ATTRS``, then
    ``normalize``); ``shapes(name)``: an input's shape or None. Returns the problems found
    (strings naming the node). Op types without a card are left as they are."""
    m = CARDS.get(node["op_type"])
    if m is None:
        return []
    card.fill(m.ATTRS[node["op_type"]], node, opset, shapes)
    return m.normalize(node, opset, shapes) if hasattr(m, "normalize") else []

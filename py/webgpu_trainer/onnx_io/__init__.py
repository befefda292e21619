"""ONNX <-> the engine's model description ("bundle"), and export of trained weights.

CPython only (server / CLI): needs numpy and onnx; the browser engine never imports this.
Contracts: docs/ARCHITECTURE.md, "Model description (bundle)" and "Trained weights -> .onnx".

- :func:`load_bundle` (the single entry point of the server and the CLI) turns an ``.onnx`` file
  into ``(graph, weights)``: a JSON-serialisable graph dict and a little-endian float32 blob
  holding every trainable tensor, each at an offset that is a multiple of :data:`ALIGN` (256)
  bytes. It accepts what ``torch.onnx.export`` writes with the TorchScript exporter
  (``dynamo=False``, opsets 13-17) and the dynamo exporter (``dynamo=True``, opset 18), static or
  dynamic batch, training- or inference-mode graphs:

  * constant subgraphs are folded before training (Constant, Identity, Shape, Size, Gather,
    Unsqueeze, Squeeze, Concat, Cast, CastLike, ConstantOfShape, Range, Reshape/Slice/
    arithmetic of constants; other standard ops through ``onnx.reference`` on small inputs),
    alternating with ONNX shape inference until nothing new folds. The batch dimension is
    symbolic: the graph is evaluated for two batch sizes and a shape that follows the batch
    (``x.view(x.size(0), -1)``) becomes a Reshape constant with ``0`` (ONNX: copy the input's
    dim; ``allowzero`` set to 0) or ``-1`` in that place, so it holds for any batch; any other
    batch-dependent value is a problem. A batch size baked into a static export (a Reshape to
    ``[4, -1]``) becomes ``[-1, <inferred dims>]``, with a note; the input and output shapes get
    the batch symbol (``"N"`` unless the file names it). Nodes no output depends on are dropped;
  * attribute defaults are filled; constant inputs that older opsets had as attributes are kept
    as inputs AND mirrored into ``attrs`` under the attribute name (Squeeze/Unsqueeze/Reduce*
    ``axes``, Split ``split``, Clip ``min``/``max``, Dropout ``ratio``/``training_mode``, Pad
    ``pads``/``value``/``axes``, Slice ``starts``/``ends``/``axes``/``steps``);
    BatchNormalization always has ``training_mode`` (opset < 14: 1 when exported with the
    running-statistic outputs); ``auto_pad`` SAME_*/VALID becomes explicit ``pads``; a Cast
    of an activation to a float type becomes Identity (the engine computes in float32);
  * initializers: float ones are ``tensors`` with role ``"param"`` (trainable) or ``"buffer"``
    (BatchNormalization running mean / var); scalars and shape-like ones are ``constants``.
    float16 / float64 / bfloat16 are converted to float32 (a line in ``graph["notes"]``).
    Exporters deduplicate equal initializers: ``Identity(w)`` outputs become tensors of their
    own (``source: {"identity_of": w}``), a running statistic shared with a parameter or
    another BatchNormalization gets its own copy (``source: {"copy_of": w, "node", "input"}``).

- :func:`export_onnx` writes a blob of that layout back into the original model, converted to
  an inference graph (BatchNormalization ``training_mode=0`` with one output, no Dropout).
- :func:`model_summary` counts parameters for the model list.

Every problem is reported before any work by ONE :class:`OnnxImportError` whose message (and
``problems`` list) names every problem at once: unreadable / truncated / non-ONNX bytes, ops the
importer does not map or the engine cannot train yet (``graph.supported()``), unknown op
domains, an input that is not one float [N, ...] of fixed sample dims, tensor data that does not
match its declared size, missing external data files, unsupported initializer dtypes.

The package, by what each module holds:

- ``errors.py``: :class:`OnnxImportError` and the one error listing every problem;
- ``constants.py``: the bundle format, size limits, tested opsets and the op tables;
- ``protos.py``: reading protobuf fields (dtypes, dims, attributes, opset, node names);
- ``shapes.py``: element counts and ONNX Reshape's output dims;
- ``state.py``: :class:`ImportState`, the one state an import's stages pass along;
- the stages, in the order ``load.STAGES`` runs them: ``read.py`` (parse the file, check
  stored tensor data and external data files, dequantize weights), ``token_masks.py``
  (masks of the token ids as lookups), ``masked_fill.py`` (a Where by a constant mask as
  x * keep + fill), ``checks.py``
  (``check_graph``: opset, structure, the one input, ``onnx.checker``, dead nodes),
  ``fold.py`` (constant folding; ``eval_op.py`` evaluates one node), ``batch.py`` (shapes
  that hold for any batch), ``checks.py`` again (``check_ops``: the ops left), ``bundle.py``
  (``weights``: tensors and the weight blob), ``attrs.py`` (the nodes' attribute defaults
  and opset forms), ``bundle.py`` (``bundle``: the graph dict); ``initializers.py`` holds the
  rules for quantized and one-value initializers and ``frozen``;
- ``load.py``: :func:`load_bundle`; ``export.py``: :func:`export_onnx`; ``counts.py``:
  :func:`model_summary`; ``default_model.py``: :func:`make_default_model` (a model for any
  dataset shape, built with onnx.helper).
"""
from __future__ import annotations

from .constants import (ALIGN as ALIGN, FORMAT as FORMAT, IMPORT_OPS as IMPORT_OPS,
                        MAX_FILE_BYTES as MAX_FILE_BYTES, MAX_FOLD_ELEMENTS as MAX_FOLD_ELEMENTS,
                        MAX_INLINE_ELEMENTS as MAX_INLINE_ELEMENTS,
                        MAX_REFERENCE_ELEMENTS as MAX_REFERENCE_ELEMENTS,
                        MAX_OPSET as MAX_OPSET, MIN_OPSET as MIN_OPSET,
                        SUPPORTED_OPS as SUPPORTED_OPS, TESTED_OPSETS as TESTED_OPSETS)
from .counts import model_summary
from .default_model import make_default_model
from .errors import OnnxImportError
from .export import export_onnx
from .load import load_bundle

__all__ = ["ALIGN", "FORMAT", "IMPORT_OPS", "SUPPORTED_OPS", "OnnxImportError", "load_bundle",
           "export_onnx", "model_summary", "make_default_model"]

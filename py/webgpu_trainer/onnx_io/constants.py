"""The bundle format, the importer's limits and tested opsets, and its op tables (ops it maps,
inputs that hold attribute-like constants, ops that fold, float dtypes)."""
from __future__ import annotations

from onnx import TensorProto

from ..engine.ops import CARDS, OPS
from ..engine.ops.reduction import REDUCE

FORMAT = "webgpu-trainer/graph@1"
ALIGN = 256  # byte alignment of every tensor in the weight blob (GPU-friendly offsets)
TESTED_OPSETS = (13, 18)  # opsets the fixtures cover; others in MIN_OPSET..MAX_OPSET get a note
MIN_OPSET = 7
# The newest opset the importer reads: the newest that the oldest onnx (1.16) and onnxruntime
# (1.18) this package supports both know. The export keeps the model's opset, so a newer one
# would give a file some supported onnxruntime refuses; such models are refused at import.
MAX_OPSET = 21
MAX_FILE_BYTES = (1 << 31) - 1  # protobuf cannot parse more; weights beyond go to external data
MAX_FOLD_ELEMENTS = 1 << 22  # largest constant the folder will materialise
MAX_INLINE_ELEMENTS = 1 << 16  # largest constant written inline (JSON) into the bundle
MAX_REFERENCE_ELEMENTS = 1 << 16  # largest inputs folded by onnx.reference (other ops)
_BATCHES = (3, 5)  # the two batch sizes the folder evaluates the graph at
_DEFAULT_DOMAINS = ("", "ai.onnx")

IMPORT_ONLY = frozenset(CARDS) - frozenset(OPS)
"""ONNX op_types whose card (``engine/ops/<family>.py`` ATTRS) the importer reads but the engine
does not run (e.g. Selu, Split, ReduceProd): imported, then refused by ``graph.supported()``."""
IMPORT_OPS = frozenset(OPS) | IMPORT_ONLY
"""ONNX op_types the importer maps onto the bundle (defaults filled, forms normalised). Which of
them the engine can TRAIN is ``webgpu_trainer.graph.supported()``."""
SUPPORTED_OPS = IMPORT_OPS  # the historical name

# Inputs that carry attribute-like constants: (op, input index) -> the attribute name they are
# mirrored to (the name older opsets used).
_MIRROR: dict[str, dict[int, str]] = {
    "Squeeze": {1: "axes"}, "Unsqueeze": {1: "axes"}, "Split": {1: "split"},
    "Clip": {1: "min", 2: "max"}, "Dropout": {1: "ratio", 2: "training_mode"},
    "Pad": {1: "pads", 2: "value", 3: "axes"},
    "Slice": {1: "starts", 2: "ends", 3: "axes", 4: "steps"},
    **{op: {1: "axes"} for op in REDUCE},
}
# Inputs that must be constants of the model description for the engine to plan the node.
_MUST_BE_CONST: dict[str, tuple] = {
    "Reshape": (1,), "Expand": (1,), "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,),
    "Slice": (1, 2, 3, 4), "Pad": (1, 3), "Dropout": (1, 2), "Gather": (1,),
    **{op: (1,) for op in REDUCE},
}
# Inputs that hold shapes / indices / scalars rather than data: initializers used only there
# are constants, never trainable tensors.
_CONST_SLOTS: dict[str, tuple] = {**_MUST_BE_CONST, "Clip": (1, 2), "Pad": (1, 2, 3),
                                  "Tile": (1,), "Resize": (1, 2, 3), "Upsample": (1,),
                                  "ConstantOfShape": (0,), "Range": (0, 1, 2), "TopK": (1,),
                                  "OneHot": (1, 2), "CumSum": (1,), "Gather": (1,)}
_NEVER_FOLD = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                         "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout", "If",
                         "Loop", "Scan", "SequenceConstruct", "Optional",
                         "BatchNormalization"})
_FOLD_ONLY = frozenset({"Shape", "Size", "Constant", "ConstantOfShape", "Range", "Cast",
                        "CastLike", "Equal", "Where", "Less", "Greater", "Not"})
_FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
# Integer input dtypes read as token ids (the indices of an embedding Gather).
_TOKEN_TYPES = {TensorProto.INT64, TensorProto.INT32}
_INT_FIELD_TYPES = {TensorProto.INT32, TensorProto.INT16, TensorProto.INT8, TensorProto.UINT16,
                    TensorProto.UINT8, TensorProto.BOOL, TensorProto.FLOAT16,
                    TensorProto.BFLOAT16}

"""The one state of an import (:class:`ImportState`), passed from stage to stage by
``load.load_bundle``: each stage reads what the earlier ones wrote and adds its own part. The
fields are grouped by the stage that writes them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx


@dataclass
class ImportState:
    """Everything one import knows. ``problems`` collect every problem of every stage (the one
    error at the end lists them all), ``notes`` go into the bundle, ``hints`` after the
    problems."""

    path: str
    check_trainable: bool
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)  # shown after the problems, not counted

    # read (read.read_stage)
    model: onnx.ModelProto = None  # type: ignore[assignment] - set first thing
    base: str = ""  # the model's folder (external data)
    file_size: int = 0
    tensors_ok: bool = False  # every stored tensor holds the data it declares
    dequantized: dict[str, dict] = field(default_factory=dict)  # float32 output -> rewrite
    g: onnx.GraphProto = None  # type: ignore[assignment]
    opset: int = 0  # of the default domain
    opsets: dict[str, int] = field(default_factory=dict)  # domain -> version
    names: list[str] = field(default_factory=list)  # a unique name per node, in g.node order
    init: dict[str, onnx.TensorProto] = field(default_factory=dict)

    # checks (checks.check_graph)
    structure_ok: bool = False
    constant_reason: dict[str, str] = field(default_factory=dict)  # float constant -> why
    scalar_params: list[str] = field(default_factory=list)  # one-value floats that train
    input: dict | None = None  # the one data input (checks._check_inputs)
    dead: set[str] = field(default_factory=set)  # nodes no output depends on
    fold_ran: bool = False

    # fold (fold.fold) and batch shapes (batch.batch_shapes)
    constants: dict[str, np.ndarray] = field(default_factory=dict)  # value -> folded value
    const_overrides: dict[tuple, str] = field(default_factory=dict)  # (node, input) -> name
    attr_overrides: dict[str, dict] = field(default_factory=dict)  # node -> attributes
    folded: set[str] = field(default_factory=set)  # nodes removed by folding (and dead ones)
    fold_failures: dict[str, str] = field(default_factory=dict)  # node -> why not folded
    reported: set[str] = field(default_factory=set)  # nodes with a problem already
    shapes: dict[str, Any] = field(default_factory=dict)  # value -> dims at batch _BATCHES[0]
    static_out: list | None = None  # the output's shape at a static export's batch
    runs: list = field(default_factory=list)  # (batch, shapes, values, why) per batch
    batchdep: dict[str, tuple] = field(default_factory=dict)  # value -> (at b1, at b2)

    # weights (bundle.weights)
    keep: list = field(default_factory=list)  # (node, name, inputs) of the bundle's nodes
    derived: dict[str, dict] = field(default_factory=dict)  # Identity copy -> source
    uses: dict[str, list] = field(default_factory=dict)  # value -> [(node, name, input)]
    bundle_constants: dict[str, dict] = field(default_factory=dict)  # inlined constants
    final_order: list = field(default_factory=list)  # (tensor name, initializer holding it)
    tensor_names: set[str] = field(default_factory=set)
    rewire: dict[tuple, str] = field(default_factory=dict)  # (node, input) -> own copy
    tensors: list[dict] = field(default_factory=list)  # the bundle's tensor specs
    blob: bytes = b""
    weights_nbytes: int = 0

    # attributes (attrs.attributes)
    nodes: list[dict] = field(default_factory=list)

    # bundle (bundle.bundle)
    graph: dict = field(default_factory=dict)

    def shape(self, x: str) -> list | None:
        """The dims of value ``x`` (None when unknown)."""
        return self.shapes.get(x)

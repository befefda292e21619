"""The import's checks: before folding (stage 2, :func:`check_graph`: opset, graph structure,
the one float input, ``onnx.checker``, dead nodes), after it (stage 5, :func:`check_ops`: the
ops mapped, trainable, of a known domain) and the dtype of an initializer used as data
(:func:`check_dtype`, for the weights stage)."""
from __future__ import annotations

import onnx
from onnx import TensorProto

from .constants import (_DEFAULT_DOMAINS, _FLOAT_TYPES, _FOLD_ONLY, _TOKEN_TYPES,
                        IMPORT_OPS, MAX_OPSET, MIN_OPSET, TESTED_OPSETS)
from .initializers import classify_scalars
from .protos import _attr, _dims, _dtype_name, _type_name
from .state import ImportState


def check_graph(s: ImportState) -> None:
    """Stage 2, before folding: the opset, the graph's structure, the one-value initializers
    (``initializers.classify_scalars``), the one float input, ``onnx.checker`` (only on a
    graph that passed the rest), the dead nodes; ``s.fold_ran``: whether folding can run."""
    _check_opset(s)
    s.structure_ok = _check_structure(s)
    if s.tensors_ok:
        classify_scalars(s)
    s.input = _check_inputs(s)
    if s.tensors_ok and s.structure_ok and not s.problems:
        _check_onnx(s)
    s.dead = _dead_nodes(s)
    s.fold_ran = s.tensors_ok and s.structure_ok and s.input is not None


def _check_opset(s: ImportState) -> None:
    if s.opset == 0:
        s.problems.append("the model imports no opset of the default ONNX domain")
    elif s.opset < MIN_OPSET:
        s.problems.append(f"opset {s.opset} is too old: re-export with "
                          f"opset_version between {TESTED_OPSETS[0]} and "
                          f"{TESTED_OPSETS[1]}")
    elif s.opset > MAX_OPSET:
        s.problems.append(f"opset {s.opset} is newer than the importer knows (it "
                          f"reads opsets {MIN_OPSET}-{MAX_OPSET}, and the trained "
                          "model is exported at the model's own opset): re-export "
                          f"with opset_version between {TESTED_OPSETS[0]} and "
                          f"{TESTED_OPSETS[1]}")
    elif not TESTED_OPSETS[0] <= s.opset <= TESTED_OPSETS[1]:
        s.notes.append(f"opset {s.opset} is outside the tested range "
                       f"{TESTED_OPSETS[0]}-{TESTED_OPSETS[1]}")


def _check_structure(s: ImportState) -> bool:
    """Every node input is defined before use (a truncated or shuffled graph is not)."""
    g = s.g
    known = {i.name for i in g.input} | set(s.init) | {""}
    bad = []
    for n, name in zip(g.node, s.names):
        for x in n.input:
            if x not in known:
                bad.append(f"node {name} ({n.op_type}) uses {x!r}, which no graph input, "
                           "initializer or earlier node defines (truncated or unsorted "
                           "graph?)")
        known.update(n.output)
    for o in g.output:
        if o.name not in known:
            bad.append(f"graph output {o.name!r} is not produced by any node")
    if not g.node:
        bad.append("the graph has no nodes")
    s.problems += bad[:20] + ([f"... and {len(bad) - 20} more undefined tensors"]
                              if len(bad) > 20 else [])
    return not bad


def _check_onnx(s: ImportState) -> None:
    """onnx.checker: structural errors and type errors (strict shape inference) are
    problems; other shape-inference complaints only a note (the folder infers again)."""
    def first_line(e):
        text = str(e).strip()
        return text.splitlines()[0] if text else type(e).__name__
    try:
        onnx.checker.check_model(s.model)
    except Exception as e:  # noqa: BLE001 - ValidationError and friends
        s.problems.append(f"the ONNX checker rejects the model: {first_line(e)}")
        return
    try:
        onnx.checker.check_model(s.model, full_check=True)
    except Exception as e:  # noqa: BLE001 - InferenceError
        if "type" in str(e).lower():
            s.problems.append(f"the ONNX checker rejects the model: {first_line(e)}")
        else:
            s.notes.append(f"ONNX shape inference reports: {first_line(e)}")


def _dead_nodes(s: ImportState) -> set:
    """Names of the nodes no graph output depends on (exporters leave some behind)."""
    need = {o.name for o in s.g.output}
    dead = set()
    for n, name in reversed(list(zip(s.g.node, s.names))):
        if any(o and o in need for o in n.output):
            need.update(x for x in n.input if x)
        else:
            dead.add(name)
    return dead


def _check_inputs(s: ImportState) -> dict | None:
    """The one data input [N, ...] of fixed per-sample dims (which dataset it fits is
    checked when training starts, ``train.data.check_fits``): {"name", "batch", "dims",
    "dtype"}."""
    real = [i for i in s.g.input if i.name not in s.init]
    if not real:
        s.problems.append("the model has no input (it needs one float input [N, ...]: "
                          "images [N, C, H, W] or features [N, F])")
        return None
    if len(real) > 1:
        s.problems.append(f"the model has {len(real)} inputs "
                          f"{[i.name for i in real]}; the trainer feeds exactly one "
                          "float input [N, ...]")
    vi = real[0]
    ok = True
    elem = vi.type.tensor_type.elem_type
    if not vi.type.HasField("tensor_type"):
        s.problems.append(f"input {vi.name!r} is not a tensor")
        return None
    tokens = elem in _TOKEN_TYPES
    if tokens:
        ok = _check_token_input(s, vi.name)
    elif elem not in _FLOAT_TYPES:
        s.problems.append(f"input {vi.name!r} has dtype {_dtype_name(elem)}; the trainer "
                          "feeds normalised float32 samples")
        ok = False
    elif elem != TensorProto.FLOAT:
        s.notes.append(f"input {vi.name!r} is {_dtype_name(elem)}; the engine feeds and "
                       "computes float32")
    dims = _dims(vi)
    if dims is None:
        s.problems.append(f"input {vi.name!r} declares no shape; the trainer needs "
                          "[N, ...] (e.g. [N, 1, 28, 28] or [N, 784])")
        return None
    per = dims[1:]
    if not per:
        s.problems.append(f"input {vi.name!r} has shape {dims} (a scalar per sample, rank "
                          f"{len(dims)}): the trainer feeds samples [N, ...] of rank >= 2, "
                          "e.g. [N, 1, 28, 28] or [N, 784]")
        return None
    if any(not isinstance(d, int) or d <= 0 for d in per):
        s.problems.append(f"input {vi.name!r} has shape {dims}: every dim but the batch must "
                          "be a fixed size (re-export with only the batch axis dynamic)")
        return None
    batch = dims[0]
    if isinstance(batch, int) and batch <= 0:
        batch = None
    return {"name": vi.name, "batch": batch, "dims": list(per), "ok": ok,
            "symbol": batch if isinstance(batch, str) else "N",
            "dtype": "int64" if tokens else "float32"}


def _check_token_input(s: ImportState, name: str) -> bool:
    """An integer input holds token ids: every node reading it must be a Gather reading it
    as its indices (input 1: ``nn.Embedding``'s lookup into a table) or a Shape (which reads
    only its dims, e.g. ``torch.arange(x.shape[1])`` for positions; folded with the batch's
    dims later); a problem naming the first other reader otherwise."""
    for n in s.g.node:
        for k, i in enumerate(n.input):
            if i == name and not (n.op_type == "Gather" and k == 1 or n.op_type == "Shape"):
                s.problems.append(f"input {name!r} holds integers (token ids); the engine "
                                  f"reads them only as the indices of a Gather (nn.Embedding), "
                                  f"but node {n.name or n.op_type} ({n.op_type}) reads it as "
                                  f"input {k}")
                return False
    return True


def check_ops(s: ImportState) -> None:
    """Stage 5, after folding: every node left is of the default domain, mapped by the
    importer (``IMPORT_OPS``) and, with ``s.check_trainable``, trained by the engine."""
    from ..engine.graph import supported
    trainable = set(supported())
    unsupported, untrainable, domains = [], [], []
    for n, name in zip(s.g.node, s.names):
        if name in s.folded or n.op_type == "Constant" and n.domain in _DEFAULT_DOMAINS:
            continue
        dom = n.domain or "ai.onnx"
        where = f"node {name} ({n.op_type}, {dom} opset {s.opsets.get(dom, '?')})"
        if n.domain not in _DEFAULT_DOMAINS:
            domains.append(f"unknown op domain {n.domain!r}: {where}")
        elif n.op_type in _FOLD_ONLY and not (n.op_type == "Cast" and _cast_is_float(n)):
            if not s.fold_ran:
                continue  # the problems that stopped folding are reported already
            why = s.fold_failures.get(name, "its inputs are computed from activations")
            unsupported.append(f"unsupported op: {where} could not be folded to a "
                               f"constant: {why}")
        elif n.op_type == "Cast" and _cast_is_float(n):
            continue
        elif n.op_type not in IMPORT_OPS:
            unsupported.append(f"unsupported op: {where}")
        elif s.check_trainable and n.op_type not in trainable:
            untrainable.append(f"cannot train yet: {where}: the engine has no kernel for "
                               f"{n.op_type}")
    s.problems += domains + unsupported + untrainable
    if unsupported or untrainable:
        s.hints.append("ops the engine trains: " + ", ".join(sorted(trainable)))


def _cast_is_float(n) -> bool:
    to = _attr(n, "to")
    return to in _FLOAT_TYPES


def check_dtype(s: ImportState, t: TensorProto, name: str, uses: list) -> bool:
    """False (and a problem) for an initializer the trainer cannot use as data."""
    if t.data_type in _FLOAT_TYPES:
        return True
    users = ", ".join(f"{nm} ({n.op_type})" for n, nm, _ in uses[:3])
    tn = _type_name(t.data_type)
    if "FLOAT" in tn:
        s.problems.append(f"initializer {name!r} has dtype {tn}, which the trainer "
                          f"cannot convert (used by {users}): re-export in float32")
    elif t.data_type in (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT4,
                         TensorProto.UINT4):
        s.problems.append(f"initializer {name!r} is {tn} {list(t.dims)} used as data by "
                          f"{users}: quantized (int8/uint8) weights are not supported; "
                          "export the float32 model")
    else:
        s.problems.append(f"initializer {name!r} is {tn} {list(t.dims)} used as data by "
                          f"{users}: only float tensors can be data")
    return False

"""Export: trained weights written back into the original model, converted to an inference
graph (:func:`export_onnx`)."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .initializers import _dequantize_weights
from .load import load_bundle
from .protos import _node_names, _opset
from .read import _read_model


def _to_inference(g: onnx.GraphProto, opset: int) -> None:
    """In place: BN -> inference with one output; Dropout removed (consumers rewired)."""
    used = {x for n in g.node for x in n.input} | {o.name for o in g.output}
    rename: dict[str, str] = {}
    keep = []
    for n in g.node:
        n.input[:] = [rename.get(x, x) for x in n.input]
        if n.op_type == "BatchNormalization" and len(n.output) > 1:
            extra = [o for o in n.output[1:] if o and o in used]
            if extra:
                raise ValueError(f"BatchNormalization {n.name!r}: running-stat outputs {extra} "
                                 "are consumed; cannot convert to inference")
            del n.output[1:]
        if n.op_type == "BatchNormalization":
            for a in list(n.attribute):
                if a.name == "training_mode":
                    n.attribute.remove(a)
            if opset >= 14:
                n.attribute.append(helper.make_attribute("training_mode", 0))
        if n.op_type == "Dropout":
            if len(n.output) > 1 and n.output[1] and n.output[1] in used:
                raise ValueError(f"Dropout {n.name!r}: mask output is consumed")
            if n.output[0] in {o.name for o in g.output}:
                keep.append(helper.make_node("Identity", [n.input[0]], [n.output[0]],
                                             name=n.name))
            else:
                rename[n.output[0]] = n.input[0]
            continue
        keep.append(n)
    for o in g.output:  # a graph output produced by a removed Dropout
        if o.name in rename:
            raise ValueError(f"graph output {o.name!r} comes from a Dropout")
    del g.node[:]
    g.node.extend(keep)
    # Drop Constant nodes / initializers nobody uses any more (Dropout's ratio, training_mode).
    while True:
        used = {x for n in g.node for x in n.input} | {o.name for o in g.output}
        dead = [n for n in g.node if n.op_type == "Constant" and n.output[0] not in used]
        if not dead:
            break
        for n in dead:
            g.node.remove(n)
    for t in [t for t in g.initializer if t.name not in used]:
        g.initializer.remove(t)
    names = {o for n in g.node for o in n.output}
    for vi in [v for v in g.value_info if v.name not in names]:
        g.value_info.remove(vi)


def _any_batch(g: onnx.GraphProto, graph: dict, names: list[str]) -> None:
    """In place: a model exported with a fixed batch size (its input ``[b, ...]``) takes any
    batch, as the import made it: the input's and outputs' first dimension becomes the
    bundle's symbol, each Reshape uses the bundle's batch-free shape (``-1`` or ``0`` where the
    export baked ``b``: the import's ``batch.static_batch`` / ``_resolve_reshape``), and the
    intermediate shapes (``value_info``, inferred for batch ``b``) go."""
    inits = {t.name for t in g.initializer}
    real = [i for i in g.input if i.name not in inits]
    dims = real[0].type.tensor_type.shape.dim if real else []
    if not dims or not dims[0].HasField("dim_value") or dims[0].dim_value <= 0:
        return
    fixed, symbol = dims[0].dim_value, graph["inputs"][0]["shape"][0]
    bundle = {n["name"]: n for n in graph["nodes"]}
    for n, name in zip(g.node, names):
        new = bundle.get(name, {}).get("inputs", [])
        if n.op_type != "Reshape" or len(new) < 2 or new[1] == n.input[1] \
                or new[1] not in graph["constants"]:
            continue
        if new[1] not in inits:
            const = graph["constants"][new[1]]
            g.initializer.append(numpy_helper.from_array(
                np.array(const["values"], np.int64).reshape(const["shape"]), new[1]))
            inits.add(new[1])
        n.input[1] = new[1]
    for vi in [real[0], *g.output]:
        d = vi.type.tensor_type.shape.dim
        if d and d[0].HasField("dim_value") and d[0].dim_value == fixed:
            d[0].dim_param = symbol
    del g.value_info[:]


def _as_initializer(arr: np.ndarray, like: TensorProto, name: str) -> TensorProto:
    """``arr`` (float32) as an initializer named ``name`` of ``like``'s dtype."""
    if like.data_type == TensorProto.BFLOAT16:
        return helper.make_tensor(name, TensorProto.BFLOAT16, arr.shape,
                                  arr.astype(np.float32).reshape(-1).tolist())
    np_dtype = helper.tensor_dtype_to_np_dtype(like.data_type)
    return numpy_helper.from_array(arr.astype(np_dtype), name)


def export_onnx(src_path: str | os.PathLike, weights: bytes, provenance: dict) -> bytes:
    """Write trained ``weights`` into the model at ``src_path``; return inference ``.onnx`` bytes.

    ``weights``: bytes-like in the bundle layout of ``load_bundle(src_path)`` (same offsets,
    little-endian float32, exactly ``graph["weights_nbytes"]`` bytes). Initializers keep their
    original dtype; tensors the importer split off (Identity-deduplicated initializers, copies
    of shared running statistics) become initializers of their own (next to their source), the
    Identity nodes go and the BatchNormalization inputs are re-pointed. The graph becomes an
    inference graph: BatchNormalization ``training_mode=0`` (opset >= 14) with only its first
    output, Dropout nodes removed (consumers rewired to their input). ``provenance`` (str keys;
    non-str values JSON-encoded) goes into ``metadata_props`` plus
    ``trained_with="webgpu-trainer"``. Quantized weights the import dequantized
    (DequantizeLinear of an initializer) are written as float32 initializers in place of that
    node. A model exported with a fixed batch size is exported for any batch (``_any_batch``).
    The result passes ``onnx.checker.check_model(full_check=True)``.

    Raises ``ValueError`` if the blob size is wrong (expected vs got bytes) or the graph
    cannot be converted; ``OnnxImportError`` for an unreadable source model.
    """
    src_path = os.fspath(src_path)
    graph, blob = load_bundle(src_path, check_trainable=False)
    weights = bytes(weights)
    if len(weights) != len(blob):
        raise ValueError(f"{src_path}: weight blob has the wrong size: expected {len(blob)} "
                         f"bytes, got {len(weights)}")
    model = _read_model(src_path)
    base = os.path.dirname(os.path.abspath(src_path))
    if any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer):
        onnx.external_data_helper.load_external_data_for_model(model, base)
    if model.functions:
        model = onnx.inliner.inline_local_functions(model)
    _dequantize_weights(model)  # as the import did: the trained float32 weights replace them
    g = model.graph
    names = _node_names(g)
    by_node = dict(zip(names, g.node))
    inits = list(g.initializer)
    by_name = {t.name: t for t in inits}
    added: dict[str, list] = {}  # source initializer -> new initializers after it
    drop_nodes = set()
    for spec in graph["tensors"]:
        count = spec["nbytes"] // 4
        arr = np.frombuffer(weights, dtype="<f4", count=count, offset=spec["offset"])
        arr = arr.reshape(spec["shape"])
        src = spec.get("source")
        if src is None or "renamed_from" in src:
            old = by_name[src["renamed_from"] if src else spec["name"]]
            old.CopyFrom(_as_initializer(arr, old, old.name))
            continue
        root = src.get("identity_of") or src.get("copy_of")
        while root not in by_name:  # Identity of an Identity: find the stored initializer
            root = next(t["source"]["identity_of"] for t in graph["tensors"] if t["name"] == root)
        new = _as_initializer(arr, by_name[root], spec["name"])
        added.setdefault(root, []).append(new)
        if "identity_of" in src:
            drop_nodes.update(id(n) for n in g.node
                              if n.op_type == "Identity" and list(n.output) == [spec["name"]])
        else:
            by_node[src["node"]].input[src["input"]] = spec["name"]
    if added or drop_nodes:
        del g.initializer[:]
        for t in inits:
            g.initializer.append(t)
            g.initializer.extend(added.get(t.name, []))
        keep = [n for n in g.node if id(n) not in drop_nodes]
        del g.node[:]
        g.node.extend(keep)
    _any_batch(g, graph, names)
    _to_inference(g, _opset(model))

    props = {"trained_with": "webgpu-trainer"}
    for k, v in (provenance or {}).items():
        props[str(k)] = v if isinstance(v, str) else json.dumps(v)
    old_props = {p.key: p.value for p in model.metadata_props}
    helper.set_model_props(model, {**old_props, **props})
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString()

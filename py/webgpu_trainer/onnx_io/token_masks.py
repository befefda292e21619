"""An import stage after reading (:func:`token_masks`): masks computed from the token ids.

Exporters emit ``x != pad`` as Equal(ids, pad) -> Not -> Unsqueeze -> Cast to float, both for
key-padding masks and for a mean over the non-padding tokens. Such a chain of elementwise ops
(``MASK_OPS``) whose only run-time input is the model's integer token ids is one value per
token id, so it is folded into a constant table indexed by the ids: the chain's float outputs
become Gather(table, ids) (an embedding lookup that does not train; ``engine/ops/embed.py``),
the table evaluated here by onnx.reference for every id 0..rows-1 of the model's embedding
tables. A chain whose output is not float, or not the same for every position of a row, is
left as it is (the input check then names the node that reads the ids).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .constants import _TOKEN_TYPES
from .protos import _node_names
from .state import ImportState

MASK_OPS = frozenset({"Equal", "Not", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
                      "And", "Or", "Xor", "Cast", "Where", "Unsqueeze", "Identity"})
MAX_TABLE_ELEMENTS = 1 << 22  # rows * tokens per row evaluated at most


def token_masks(s: ImportState) -> None:
    """Between reading and the checks: the mask chains of the token ids folded into lookups (the
    module docstring); a note says which."""
    g = s.g
    inputs = [i for i in g.input if i.name not in s.init]
    if len(inputs) != 1 or inputs[0].type.tensor_type.elem_type not in _TOKEN_TYPES:
        return
    x = inputs[0]
    rows = [s.init[n.input[0]].dims[0] for n in g.node if n.op_type == "Gather"
            and len(n.input) > 1 and n.input[1] == x.name and n.input[0] in s.init]
    dims = [d.dim_value for d in x.type.tensor_type.shape.dim][1:]
    if not rows or not dims or min(dims) < 1 or max(rows) * int(np.prod(dims)) > \
            MAX_TABLE_ELEMENTS:
        return
    consts = set(s.init) | {o for n in g.node if n.op_type == "Constant" for o in n.output}
    derived, chain = {x.name}, []
    for n in g.node:
        ins = [i for i in n.input if i]
        if n.op_type in MASK_OPS and any(i in derived for i in ins) and \
                all(i in derived or i in consts for i in ins):
            chain.append(n)
            derived.update(n.output)
    outs = _frontier(g, chain, derived - {x.name})
    tables = _tables(s, x.name, max(rows), dims, chain, outs) if outs else None
    if not tables:
        return
    keep = [n for n in g.node if n not in chain]
    for t, table in tables.items():
        keep.append(helper.make_node("Constant", [], [f"{t}.by_token"],
                                     value=numpy_helper.from_array(table, f"{t}.by_token"),
                                     name=f"{t}.by_token"))
        keep.append(helper.make_node("Gather", [f"{t}.by_token", x.name], [t], axis=0,
                                     name=f"{t}.lookup"))
    del g.node[:]
    g.node.extend(_topological(keep, {i.name for i in g.input} | set(s.init)))
    s.names = _node_names(g)
    s.notes.append(f"{len(chain)} nodes computing {', '.join(sorted(tables))} from the token "
                   f"ids {x.name!r} became lookups into constant tables")


def _frontier(g, chain, made) -> list:
    """The values the chain makes that anything outside it reads (or the graph outputs)."""
    inside = {id(n) for n in chain}
    used = {i for n in g.node if id(n) not in inside for i in n.input} | \
        {o.name for o in g.output}
    return sorted(t for t in made if t in used)


def _tables(s, x, rows, dims, chain, outs) -> dict | None:
    """{value: float32 table [rows, *rest]} of each chain output evaluated at ids
    0..rows-1 (row r of the input all r); None when one is not float or differs along a
    row."""
    from onnx.reference import ReferenceEvaluator
    m = helper.make_model(helper.make_graph(
        [n for n in s.g.node if n.op_type == "Constant"] + chain, "masks",
        [helper.make_tensor_value_info(x, onnx.TensorProto.INT64, [rows] + dims)],
        [helper.make_tensor_value_info(t, onnx.TensorProto.UNDEFINED, None) for t in outs],
        [t for t in s.g.initializer if t.name in {i for n in chain for i in n.input}]),
        opset_imports=list(s.model.opset_import))
    ids = np.broadcast_to(np.arange(rows, dtype=np.int64).reshape([rows] + [1] * len(dims)),
                          [rows] + dims).copy()
    try:
        values = ReferenceEvaluator(m).run(None, {x: ids})
    except Exception:  # noqa: BLE001 - not evaluable: left for the input check to name
        return None
    out = {}
    for t, v in zip(outs, values):
        v = np.asarray(v)
        if v.dtype.kind != "f" or v.ndim < len(dims) + 1 or list(v.shape[:len(dims) + 1]) != \
                [rows] + dims:
            return None
        first = v.reshape(rows, int(np.prod(dims)), -1)
        if not np.array_equal(first, np.broadcast_to(first[:, :1], first.shape)):
            return None
        out[t] = np.ascontiguousarray(
            first[:, 0].reshape([rows] + list(v.shape[len(dims) + 1:])), np.float32)
    return out


def _topological(nodes, known) -> list:
    """``nodes`` ordered so each comes after the producers of its inputs."""
    known, out, rest = set(known), [], list(nodes)
    while rest:
        ready = [n for n in rest if all(not i or i in known for i in n.input)]
        if not ready:
            return out + rest
        for n in ready:
            out.append(n)
            known.update(n.output)
        rest = [n for n in rest if all(n is not r for r in ready)]
    return out

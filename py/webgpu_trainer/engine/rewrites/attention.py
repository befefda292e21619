"""Attention's MatMul -> Softmax -> MatMul folded into one FusedAttention node
(``ops/attention.py``; ``Plan.build`` applies ``fold`` last, after ``scales`` and
``transposes`` gave the products their scales and strides).

    MatMul(q, kt) -> s -> Softmax(axis = last) -> p -> MatMul(p, v) -> y

becomes FusedAttention(q, kt, v) -> [y, p]: one dispatch forward instead of three, two
backward instead of five (H100: the encoder and the ViT at batch 1000 -8% / -5% a step, at
64 -5% / -6% with the keys split over threads, ops/attention.lanes).
Folded when nothing else reads s or p (nor a caller, ``keep``), p is the second product's
first operand, the Softmax normalises along the last axis (opset >= 13, or a 2-D input
before it), ``ops/attention.layout`` accepts the shapes (same batch dims, none broadcast,
heads of at most 64, vec4-aligned) and there are at least ``min_rows`` query rows
(``Builder.ATTENTION_MIN_ROWS``, 0: always). An additive mask between the product and the
Softmax (a causal model's) keeps the three ops as they are.
"""

from ..graph import Graph
from ..ops import attention, softmax
from . import sole_reader


def _match(graph, shapes, sm, keep, min_rows):
    """(first MatMul, second MatMul) around Softmax ``sm`` when they fold, else None."""
    if sm["op_type"] != "Softmax" or not sm["inputs"]:
        return None
    s, p = sm["inputs"][0], sm["outputs"][0]
    m1 = graph.producer.get(s)
    if m1 is None or m1["op_type"] != "MatMul" or sole_reader(graph, s, keep) is not sm:
        return None
    m2 = sole_reader(graph, p, keep)
    if m2 is None or m2["op_type"] != "MatMul" or m2["inputs"][0] != p or m2["inputs"][1] == p:
        return None
    rank = len(shapes[s])
    opset = int(graph.desc.get("opset", 17) or 17)
    if (opset < 13 and rank != 2) or softmax.axis_of(sm, rank, opset) != rank - 1:
        return None
    q, kt, v = m1["inputs"][0], m1["inputs"][1], m2["inputs"][1]
    if min(len(shapes[q]), len(shapes[kt]), len(shapes[v])) < 2:
        return None  # numpy.matmul's 1-D operands
    try:
        lay = attention.layout(m1.get("attrs"), m2.get("attrs"), shapes[q], shapes[kt],
                               shapes[v])
    except (ValueError, KeyError):
        return None
    return (m1, m2) if lay["rows"] >= min_rows else None


def fold(graph: Graph, shapes: dict, keep=(), min_rows: int = 0) -> Graph:
    """``graph`` with every attention of the module doc one FusedAttention node (named after
    its Softmax, at the second product's place); ``graph`` itself when there is none."""
    put, drop = {}, set()
    for sm in graph.nodes:
        found = _match(graph, shapes, sm, keep, min_rows)
        if found is None:
            continue
        m1, m2 = found
        if {id(m1), id(m2)} & (set(put) | drop):  # chained: Y of one is S of the next
            continue
        put[id(m2)] = {"name": sm["name"], "op_type": "FusedAttention",
                       "inputs": [m1["inputs"][0], m1["inputs"][1], m2["inputs"][1]],
                       "outputs": [m2["outputs"][0], sm["outputs"][0]],
                       "attrs": {"scores": dict(m1.get("attrs") or {}),
                                 "values": dict(m2.get("attrs") or {})}}
        drop.update((id(m1), id(sm)))
    if not put:
        return graph
    nodes = [put.get(id(n), n) for n in graph.nodes if id(n) not in drop]
    return Graph({**graph.desc, "nodes": nodes}, internal=True)

"""The erf GELU written out as five ops folded into one Gelu (``Plan.build`` applies ``fold``).

torch.onnx.export (opsets before 20, which have no Gelu) writes ``nn.GELU()`` as

    Div(x, sqrt(2)) -> Erf -> Add(., 1) -> Mul(x, .) -> Mul(., 0.5)

(TorchScript; the dynamo exporter multiplies by 0.5 first, then by x)

five elementwise dispatches forward and about as many backward, each reading and writing the
whole activation (a transformer's widest, 4 x d_model). Folded it is ONNX's Gelu (opset 20,
approximate "none": ``ops/unary.py``, the same erf), one dispatch each way. Each op may have
its operands in either order; nothing else may read the four intermediates (nor a caller,
``keep``), and the constants must be those numbers (float32-rounded).
"""

import math

from ..graph import Graph
from . import sole_reader

_NEAR = 1e-6  # relative: the float32 roundings of sqrt(2), 1 and 0.5 are within 1e-7


def _scalar(graph, name, want) -> bool:
    c = graph.constants.get(name)  # a scalar or [1]: a wider one would broadcast the output
    if c is None or len(c["values"]) != 1 or len(c.get("shape", [])) > 1:
        return False
    try:
        return abs(float(c["values"][0]) - want) <= _NEAR * want
    except (TypeError, ValueError):
        return False


def _other(node, name):
    """The other input of a two-input ``node`` that reads ``name``, else None."""
    ins = node["inputs"]
    if len(ins) != 2 or ins.count(name) != 1:
        return None
    return ins[1] if ins[0] == name else ins[0]


def _match(graph, div, keep):
    """(x, last Mul) when ``div`` starts the erf GELU of the module doc, else None."""
    x, two = div["inputs"][:2] if len(div["inputs"]) == 2 else (None, None)
    if x is None or not _scalar(graph, two, math.sqrt(2.0)):
        return None
    erf = sole_reader(graph, div["outputs"][0], keep)
    if erf is None or erf["op_type"] != "Erf":
        return None
    add = sole_reader(graph, erf["outputs"][0], keep)
    if add is None or add["op_type"] != "Add" or \
            not _scalar(graph, _other(add, erf["outputs"][0]), 1.0):
        return None
    # x * (1 + erf) then * 0.5 (TorchScript), or 0.5 * (1 + erf) then * x (dynamo): the same
    # floats, as a product with 0.5 is exact (subnormals aside)
    first = sole_reader(graph, add["outputs"][0], keep)
    if first is None or first["op_type"] != "Mul":
        return None
    by = _other(first, add["outputs"][0])
    if by != x and not _scalar(graph, by, 0.5):
        return None
    last = sole_reader(graph, first["outputs"][0], keep)
    if last is None or last["op_type"] != "Mul":
        return None
    other = _other(last, first["outputs"][0])
    if not (_scalar(graph, other, 0.5) if by == x else other == x):
        return None
    return x, last, (div, erf, add, first)


def fold(graph: Graph, shapes: dict, keep=()) -> Graph:
    """``graph`` with every erf GELU (module doc) one Gelu node, named after its Erf;
    ``graph`` itself when there is none. ``keep``: activation names a caller reads."""
    put, drop = {}, set()
    for node in graph.nodes:
        if node["op_type"] != "Div":
            continue
        found = _match(graph, node, keep)
        if found is None:
            continue
        x, half, parts = found
        put[id(half)] = {"name": parts[1]["name"], "op_type": "Gelu", "inputs": [x],
                         "outputs": [half["outputs"][0]], "attrs": {"approximate": "none"}}
        drop.update(id(n) for n in parts)
    if not put:
        return graph
    nodes = [put.get(id(n), n) for n in graph.nodes if id(n) not in drop]
    return Graph({**graph.desc, "nodes": nodes})

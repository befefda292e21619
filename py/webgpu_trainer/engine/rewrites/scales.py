"""Scalar Muls (and Divs by a scalar) next to MatMul folded into the product's scale
(``Plan.build`` applies ``fold``).

Attention scales its scores by 1 / sqrt(d), before the product or after it:

    MatMul(Mul(q, c1), Mul(k^T, c2))      (PyTorch's MultiheadAttention export: c = d^-1/4)
    MatMul(q, Transpose(Mul(k, c)))       (a scale before the layout ops of a head split)
    Mul(MatMul(q, k^T), c)                (attention written by hand)
    Div(MatMul(q, k^T), sqrt(d))          (likewise: scale 1 / sqrt(d))

Each Mul is a pass over a tensor forward and another backward, and a Mul between a Transpose
and the MatMul keeps ``transposes`` from folding that Transpose. Folded, the MatMul reads the
unscaled operands and scales what it stores (node attribute ``_alpha``, the product of the
constants; ``shaders/matmul.wgsl`` ``alpha``); its gradients are scaled the same way
(ops/matmul.py). A Mul is folded when its other input is a one-element constant of the model
description and the tensor it writes (or, after the product, the product) has the one reader
the fold removes, is not the graph output and not a name the caller keeps; between the Mul and
the product there may be layout ops (``LAYOUT``), each the only reader of its input: they then
move the unscaled values, under new names (``<name>::unscaled``), so that nothing reads them
under the old names as if scaled. The numbers are
those of alpha * (a @ b) instead of (c1 a) @ (c2 b): equal in exact arithmetic, within
float32 rounding otherwise.
"""

from ..graph import Graph
from . import sole_reader


# Ops that move values without changing them: a scale commutes with them.
LAYOUT = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity")


def _scalar(graph, name):
    """The value of ``name`` when it is a one-element float constant, else None."""
    c = graph.constants.get(name)
    if c is None or len(c.get("values", [])) != 1 or \
            c.get("dtype", "float32") not in ("float32", "float64", "float16"):
        return None
    return float(c["values"][0])


def _scaling(graph, shapes, node):
    """(tensor, scale) when ``node`` is Mul(tensor, c), Mul(c, tensor) or Div(tensor, c)
    (scale 1 / c) with ``c`` a nonzero scalar constant and the output of the tensor's shape
    (no broadcast beyond the scalar); else None."""
    if node is None or node["op_type"] not in ("Mul", "Div") or len(node["inputs"]) != 2:
        return None
    div = node["op_type"] == "Div"
    for i in (1,) if div else (0, 1):
        c, x = _scalar(graph, node["inputs"][i]), node["inputs"][1 - i]
        if c is not None and _scalar(graph, x) is None and x not in graph.constants and \
                shapes.get(x) == shapes.get(node["outputs"][0]) and not (div and c == 0.0):
            return x, (1.0 / c if div else c)
    return None


def fold(graph: Graph, shapes: dict, keep=()) -> Graph:
    """``graph`` with the scalar Muls of the module doc folded into their MatMuls; ``graph``
    itself when there is none."""
    put, drop = {}, set()  # id(MatMul) -> its new node; ids of Muls dropped
    for m in graph.nodes:
        if m["op_type"] != "MatMul":
            continue
        new, alpha = dict(m), float(m.get("attrs", {}).get("_alpha", 1.0))
        ins = list(m["inputs"])
        for i in (0, 1):
            if ins[0] == ins[1]:
                break
            # back from the operand through layout ops, each its input's only reader
            path, reader, name = [], m, ins[i]
            mul = graph.producer.get(name)
            while mul is not None and mul["op_type"] in LAYOUT and \
                    sole_reader(graph, name, keep) is reader:
                path.append(mul)
                reader, name = mul, mul["inputs"][0]
                mul = graph.producer.get(name)
            found = _scaling(graph, shapes, mul)
            if found is None or id(mul) in drop or sole_reader(graph, name, keep) is not reader:
                continue
            alpha *= found[1]
            drop.add(id(mul))
            src = found[0]
            for op in reversed(path):  # from the Mul's side: the layout ops move unscaled
                # values now, under new names (no caller reads the old ones as if scaled)
                cur = put.get(id(op), op)
                out = f"{cur['outputs'][0]}::unscaled"
                put[id(op)] = {**cur, "inputs": [src, *cur["inputs"][1:]],
                               "outputs": [out, *cur["outputs"][1:]]}
                src = out
            ins[i] = src
        y = m["outputs"][0]
        mul = sole_reader(graph, y, keep)
        found = _scaling(graph, shapes, mul)
        if found is not None and found[0] == y:
            new["outputs"] = list(mul["outputs"])
            alpha *= found[1]
            drop.add(id(mul))
        if alpha != float(m.get("attrs", {}).get("_alpha", 1.0)) or ins != m["inputs"] or \
                new["outputs"] != m["outputs"]:
            new["inputs"] = ins
            new["attrs"] = {**m.get("attrs", {}), "_alpha": alpha}
            put[id(m)] = new
    if not drop:
        return graph
    nodes = [put.get(id(n), n) for n in graph.nodes if id(n) not in drop]
    return Graph({**graph.desc, "nodes": nodes})

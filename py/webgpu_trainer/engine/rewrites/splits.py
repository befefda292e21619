"""Gathers that take every index of one activation's axis, one constant index each, folded
into one Split (``Plan.build`` applies ``fold``).

torch.onnx.export writes ``nn.MultiheadAttention``'s packed projections as

    qkv [3, ...] -> Gather(qkv, 0), Gather(qkv, 1), Gather(qkv, 2)   (axis 0, scalar indices)

Each Gather's gradient is a scatter into a whole-size buffer (zeros but for its part), and the
three are then summed: five whole-size passes backward. As ``Split(qkv, axis, [1, 1, 1])`` and
a ``Squeeze`` of the axis per part (a view: no dispatch), the gradient is each part's written
into its place, one pass; the forward copies the same values. The indices may be scalars (the
axis dropped: the Squeeze) or of shape [1] (the axis kept: an Identity), negative ones counting
from the end; together they must name every index of the axis exactly once, and the gathered
tensor must be an activation (weights: ``weight_layouts``).
"""

from ..graph import Graph


def _index(graph, node, shapes):
    """(x, axis, index, scalar) of a Gather by one constant index, else None."""
    ins = node["inputs"]
    if len(ins) != 2 or not ins[1]:
        return None
    c = graph.constants.get(ins[1])
    x = shapes.get(ins[0])
    if c is None or x is None or len(c["values"]) != 1 or list(c["shape"]) not in ([], [1]):
        return None
    axis = int(node.get("attrs", {}).get("axis", 0))
    if not -len(x) <= axis < len(x):
        return None
    axis %= len(x)
    try:
        index = int(c["values"][0])
    except (TypeError, ValueError):
        return None
    if not -x[axis] <= index < x[axis]:
        return None
    return ins[0], axis, index % x[axis], list(c["shape"]) == []


def fold(graph: Graph, shapes: dict, keep=()) -> Graph:
    """``graph`` with every group of Gathers of the module doc one Split plus a Squeeze (or
    Identity) per part, the Split where the group's first Gather stood; ``graph`` itself when
    there is none. The Gathers' outputs keep their names (``keep`` needs nothing more)."""
    groups: dict = {}
    for node in graph.nodes:
        if node["op_type"] == "Gather":
            found = _index(graph, node, shapes)
            if found is not None and found[0] not in graph.tensors and \
                    found[0] not in graph.constants:
                groups.setdefault(found[:2], []).append((found[2], found[3], node))
    names = set(graph.producer) | set(graph.tensors) | set(graph.constants) | \
        {graph.input["name"]}
    put, drop = {}, set()
    for (x, axis), items in groups.items():
        dim = shapes[x][axis]
        items.sort(key=lambda item: item[0])
        if dim < 2 or [i for i, _, _ in items] != list(range(dim)):
            continue
        first = min((n for _, _, n in items), key=graph.nodes.index)
        parts = [n["outputs"][0] + ".part" for _, _, n in items]
        split = {"name": first["name"] + ".split", "op_type": "Split", "inputs": [x],
                 "outputs": parts, "attrs": {"axis": axis, "split": [1] * dim}}
        if split["name"] in {n["name"] for n in graph.nodes} or names & set(parts):
            continue
        for (_, scalar, node), part in zip(items, parts):
            view = {"name": node["name"], "op_type": "Squeeze" if scalar else "Identity",
                    "inputs": [part], "outputs": [node["outputs"][0]],
                    "attrs": {"axes": [axis]} if scalar else {}}
            put[id(node)] = [split, view] if node is first else [view]
        drop.update(id(n) for _, _, n in items)
    if not put:
        return graph
    nodes = [m for n in graph.nodes for m in (put.get(id(n), [n]) if id(n) in drop else [n])]
    return Graph({**graph.desc, "nodes": nodes})

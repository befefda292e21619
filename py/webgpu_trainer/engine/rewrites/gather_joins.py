"""A node's weight Gathers over neighbouring weights joined into one (``Plan.build`` applies
``fold`` after ``weight_layouts``).

``weight_layouts`` turns torch.onnx.export's gate reorder of each LSTM / GRU weight into one
Gather: the layer's W, R and B are three Gathers forward and three gathers back every step,
though the four weights (weight_ih, weight_hh, bias_ih, bias_hh) lie next to each other in the
blob. Joined, one Gather reads a span over all of them with the three index lists end to end;
a Split cuts its output into the parts (views: ``fusion.split_offsets``, each part starting at
a multiple of 256 bytes) and a Reshape gives each its shape and old name. One dispatch each
way instead of three; the same copies, so the same floats.

Joined when one node reads two or more Gathers (axis 0, constant indices) that nothing else
reads (so each is joined once, before its one reader) whose sources are weights seen flat
(``<weight>::flat``) or spans over weights, the weights together lie next
to each other in the blob (``weight_layouts._adjacent``) and only these Gathers read them (a
span's gradient is written whole), and every part but the last is a multiple of 64 floats.
"""

from ..builder import Builder
from ..graph import Graph
from . import sole_reader
from .weight_layouts import MAX_ELEMENTS, _adjacent, _numel


def _weights_of(graph, name) -> tuple | None:
    """The weights a Gather's source ``name`` covers: the span's members, or the one weight of
    a ``<weight>::flat`` view; None for any other source."""
    t = graph.tensors.get(name)
    if t is not None and "members" in t:
        return tuple(t["members"])
    op = graph.producer.get(name)
    if op is not None and op["op_type"] == "Reshape" and op["outputs"][0] == \
            f"{op['inputs'][0]}::flat" and op["inputs"][0] in graph.tensors:
        return (op["inputs"][0],)
    return None


def _gather(graph, shapes, name):
    """(gather node, its weights) when ``name`` is a weight Gather's output; else None."""
    g = graph.producer.get(name)
    if g is None or g["op_type"] != "Gather" or int(g.get("attrs", {}).get("axis", 0)) or \
            len(g["inputs"]) != 2 or g["inputs"][1] not in graph.constants or \
            shapes.get(name) is None:
        return None
    ws = _weights_of(graph, g["inputs"][0])
    return None if ws is None else (g, ws)


def _alone(graph, found, keep) -> bool:
    """Whether only the Gathers of ``found`` read their weights (through the flat views)."""
    gathers = {id(g) for g, _ in found}
    for g, _ in found:
        src = g["inputs"][0]
        readers = graph.consumers.get(src, [])
        if src in keep or any(id(r) not in gathers for r in readers):
            return False
        op = graph.producer.get(src)
        if op is not None and len(graph.consumers.get(op["inputs"][0], [])) != 1:
            return False
        if op is None and any(graph.consumers.get(m) for m in graph.tensors[src]["members"]):
            return False
    return all(w not in keep and w != graph.output for _, ws in found for w in ws)


def fold(graph: Graph, shapes: dict, keep=()) -> Graph:
    """``graph`` with each node's weight Gathers joined (module doc); ``graph`` itself when
    there are none to join. ``keep``: tensor names a caller reads."""
    if not Builder.WEIGHT_SPANS:
        return graph
    nodes, consts = list(graph.nodes), dict(graph.constants)
    tensors, drop, added = list(graph.desc["tensors"]), set(), []
    for node in graph.nodes:
        seen, found = set(), []
        for name in node["inputs"]:  # Gathers whose one reader is this node (joined once)
            hit = _gather(graph, shapes, name) if name and name not in seen and \
                sole_reader(graph, name, keep) is node else None
            seen.add(name)
            if hit is not None:
                found.append(hit)
        if len(found) < 2:
            continue
        weights = sorted({w for _, ws in found for w in ws},
                         key=lambda w: graph.tensors[w]["offset"])
        sizes = [_numel(shapes[g["outputs"][0]]) for g, _ in found]
        if len(weights) != sum(len(ws) for _, ws in found) or \
                not _adjacent(graph, weights) or not _alone(graph, found, keep) or \
                any(s % 64 for s in sizes[:-1]) or sum(sizes) > MAX_ELEMENTS:
            continue
        t = graph.tensors
        lo = t[weights[0]]["offset"]
        hi = t[weights[-1]]["offset"] + t[weights[-1]]["nbytes"]
        role = "param" if any(t[w]["role"] == "param" for w in weights) else "buffer"
        span = f"{weights[0]}::joined"
        tensors.append({"name": span, "shape": [(hi - lo) // 4], "dtype": "float32",
                        "offset": lo, "nbytes": hi - lo, "role": role, "members": weights})
        indices = []
        for g, ws in found:
            start = t[g["inputs"][0]]["offset"] if g["inputs"][0] in t else t[ws[0]]["offset"]
            indices += [int(i) + (start - lo) // 4 for i in consts[g["inputs"][1]]["values"]]
            drop.add(id(g))
            op = graph.producer.get(g["inputs"][0])
            if op is not None:
                drop.add(id(op))
        out = f"{span}/out"
        consts[f"{span}/indices"] = {"dtype": "int64", "shape": [len(indices)],
                                     "values": indices}
        parts = [f"{g['outputs'][0]}::part" for g, _ in found]
        added.append((node, [
            {"name": f"{span}/Gather", "op_type": "Gather", "inputs": [span, f"{span}/indices"],
             "outputs": [out], "attrs": {"axis": 0}},
            {"name": f"{span}/Split", "op_type": "Split", "inputs": [out], "outputs": parts,
             "attrs": {"axis": 0, "split": sizes}}] + [
            {"name": f"{g['outputs'][0]}::view", "op_type": "Reshape",
             "inputs": [part, f"{part}/shape"], "outputs": [g["outputs"][0]],
             "attrs": {"allowzero": 0}} for (g, _), part in zip(found, parts)]))
        for (g, _), part in zip(found, parts):
            shape = shapes[g["outputs"][0]]
            consts[f"{part}/shape"] = {"dtype": "int64", "shape": [len(shape)],
                                       "values": list(shape)}
    if not added:
        return graph
    before = {id(n): new for n, new in added}
    out_nodes = []
    for n in nodes:
        out_nodes += before.get(id(n), [])
        if id(n) not in drop:
            out_nodes.append(n)
    used = {i for n in out_nodes for i in n["inputs"]}
    tensors = [d for d in tensors if "members" not in d or d["name"] in used]
    return Graph({**graph.desc, "nodes": out_nodes, "constants": consts, "tensors": tensors})

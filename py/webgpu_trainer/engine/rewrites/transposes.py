"""Transposes around MatMul folded into the product's strides (``Plan.build`` applies ``fold``).

Attention written by hand (and torch.onnx.export of it) splits heads and puts them back with
Transposes next to the batched products:

    q = Transpose(Reshape(Linear(x)), [0, 2, 1, 3]);  k^T = Transpose(., [0, 2, 3, 1])
    scores = MatMul(q, k^T);  y = Transpose(MatMul(softmax, v), [0, 2, 1, 3])

Each Transpose is a copy forward and another backward. Folded, the MatMul reads its operand
through the permuted strides of the Transpose's input (node attribute ``_perm0`` / ``_perm1``:
operand i is ``Transpose(input i, perm)``) and writes its output already permuted (``_perm_y``:
the node's output is ``Transpose(product, perm)``); its gradients are written and read through
the same strides (ops/matmul.py). Folded only where nothing else reads what the fold drops
(the Transpose's output, or the product before its Transpose), not a graph output nor a name
the caller keeps; operands and outputs of rank >= 3 (a 2-D Transpose of a weight is
``linears``' and ``weight_layouts``').
"""

from ..graph import Graph


def _sole_reader(graph, name, keep):
    """The one node that reads ``name``, when it is not an output or kept; else None."""
    users = graph.consumers.get(name, [])
    if len(users) != 1 or name == graph.output or name in keep:
        return None
    return users[0]


def _perm(node, rank):
    """A Transpose's perm (default: the axes reversed)."""
    perm = (node.get("attrs") or {}).get("perm")
    return list(range(rank))[::-1] if perm is None else [int(p) for p in perm]


def fold(graph: Graph, shapes: dict, keep=()) -> Graph:
    """``graph`` with the Transposes of the module doc folded into their MatMuls; ``graph``
    itself when there is none."""
    put, drop = {}, set()  # id(MatMul) -> its new node; ids of Transposes dropped
    for t in graph.nodes:
        if t["op_type"] != "Transpose" or t["inputs"][0] in graph.tensors or \
                t["inputs"][0] in graph.constants:
            continue
        x, out = t["inputs"][0], t["outputs"][0]
        rank = len(shapes.get(x, ()))
        perm = _perm(t, rank)
        if rank < 3 or sorted(perm) != list(range(rank)):
            continue
        # the product's output, permuted: MatMul -> Transpose, the MatMul's only reader
        src = graph.producer.get(x)
        if src is not None and src["op_type"] == "MatMul" and _sole_reader(graph, x, keep) is t:
            m = put.get(id(src), src)
            if "_perm_y" not in m.get("attrs", {}):
                put[id(src)] = {**m, "outputs": [out], "attrs": {**m.get("attrs", {}),
                                                                 "_perm_y": perm}}
                drop.add(id(t))
                continue
        # an operand, permuted: Transpose -> MatMul(s) only
        users = graph.consumers.get(out, [])
        if not users or out == graph.output or out in keep or \
                any(u["op_type"] != "MatMul" for u in users):
            continue
        edits = []
        for u in {id(u): u for u in users}.values():
            m = put.get(id(u), u)
            slots = [i for i, name in enumerate(m["inputs"][:2]) if name == out]
            if any(f"_perm{i}" in m.get("attrs", {}) for i in slots) or \
                    any(len(shapes.get(name, ())) < 2 for name in m["inputs"][:2]):
                break
            attrs = {**m.get("attrs", {}), **{f"_perm{i}": perm for i in slots}}
            ins = [x if i in slots else name for i, name in enumerate(m["inputs"])]
            edits.append((id(u), {**m, "inputs": ins, "attrs": attrs}))
        else:
            put.update(edits)
            drop.add(id(t))
    if not drop:
        return graph
    nodes = [put.get(id(n), n) for n in graph.nodes if id(n) not in drop]
    return Graph({**graph.desc, "nodes": nodes})

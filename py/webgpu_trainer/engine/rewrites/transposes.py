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

from ..builder import Builder
from ..graph import Graph
from . import rows, sole_reader

_ROUNDS = 8  # commute passes at most (each moves a Transpose one op group further)


def _perm(node, rank):
    """A Transpose's perm (default: the axes reversed)."""
    perm = (node.get("attrs") or {}).get("perm")
    return list(range(rank))[::-1] if perm is None else [int(p) for p in perm]


def _groups(src, dst):
    """For each dim of ``src`` the consecutive dims of ``dst`` it splits into (a dim of size 1
    may split into none), when ``dst`` only splits dims of ``src``; else None."""
    out, j = [], 0
    for size in src:
        group, prod = [], 1
        while prod < size and j < len(dst):
            group.append(dst[j])
            prod *= dst[j]
            j += 1
        if prod != size:
            return None
        out.append(group)
    return out if j == len(dst) else None


_VIEWS = ("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity")


def _collapse_views(graph: Graph, shapes: dict, keep):
    """(graph, shapes): two views in a row (the first read only by the second) as one Reshape
    to the second's concrete shape; a Transpose read only by a view of its own output shape
    writes that view's output (dynamo's head merge and split back: [3, 2, 28, 8] -> [6, 28, 8]
    -> [3, 2, 28, 8]). What stands between Transposes then goes, and they compose."""
    nodes, consts = list(graph.nodes), dict(graph.constants)
    put, drop = {}, set()
    for r in graph.nodes:
        if r["op_type"] not in _VIEWS or r["outputs"][0] not in shapes or not r["inputs"]:
            continue
        x = r["inputs"][0]
        orig = graph.producer.get(x)
        if orig is None or id(orig) in drop or sole_reader(graph, x, keep) is not r:
            continue
        first = put.get(id(orig), orig)  # as an earlier collapse of this pass left it
        out = r["outputs"][0]
        if first["op_type"] == "Transpose" and list(shapes[out]) == list(shapes.get(x, ())):
            put[id(orig)] = {**first, "outputs": [out]}
            drop.add(id(r))
        elif first["op_type"] in _VIEWS and first["inputs"][0] not in graph.tensors and \
                first["inputs"][0] not in graph.constants:
            name = f"{out}/shape"
            consts[name] = {"dtype": "int64", "shape": [len(shapes[out])],
                            "values": [int(d) for d in shapes[out]]}
            put[id(r)] = {"name": r["name"], "op_type": "Reshape",
                          "inputs": [first["inputs"][0], name], "outputs": [out], "attrs": {}}
            drop.add(id(orig))
    if not drop:
        return graph
    nodes = [put.get(id(n), n) for n in graph.nodes if id(n) not in drop]
    return Graph({**graph.desc, "nodes": nodes, "constants": consts})


def _into_gather(graph: Graph, shapes: dict, keep) -> Graph:
    """Each Transpose read only by a Gather of one constant scalar index, where the Transpose
    keeps the order of the other dims, as that Gather along the input's axis: an LSTM's last
    step of a batch-first output (Transpose [1, 0, 2] of [T, N, H], then Gather index -1 along
    axis 1) is Gather index -1 along axis 0 of [T, N, H], no copy."""
    put, drop = {}, set()
    for t in graph.nodes:
        if t["op_type"] != "Transpose" or t["inputs"][0] not in shapes:
            continue
        g = sole_reader(graph, t["outputs"][0], keep)
        if g is None or g["op_type"] != "Gather" or g["inputs"][0] != t["outputs"][0]:
            continue
        idx = graph.constants.get(g["inputs"][1]) if len(g["inputs"]) > 1 else None
        rank = len(shapes[t["inputs"][0]])
        axis = int((g.get("attrs") or {}).get("axis", 0)) % max(rank, 1)
        perm = _perm(t, rank)
        rest = perm[:axis] + perm[axis + 1:]
        if idx is None or idx.get("shape") or len(idx.get("values") or ()) != 1 or \
                rest != sorted(rest):
            continue
        put[id(g)] = {**g, "inputs": [t["inputs"][0], *g["inputs"][1:]],
                      "attrs": {**(g.get("attrs") or {}), "axis": perm[axis]}}
        drop.add(id(t))
    if not drop:
        return graph
    return Graph({**graph.desc, "nodes": [put.get(id(n), n) for n in graph.nodes
                                           if id(n) not in drop]})


def _commute(graph: Graph, shapes: dict, keep):
    """(graph, shapes): each Transpose whose one reader is a Reshape that only splits its
    output's dims (nn.MultiheadAttention's export: [65, 32, 16] -> [32, 65, 16] -> [8, 4, 65,
    16]) as a Reshape of the input splitting the same dims (a view) and then one Transpose of
    the finer dims; and each Transpose that is the one reader of another Transpose as one of
    the two perms composed (an Identity where they undo each other). The Transposes then stand
    next to the MatMuls ``fold`` folds."""
    nodes, consts, shapes = list(graph.nodes), dict(graph.constants), dict(shapes)
    changed = False
    for t in graph.nodes:
        if t["op_type"] != "Transpose":
            continue
        x, mid = t["inputs"][0], t["outputs"][0]
        r = sole_reader(graph, mid, keep)
        src = shapes.get(x)
        if r is None or r["op_type"] not in ("Reshape", "Unsqueeze", "Squeeze") or \
                src is None or x in graph.tensors or x in graph.constants:
            continue
        made = graph.producer.get(x)
        if made is not None and made["op_type"] == "MatMul" and \
                sole_reader(graph, x, keep) is t:
            continue  # the product writes it permuted already (``fold``'s _perm_y)
        perm = _perm(t, len(src))
        groups = _groups([src[q] for q in perm], shapes.get(r["outputs"][0], []))
        if groups is None or all(len(g) == 1 for g in groups):
            continue
        of_input = [None] * len(src)  # input dim -> the group of dims it splits into
        for i, q in enumerate(perm):
            of_input[q] = groups[i]
        split = [d for g in of_input for d in g]
        starts = [sum(len(g) for g in of_input[:q]) for q in range(len(src))]
        fine = [starts[q] + k for q in perm for k in range(len(of_input[q]))]
        name = f"{mid}::split"
        consts[f"{name}/shape"] = {"dtype": "int64", "shape": [len(split)], "values": split}
        shapes[name] = split
        pre = {"name": f"{r['name']}::split", "op_type": "Reshape",
               "inputs": [x, f"{name}/shape"], "outputs": [name], "attrs": {}}
        post = {"name": t["name"], "op_type": "Transpose", "inputs": [name],
                "outputs": list(r["outputs"]), "attrs": {"perm": fine}}
        at = next(i for i, n in enumerate(nodes) if n is r)
        nodes[at:at + 1] = [pre, post]
        del nodes[next(i for i, n in enumerate(nodes) if n is t)]
        changed = True
    if changed:
        graph = Graph({**graph.desc, "nodes": nodes, "constants": consts})
    composed, drop, perms = {}, set(), {}  # perms: id(Transpose) -> its composed perm
    for t2 in graph.nodes:
        t1 = graph.producer.get(t2["inputs"][0]) if t2["op_type"] == "Transpose" else None
        if t1 is None or t1["op_type"] != "Transpose" or id(t1) in drop or \
                sole_reader(graph, t1["outputs"][0], keep) is not t2 or \
                t1["inputs"][0] not in shapes:
            continue
        src = composed.get(id(t1), t1)["inputs"][0]
        rank = len(shapes[src])
        p1, p2 = perms.get(id(t1)) or _perm(t1, rank), _perm(t2, rank)
        perm = perms[id(t2)] = [p1[q] for q in p2]
        composed[id(t2)] = {**t2, "inputs": [src], "attrs": {**t2.get("attrs", {}),
                                                             "perm": perm}}
        if perm == list(range(rank)):  # the two undo each other: a view
            composed[id(t2)] = {"name": t2["name"], "op_type": "Identity", "inputs": [src],
                                "outputs": list(t2["outputs"]), "attrs": {}}
        drop.add(id(t1))
    if drop:
        graph = Graph({**graph.desc, "nodes": [composed.get(id(n), n) for n in graph.nodes
                                               if id(n) not in drop]})
    return graph, shapes


def fold(graph: Graph, shapes: dict, keep=()) -> Graph:
    """``graph`` with the Transposes of the module doc folded into their MatMuls (after
    ``_commute`` moved them past the Reshapes that split their dims); ``graph`` itself when
    there is none."""
    if Builder.COMMUTE_TRANSPOSES:
        for _ in range(_ROUNDS):
            before = graph
            graph, shapes = rows.commute(graph, shapes, keep)
            graph = _collapse_views(graph, shapes, keep)
            graph = _into_gather(graph, shapes, keep)
            graph, shapes = _commute(graph, shapes, keep)
            if graph is before:
                break
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
        if src is not None and src["op_type"] == "MatMul" and \
                sole_reader(graph, x, keep) is t and \
                all(len(shapes.get(n, ())) >= 2 for n in src["inputs"][:2]):
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

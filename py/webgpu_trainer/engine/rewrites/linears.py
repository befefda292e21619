"""Linear layers written as MatMul folded into one Gemm each (``Plan.build`` applies ``fold``).

torch.onnx.export writes ``nn.Linear`` on a 3-D input (a transformer's tokens) as

    MatMul(x, Transpose(W)) -> Add(b, .)        (or MatMul(x, W^T stored) -> Add)

which dispatches the weight's transpose, the product and the bias Add forward, and their
gradients backward (the transpose's, the Add's bias sum) every step. Folded:

    Reshape(x, [-1, K]) -> Gemm(., W, b, transB=1) -> Reshape(., [-1, *rows, out])

Views are free, the transpose becomes the Gemm's strides (``ops/gemm.py``) and the bias its
epilogue (a ReLU after a 2-D product may then fuse into it, ``fusion.py``). A MatMul is
folded only where nothing else reads what the fold drops: the transpose's output and the
product before its bias. The numbers are those of the same sums (the bias added after the
product, as the Add did); the gradients the Gemm's own.
"""

from ..graph import Graph


def _weight_b(graph, shapes, node, keep):
    """(W, transB) when the MatMul's B is a 2-D weight or a Transpose (perm [1, 0]) of one
    that only this MatMul reads (and no caller, ``keep``); else None."""
    b = node["inputs"][1]
    if b in graph.tensors:
        return (b, 0) if len(shapes[b]) == 2 else None
    t = graph.producer.get(b)
    if t is None or t["op_type"] != "Transpose" or len(graph.consumers.get(b, [])) != 1 \
            or b == graph.output or b in keep:
        return None
    w = t["inputs"][0]
    perm = (t.get("attrs") or {}).get("perm")
    if w not in graph.tensors or len(shapes[w]) != 2 or perm not in (None, [1, 0]):
        return None
    return w, 1


def _bias_add(graph, shapes, node, keep):
    """The Add that adds a 1-D weight [out] to the product, when it is the product's only
    reader and the product is not in ``keep``; else None."""
    y = node["outputs"][0]
    users = graph.consumers.get(y, [])
    if len(users) != 1 or y == graph.output or y in keep or users[0]["op_type"] != "Add":
        return None
    add = users[0]
    other = [i for i in add["inputs"] if i != y]
    if len(add["inputs"]) != 2 or len(other) != 1 or other[0] not in graph.tensors or \
            shapes[other[0]] != [shapes[y][-1]] or shapes[add["outputs"][0]] != shapes[y]:
        return None
    return add


def fold(graph: Graph, shapes: dict, keep=()) -> Graph:
    """``graph`` with each foldable MatMul (module doc) and its dropped Transpose / bias Add
    replaced by views around one Gemm; ``graph`` itself when there is none. ``shapes``:
    ``graph.shapes`` at the plan's batch; ``keep``: activation names a caller reads (a product
    named there keeps its own Add)."""
    drop, put, consts = set(), {}, dict(graph.constants)
    for node in graph.nodes:
        if node["op_type"] != "MatMul" or len(shapes[node["inputs"][0]]) < 2:
            continue
        wb = _weight_b(graph, shapes, node, keep)
        if wb is None:
            continue
        w, trans = wb
        x, y = node["inputs"][0], node["outputs"][0]
        add = _bias_add(graph, shapes, node, keep)
        out = add["outputs"][0] if add else y
        k, rows = shapes[x][-1], shapes[x][:-1]
        name = node["name"]
        nodes, a, g = [], x, out
        if len(rows) > 1:  # [..., K] viewed [-1, K]; the Gemm's [M, out] viewed back
            a, g = f"{name}::rows", f"{name}::gemm"
            consts[a + "/shape"] = {"dtype": "int64", "shape": [2], "values": [-1, k]}
            tail = [-1] + list(shapes[out][1:])
            consts[g + "/shape"] = {"dtype": "int64", "shape": [len(tail)], "values": tail}
            nodes.append({"name": a, "op_type": "Reshape", "inputs": [x, a + "/shape"],
                          "outputs": [a], "attrs": {"allowzero": 0}})
        ins = [a, w] + ([i for i in add["inputs"] if i != y] if add else [])
        nodes.append({"name": name, "op_type": "Gemm", "inputs": ins, "outputs": [g],
                      "attrs": {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": trans}})
        if g != out:
            nodes.append({"name": g, "op_type": "Reshape", "inputs": [g, g + "/shape"],
                          "outputs": [out], "attrs": {"allowzero": 0}})
        put[id(add or node)] = nodes
        drop.add(id(node))
        if trans:
            drop.add(id(graph.producer[node["inputs"][1]]))
    if not put:
        return graph
    nodes = []
    for node in graph.nodes:
        if id(node) in put:
            nodes += put[id(node)]
        elif id(node) not in drop:
            nodes.append(node)
    return Graph({**graph.desc, "nodes": nodes, "constants": consts})

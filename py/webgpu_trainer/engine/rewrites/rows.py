"""Transposes of row axes moved through row-wise Gemms (``transposes.fold`` applies ``commute``
while ``Builder.COMMUTE_TRANSPOSES``).

``linears`` writes a MatMul of activations [..., K] by a weight as Reshape to [rows, K] ->
Gemm -> Reshape to [..., N]: each output row depends on its input row alone. A Transpose that
permutes only the leading (row) axes and leaves the trailing K axes in place therefore gives the
same numbers on either side of it:

    Transpose(P) -> Reshape [rows, K] -> Gemm -> Reshape [lead', N...]
      ==  Reshape [rows, K] -> Gemm -> Reshape [lead, N...] -> Transpose(P + identity)

nn.MultiheadAttention's export (nn.TransformerEncoderLayer, batch_first or not) works seq-first
inside: a Transpose [1, 0, 2] before in_proj and another after out_proj, a copy each way each.
Moved down, the first meets the qkv Transpose (``transposes._commute`` composes the two); moved
up, the second meets the head merge that the attention product already writes permuted
(``_perm_y``): two copies fewer forward and two backward in every attention layer.

A Transpose moves only toward a partner (another Transpose to compose with, a MatMul to fold
into: ``_meets``), or to where its copy is narrower, and never away from a partner it already
meets (``_worth``). Moved only where nothing else reads what changes order (the Transpose's
output, the Gemm's input and output rows: ``sole_reader``; not a name the caller keeps), the
Gemm has transA = 0 and a bias of one row (or none), and the row axes line up: the leading
axes of the tensor on the Transpose's side multiply to the Gemm's rows, the Reshape on the
other side keeps them.
Tensors whose rows change order take new names (``::unpermuted`` / ``::permuted``).
"""

import math

from ..graph import Graph
from . import sole_reader


def _perm(node, rank):
    perm = (node.get("attrs") or {}).get("perm")
    return list(range(rank))[::-1] if perm is None else [int(p) for p in perm]


def _lead(shape, rows):
    """How many leading dims of ``shape`` multiply to ``rows`` (None: no prefix does)."""
    prod = 1
    for j, d in enumerate(shape):
        if prod == rows and j > 0:
            return j
        prod *= d
    return len(shape) if prod == rows and shape else None


def _row_perm(perm, j) -> bool:
    """``perm`` permutes the first ``j`` axes among themselves and fixes the rest."""
    return sorted(perm[:j]) == list(range(j)) and perm[j:] == list(range(j, len(perm)))


def _gemm_of(graph, shapes, rows_out, keep):
    """(Gemm, its output Reshape) when ``rows_out`` is read only by a row-wise Gemm as A (transA
    0, a one-row bias or none) whose output only a Reshape reads; else None."""
    g = sole_reader(graph, rows_out, keep)
    if g is None or g["op_type"] != "Gemm" or g["inputs"][0] != rows_out or \
            g["inputs"][1] == rows_out or (g.get("attrs") or {}).get("transA", 0):
        return None
    if len(g["inputs"]) > 2 and g["inputs"][2]:
        c = g["inputs"][2]
        shape = shapes.get(c)
        if shape is None:
            shape = (graph.tensors.get(c) or graph.constants.get(c) or {}).get("shape")
        if shape is None or len(shape) > 2 or (len(shape) == 2 and shape[0] != 1):
            return None
    r2 = sole_reader(graph, g["outputs"][0], keep)
    if r2 is None or r2["op_type"] != "Reshape":
        return None
    return g, r2


_VIEWS = ("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity")


def _meets(graph, name, keep, down: bool) -> bool:
    """Whether a Transpose put at ``name`` would meet, through views each the only reader
    (``down``) or the only producer of the next, a Transpose to compose with or a MatMul to
    fold into (``transposes``): then moving it wider costs nothing."""
    for _ in range(8):
        node = sole_reader(graph, name, keep) if down else graph.producer.get(name)
        if node is None:
            return False
        if node["op_type"] in ("Transpose", "MatMul"):
            return True
        if node["op_type"] not in _VIEWS or (not down and sole_reader(
                graph, node["outputs"][0], keep) is None):
            return False
        name = node["outputs"][0] if down else node["inputs"][0]
    return False


def _worth(graph, keep, here, there, narrows: bool, down: bool) -> bool:
    """Whether to move a Transpose from ``here`` (its input when moving ``down``, its output
    when moving up) to ``there``: not when it already meets a partner where it is; else when
    it meets one there, or its copy gets narrower. So a Transpose never moves back (it met a
    partner where it went, or it would widen), and the fixpoint loop ends."""
    if _meets(graph, here, keep, down=not down):
        return False
    return narrows or _meets(graph, there, keep, down=down)


def _shape_const(consts, name, shape):
    consts[name] = {"dtype": "int64", "shape": [len(shape)], "values": [int(d) for d in shape]}
    return name


def commute(graph: Graph, shapes: dict, keep=()):
    """``(graph, shapes)`` with each Transpose of the module doc moved to the Gemm's other side
    (one move per Transpose a call; ``transposes`` calls it until nothing moves); the same
    ``graph`` when none moves."""
    nodes, consts, shapes = list(graph.nodes), dict(graph.constants), dict(shapes)
    done = set()  # ids of nodes replaced this call
    for t in graph.nodes:
        if t["op_type"] != "Transpose" or id(t) in done:
            continue
        x, y = t["inputs"][0], t["outputs"][0]
        if x in graph.tensors or x in graph.constants or x not in shapes or y not in shapes:
            continue
        perm = _perm(t, len(shapes[x]))
        edit = _down(graph, shapes, keep, t, x, y, perm, consts) or \
            _up(graph, shapes, keep, t, x, perm, consts)
        if edit is None or any(id(n) in done for n, _ in edit):
            continue
        for old, new in edit:
            done.add(id(old))
            at = next(i for i, n in enumerate(nodes) if n is old)
            nodes[at:at + 1] = new
    if not done:
        return graph, shapes
    return Graph({**graph.desc, "nodes": nodes, "constants": consts}), shapes


def _down(graph, shapes, keep, t, x, y, perm, consts):
    """Transpose -> Reshape [rows, K] -> Gemm -> Reshape: the Transpose after the last Reshape.
    Returns [(old node, [new nodes])] or None."""
    r1 = sole_reader(graph, y, keep)
    if r1 is None or r1["op_type"] != "Reshape":
        return None
    rows_shape = shapes.get(r1["outputs"][0], [])
    if len(rows_shape) != 2:
        return None
    j = _lead(shapes[y], rows_shape[0])
    found = _gemm_of(graph, shapes, r1["outputs"][0], keep)
    if j is None or j < 2 or not _row_perm(perm, j) or found is None:
        return None
    g, r2 = found
    out = shapes.get(r2["outputs"][0], [])
    if list(out[:j]) != list(shapes[y][:j]) or math.prod(out[j:]) != shapes[g["outputs"][0]][1]:
        return None
    if not _worth(graph, keep, x, r2["outputs"][0], rows_shape[1] > shapes[g["outputs"][0]][1],
                  down=True):
        return None
    rows, gy = f"{r1['outputs'][0]}::unpermuted", f"{g['outputs'][0]}::unpermuted"
    mid = f"{r2['outputs'][0]}::unpermuted"
    lead = [shapes[x][q] for q in range(j)]
    shapes[rows], shapes[gy], shapes[mid] = list(rows_shape), list(shapes[g["outputs"][0]]), \
        lead + list(out[j:])
    new_r1 = {**r1, "inputs": [x, _shape_const(consts, f"{rows}/shape", rows_shape)],
              "outputs": [rows]}
    new_g = {**g, "inputs": [rows, *g["inputs"][1:]], "outputs": [gy]}
    new_r2 = {**r2, "inputs": [gy, _shape_const(consts, f"{mid}/shape", shapes[mid])],
              "outputs": [mid]}
    new_t = {**t, "inputs": [mid], "outputs": list(r2["outputs"]),
             "attrs": {**(t.get("attrs") or {}),
                       "perm": perm[:j] + list(range(j, len(shapes[mid])))}}
    return [(t, []), (r1, [new_r1]), (g, [new_g]), (r2, [new_r2, new_t])]


def _up(graph, shapes, keep, t, x, perm, consts):
    """Reshape [rows, K] -> Gemm -> Reshape -> Transpose: the Transpose before the first
    Reshape. Returns [(old node, [new nodes])] or None."""
    r2 = graph.producer.get(x)
    if r2 is None or r2["op_type"] != "Reshape" or sole_reader(graph, x, keep) is not t:
        return None
    g = graph.producer.get(r2["inputs"][0])
    if g is None or g["op_type"] != "Gemm":
        return None
    r1 = graph.producer.get(g["inputs"][0])
    if r1 is None or r1["op_type"] != "Reshape" or \
            _gemm_of(graph, shapes, r1["outputs"][0], keep) != (g, r2):
        return None
    src = r1["inputs"][0]
    rows_shape = shapes.get(r1["outputs"][0], [])
    if len(rows_shape) != 2 or src not in shapes:
        return None
    j = _lead(shapes[x], rows_shape[0])
    if j is None or j < 2 or not _row_perm(perm, j) or list(shapes[src][:j]) != \
            list(shapes[x][:j]):
        return None
    if not _worth(graph, keep, t["outputs"][0], src,
                  rows_shape[1] < shapes[g["outputs"][0]][1], down=False):
        return None
    permuted = f"{src}::permuted"
    rows, gy = f"{r1['outputs'][0]}::permuted", f"{g['outputs'][0]}::permuted"
    if permuted in shapes:  # src read by two such chains: one move this call
        return None
    full = perm[:j] + list(range(j, len(shapes[src])))
    shapes[permuted] = [shapes[src][q] for q in full]
    shapes[rows], shapes[gy] = list(rows_shape), list(shapes[g["outputs"][0]])
    y = t["outputs"][0]
    new_t = {**t, "inputs": [src], "outputs": [permuted], "attrs": {
        **(t.get("attrs") or {}), "perm": full}}
    new_r1 = {**r1, "inputs": [permuted, _shape_const(consts, f"{rows}/shape", rows_shape)],
              "outputs": [rows]}
    new_g = {**g, "inputs": [rows, *g["inputs"][1:]], "outputs": [gy]}
    new_r2 = {**r2, "inputs": [gy, _shape_const(consts, f"{y}::rows/shape", shapes[y])],
              "outputs": [y]}
    return [(r1, [new_t, new_r1]), (g, [new_g]), (r2, [new_r2]), (t, [])]

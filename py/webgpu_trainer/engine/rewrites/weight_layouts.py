"""Weight rearrangements folded into one Gather each (``Plan.build`` applies ``fold``).

A chain of Slice, Concat, Transpose and views (Reshape, Flatten, Squeeze, Unsqueeze, Identity)
whose data all comes from ONE weight tensor is a fixed rearrangement of that weight's elements:
torch.onnx.export writes one for every LSTM / GRU weight (three Slices and a Concat that put
torch's gate order i, f, g, o into ONNX's i, o, f, c). Dispatched op by op it costs one copy per
Slice and per Concat input, forward and backward, every step (an LSTM: 26 of a step's 88
dispatches at batch 64). Folded, each tensor of the chain that something outside it reads
becomes

    Gather(Reshape(weight, [-1]), indices, axis=0)

with the indices (the weight's element each output element copies, shaped as the output)
computed here once: one dispatch forward and one backward (``ops/gather.py``: a gather over the
host-made inverse, repeated indices summed in increasing order, as PyTorch's ``index_select``
backward). Copies only, so the same floats as the op-by-op chain.
"""

from ..graph import Graph
from ..ops import VIEWS
from ..ops.layout_rules import _strides, concat_axis, slice_spec, transpose_perm

MOVES = ("Concat", "Slice", "Transpose")
MAX_ELEMENTS = 1 << 18  # index lists are built in Python at plan build (Pyodide too)


def _pick(idx, shape, axes) -> list:
    """``idx`` (row-major over ``shape``) read at every output position, where ``axes`` gives
    per output dim (positions along an input dim, that dim): offsets summed dim by dim."""
    st = _strides(shape)
    offs = [0]
    for positions, dim in axes:
        offs = [o + p * st[dim] for o in offs for p in positions]
    return [idx[o] for o in offs]


def _moved(node, ins, consts, out_shape):
    """The element indices of ``node``'s output from its data inputs' ``ins`` ((idx, shape)
    each); None for an op this module does not fold."""
    op = node["op_type"]
    if op in VIEWS:
        return ins[0][0]
    idx, shape = ins[0]
    if op == "Slice":
        spec = slice_spec(node, shape, consts)
        return _pick(idx, shape, [([s + k * st for k in range(c)], d)
                                  for d, (s, st, c) in enumerate(spec)])
    if op == "Transpose":
        perm = transpose_perm(node, len(shape))
        return _pick(idx, shape, [(range(shape[p]), p) for p in perm])
    axis = concat_axis(node, [s for _, s in ins])
    outer = 1
    for d in shape[:axis]:
        outer *= d
    out = []
    for o in range(outer):
        for part, _ in ins:
            block = len(part) // outer
            out += part[o * block:(o + 1) * block]
    return out


def _cost(node) -> int:
    """Dispatches of ``node`` forward (Concat: one per input; views: none)."""
    op = node["op_type"]
    return 0 if op in VIEWS else len(node["inputs"]) if op == "Concat" else 1


def fold(graph: Graph, shapes: dict, keep=()) -> Graph:
    """``graph`` with every weight rearrangement of at least two dispatches folded into a
    Gather (module doc); ``graph`` itself when there is none. ``shapes``: ``graph.shapes``;
    ``keep``: tensor names a caller reads (each stays, as a Gather of its own if folded).
    Weights, inputs, outputs and every other node are kept as they are."""
    consts = graph.constants
    chain = {}  # tensor -> (weight, element indices, dispatches of the chain up to it)
    for node in graph.nodes:
        op = node["op_type"]
        if op not in MOVES and op not in VIEWS or not node["outputs"] or not node["outputs"][0]:
            continue
        data = node["inputs"] if op == "Concat" else node["inputs"][:1]
        if any(not i or i in consts for i in data) or \
                any(i and i not in consts for i in node["inputs"][len(data):]):
            continue
        origin = []
        for name in data:
            if name in chain:
                origin.append(chain[name])
            elif name in graph.tensors and len(shapes[name]) and \
                    _numel(shapes[name]) <= MAX_ELEMENTS:
                origin.append((name, list(range(_numel(shapes[name]))), 0))
            else:
                break
        if len(origin) != len(data) or len({w for w, _, _ in origin}) != 1:
            continue
        out = node["outputs"][0]
        values = [consts[i]["values"] if i in consts else None for i in node["inputs"]]
        idx = _moved(node, [(ix, shapes[name]) for (_, ix, _), name in zip(origin, data)],
                     values, shapes[out])
        chain[out] = (origin[0][0], idx, sum(c for _, _, c in origin) + _cost(node))
    read_outside = {t for t in chain if t == graph.output or t in keep or any(
        not (n["outputs"] and n["outputs"][0] in chain) for n in graph.consumers.get(t, []))}
    folded = {t for t in read_outside if chain[t][2] >= 2}
    if not folded:
        return graph
    kept = set()  # chain tensors an unfolded reader still needs
    todo = [t for t in read_outside - folded]
    while todo:
        t = todo.pop()
        if t in kept:
            continue
        kept.add(t)
        if t not in folded:  # a folded tensor's Gather reads the weight itself
            todo += [i for i in graph.producer[t]["inputs"] if i in chain]
    nodes, constants, flat = [], dict(consts), {}
    for node in graph.nodes:
        out = node["outputs"][0] if node["outputs"] else None
        if out not in chain or out in kept and out not in folded:
            nodes.append(node)
            continue
        if out not in folded:
            continue
        w, idx, _ = chain[out]
        if w not in flat:
            flat[w] = f"{w}::flat"
            constants[flat[w] + "/shape"] = {"dtype": "int64", "shape": [1], "values": [-1]}
            nodes.append({"name": flat[w], "op_type": "Reshape", "inputs": [w, flat[w] + "/shape"],
                          "outputs": [flat[w]], "attrs": {"allowzero": 0}})
        constants[out + "::indices"] = {"dtype": "int64", "shape": list(shapes[out]),
                                        "values": idx}
        nodes.append({"name": node["name"], "op_type": "Gather",
                      "inputs": [flat[w], out + "::indices"], "outputs": [out],
                      "attrs": {"axis": 0}})
    return Graph({**graph.desc, "nodes": nodes, "constants": constants})


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n

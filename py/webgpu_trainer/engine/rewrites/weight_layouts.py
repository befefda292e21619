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

A chain may also join weights that lie next to each other in the weight blob (an LSTM's
bias_ih and bias_hh, Concat-ed after their reorders: four dispatches each way), when nothing
outside chains reads them (``Builder.WEIGHT_SPANS``): its Gather then reads a span tensor
added to the description, ``<first weight>::span``, covering those weights (and the padding
between them; ``members`` names them), whose gradient is their part of the flat gradient
buffer. The plan trains a span when it trains any member (``Plan``), masks only the members'
elements, and the guard reports members (``train/guard.watched``).
"""

from ..builder import Builder
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
    # tensor -> (weights, element indices (of the blob, in float32s), dispatches up to it)
    chain = {}
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
                    _numel(shapes[name]) <= MAX_ELEMENTS and "members" not in graph.tensors[name]:
                start = graph.tensors[name]["offset"] // 4
                origin.append(((name,), list(range(start, start + _numel(shapes[name]))), 0))
            else:
                break
        weights = tuple(sorted({w for ws, _, _ in origin for w in ws},
                               key=lambda w: graph.tensors[w]["offset"]))
        if len(origin) != len(data) or len(weights) > 1 and not (
                Builder.WEIGHT_SPANS and _adjacent(graph, weights)):
            continue
        out = node["outputs"][0]
        values = [consts[i]["values"] if i in consts else None for i in node["inputs"]]
        idx = _moved(node, [(ix, shapes[name]) for (_, ix, _), name in zip(origin, data)],
                     values, shapes[out])
        chain[out] = (weights, idx, sum(c for _, _, c in origin) + _cost(node))
    read_outside = {t for t in chain if t == graph.output or t in keep or any(
        not (n["outputs"] and n["outputs"][0] in chain) for n in graph.consumers.get(t, []))}
    folded = {t for t in read_outside if chain[t][2] >= 2 and (
        len(chain[t][0]) == 1 or _only_chains(graph, chain, chain[t][0], keep))}
    for t in [t for t in folded if len(chain[t][0]) > 1]:
        # a span's gradient is written whole: every chain tensor read outside that touches
        # its weights must be folded over that same span
        ws = set(chain[t][0])
        if any(ws & set(chain[u][0]) and (set(chain[u][0]) != ws or u not in folded)
               for u in read_outside):
            folded -= {u for u in folded if set(chain[u][0]) & ws}
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
    nodes, constants, flat, spans = [], dict(consts), {}, []
    for node in graph.nodes:
        out = node["outputs"][0] if node["outputs"] else None
        if out not in chain or out in kept and out not in folded:
            nodes.append(node)
            continue
        if out not in folded:
            continue
        ws, idx, _ = chain[out]
        w = ws[0]
        if len(ws) > 1 and ws not in flat:
            flat[ws] = _span(graph, ws)
            spans.append(flat[ws])
        elif len(ws) == 1 and w not in flat:
            flat[w] = f"{w}::flat"
            constants[flat[w] + "/shape"] = {"dtype": "int64", "shape": [1], "values": [-1]}
            nodes.append({"name": flat[w], "op_type": "Reshape", "inputs": [w, flat[w] + "/shape"],
                          "outputs": [flat[w]], "attrs": {"allowzero": 0}})
        start = graph.tensors[w]["offset"] // 4
        constants[out + "::indices"] = {"dtype": "int64", "shape": list(shapes[out]),
                                        "values": [i - start for i in idx]}
        source = flat[ws]["name"] if len(ws) > 1 else flat[w]
        nodes.append({"name": node["name"], "op_type": "Gather",
                      "inputs": [source, out + "::indices"], "outputs": [out],
                      "attrs": {"axis": 0}})
    return Graph({**graph.desc, "nodes": nodes, "constants": constants,
                  "tensors": list(graph.desc["tensors"]) + spans})


def _adjacent(graph, weights) -> bool:
    """Whether ``weights`` (sorted by offset) follow each other in the blob: no other tensor
    starts between the first's start and the last's end (padding may)."""
    t = graph.tensors
    lo, hi = t[weights[0]]["offset"], t[weights[-1]]["offset"] + t[weights[-1]]["nbytes"]
    inside = {n for n, d in t.items() if "members" not in d and lo <= d["offset"] < hi}
    return inside == set(weights) and {t[w].get("dtype", "float32") for w in weights} == {
        "float32"}


def _only_chains(graph, chain, weights, keep) -> bool:
    """Whether only chain nodes read each of ``weights`` (a span's gradient is theirs whole)."""
    return all(w not in keep and w != graph.output and all(
        n["outputs"] and n["outputs"][0] in chain for n in graph.consumers.get(w, []))
        for w in weights)


def _span(graph, weights) -> dict:
    """The span tensor over ``weights`` (module doc): float32s from the first's offset to the
    last's end, a parameter when any member is one."""
    t = graph.tensors
    lo, hi = t[weights[0]]["offset"], t[weights[-1]]["offset"] + t[weights[-1]]["nbytes"]
    role = "param" if any(t[w]["role"] == "param" for w in weights) else "buffer"
    return {"name": f"{weights[0]}::span", "shape": [(hi - lo) // 4], "dtype": "float32",
            "offset": lo, "nbytes": hi - lo, "role": role, "members": list(weights)}


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n

"""Transposes and Expands that only feed a Concat folded into its copies (``Plan.build``
applies ``fold``).

A vision transformer puts its class token before the patch tokens (timm, torchvision's
VisionTransformer, the zoo's ViT):

    x = Transpose(Reshape(Conv(image)), [0, 2, 1]);  y = Concat(Expand(cls, [n, 1, d]), x)

The Transpose and the Expand each copy their input once forward (the Transpose again
backward), and the Concat copies both results again. Folded, the Concat reads such an input
through the strides of the op's source (node attribute ``_reads``, per input: None, {"perm":
p} for Transpose(source, p), {"expand": True} for the source broadcast to the Concat's other
dims; ``layout_rules.concat_reads`` gives the shapes, ops/layout.py the gathers), and its
backward writes the source's gradient itself: the part of dy transposed back, or summed
over the broadcast dims. Four dispatches forward become two, four backward two.

Folded only where the Concat is the one reader of the op's output (not the graph output nor a
name the caller keeps), the source is an activation or a weight (not a constant of the model
description), and an Expand broadcasts nothing along the Concat's axis; at least one input
stays unbroadcast, so that the folded Expands' shapes follow it at every batch size. The
numbers are the same: the copies move the same values.
"""

from ..graph import Graph
from ..ops.layout_rules import transpose_perm
from . import sole_reader


def _read(graph, shapes, concat, axis, name, keep):
    """(source, read) when the op writing ``name`` folds into ``concat``; else None."""
    op = graph.producer.get(name)
    if op is None or op["op_type"] not in ("Transpose", "Expand") or \
            sole_reader(graph, name, keep) is not concat:
        return None
    src = op["inputs"][0] if op["inputs"] else ""
    if not src or src in graph.constants or shapes.get(src) is None or \
            shapes.get(name) is None:
        return None
    if op["op_type"] == "Transpose":
        return src, {"perm": transpose_perm(op, len(shapes[src]))}
    x, y = shapes[src], shapes[name]
    padded = [1] * (len(y) - len(x)) + list(x)
    if len(padded) != len(y) or padded[axis] != y[axis]:
        return None
    return src, {"expand": True}


def fold(graph: Graph, shapes: dict, keep=()) -> Graph:
    """``graph`` with the Transposes and Expands of the module doc folded into their Concats;
    ``graph`` itself when there is none. ``keep``: activation names a caller reads."""
    put, drop = {}, set()
    for c in graph.nodes:
        out = shapes.get(c["outputs"][0]) if c["op_type"] == "Concat" else None
        if not out or "axis" not in c.get("attrs", {}) or c["attrs"].get("_reads"):
            continue
        axis = int(c["attrs"]["axis"]) % len(out)
        ins, reads, ops = list(c["inputs"]), [None] * len(c["inputs"]), []
        for k, name in enumerate(ins):
            found = _read(graph, shapes, c, axis, name, keep) if name else None
            if found is not None:
                ins[k], reads[k] = found
                ops.append(graph.producer[name])
        while ops and all(r and r.get("expand") for r in reads):  # keep one to follow
            k = max(i for i, r in enumerate(reads) if r)
            ins[k], reads[k] = c["inputs"][k], None
            ops = [o for o in ops if o["outputs"][0] != c["inputs"][k]]
        if not ops:
            continue
        put[id(c)] = {**c, "inputs": ins, "attrs": {**c["attrs"], "_reads": reads}}
        drop.update(id(o) for o in ops)
    if not put:
        return graph
    nodes = [put.get(id(n), n) for n in graph.nodes if id(n) not in drop]
    return Graph({**graph.desc, "nodes": nodes})

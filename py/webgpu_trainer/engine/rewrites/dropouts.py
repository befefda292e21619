"""Dropouts that drop nothing as views (``Plan.build`` applies ``fold``).

A model built with ``nn.Dropout(0.0)`` (nn.TransformerEncoderLayer(dropout=0.0), a ViT without
dropout) exports a Dropout of ratio 0 in training mode. Its output is its input times
1 / (1 - 0) = 1 on every unit (ONNX Dropout, opset 13: "the output ... scaled by 1 / (1 -
ratio)"; torch.nn.functional.dropout with p=0), so the op is ONNX's Identity, which the plan
makes a view: no dispatch forward and none backward, where a Dropout copies each way. The
ratio must be a constant 0 (the ``ratio`` attribute before opset 12, else the ``ratio``
input; absent: 0.5) and nothing may read the mask output (nor a caller, ``keep``). The node
keeps its name, so the other Dropouts' Philox salts (their index in the model as given,
``Builder.salt``) do not move.
"""

from ..graph import Graph


def _ratio(graph, node):
    """The node's constant ratio, else None (a graph input decides it at run time)."""
    ins = node["inputs"]
    if len(ins) > 1 and ins[1]:
        c = graph.constants.get(ins[1])
        if c is None or len(c.get("values") or ()) != 1:
            return None
        try:
            return float(c["values"][0])
        except (TypeError, ValueError):
            return None
    return float(node.get("attrs", {}).get("ratio", 0.5))


def fold(graph: Graph, shapes: dict, keep=()) -> Graph:
    """``graph`` with every Dropout of constant ratio 0 whose mask nobody reads an Identity of
    the same name; ``graph`` itself when there is none. ``keep``: activation names a caller
    reads."""
    put = {}
    for node in graph.nodes:
        if node["op_type"] != "Dropout" or not node["inputs"] or _ratio(graph, node) != 0.0:
            continue
        outs = node["outputs"]
        mask = outs[1] if len(outs) > 1 else ""
        if mask and (graph.consumers.get(mask) or mask == graph.output or mask in keep):
            continue
        put[id(node)] = {"name": node["name"], "op_type": "Identity",
                         "inputs": [node["inputs"][0]], "outputs": [outs[0]], "attrs": {}}
    if not put:
        return graph
    return Graph({**graph.desc, "nodes": [put.get(id(n), n) for n in graph.nodes]})

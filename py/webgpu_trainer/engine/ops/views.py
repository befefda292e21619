"""Ops whose output is the input's data under another shape: Flatten, Identity, Reshape, Squeeze,
Unsqueeze. The plan aliases the output (and its gradient) to the input, so they dispatch nothing.
"""

import math

from ..errors import GraphError

TYPES = ("Flatten", "Identity", "Reshape", "Squeeze", "Unsqueeze")


def _allowzero(node, opset, shapes):
    return 0 if opset >= 14 else None  # Reshape's allowzero exists from opset 14


ATTRS = {"Flatten": {"axis": 1}, "Identity": {}, "Reshape": {"allowzero": _allowzero},
         "Squeeze": {}, "Unsqueeze": {}}


def _axes(node, consts, rank):
    """Axes from the ``axes`` input (opset 13+) or attribute (before), normalised to >= 0."""
    axes = node.get("attrs", {}).get("axes")
    if len(node["inputs"]) > 1 and node["inputs"][1]:
        axes = consts[1]
    return None if axes is None else sorted(int(a) % rank for a in axes)


def infer(node, ins, consts):
    """Shapes by ONNX rules; raises GraphError naming the node when the sizes do not fit."""
    op, x, a = node["op_type"], ins[0], node.get("attrs", {})
    if op == "Identity":
        return [list(x)]
    if op == "Flatten":
        axis = a.get("axis", 1) % (len(x) + 1) if x else 0
        return [[math.prod(x[:axis]), math.prod(x[axis:])]]
    if op == "Reshape":
        if consts[1] is None:
            raise GraphError(f"node {node['name']} (Reshape): the shape input "
                             f"{node['inputs'][1]!r} is not a constant")
        want = [int(v) for v in consts[1]]
        out = [x[i] if v == 0 and not a.get("allowzero", 0) else v for i, v in enumerate(want)]
        if out.count(-1) > 1:
            raise GraphError(f"node {node['name']} (Reshape): more than one -1 in {want}")
        if -1 in out:
            rest = math.prod([d for d in out if d != -1])
            if rest == 0 or math.prod(x) % rest:
                raise GraphError(f"node {node['name']} (Reshape): cannot reshape {x} to {want}")
            out[out.index(-1)] = math.prod(x) // rest
        if math.prod(out) != math.prod(x):
            raise GraphError(f"node {node['name']} (Reshape): cannot reshape {x} "
                             f"({math.prod(x)} values) to {want}")
        return [out]
    if op == "Squeeze":
        axes = _axes(node, consts, len(x))
        if axes is None:
            return [[d for d in x if d != 1]]
        if any(x[i] != 1 for i in axes):
            raise GraphError(f"node {node['name']} (Squeeze): axes {axes} of {x} are not all 1")
        return [[d for i, d in enumerate(x) if i not in axes]]
    if op == "Unsqueeze":
        given = consts[1] if len(node["inputs"]) > 1 and node["inputs"][1] else a.get("axes")
        axes = _axes(node, consts, len(x) + len(given or []))
        out = list(x)
        for ax in axes:
            out.insert(ax, 1)
        return [out]
    raise GraphError(f"node {node['name']}: {op} is not a view")


async def forward(b, node, ins, outs, train):
    """Nothing to do: the output aliases the input."""


async def backward(b, node, ins, outs, gins, gouts):
    """Nothing to do, except when the plan gave the output gradient its own buffer (the input
    feeds several nodes): then that buffer is this node's contribution to the input gradient."""

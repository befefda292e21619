"""A model summary for people: layers, output shapes, parameter counts, multiply-adds, and which
parameters are trainable (like torchinfo's table). Standard library only: the server and the
page's worker can both compute it.
"""

import math

from ..graph import Graph, GraphError
from ..ops import OPS, losses
from ..train import memory

MAC_OPS = tuple(t for t, m in OPS.items() if hasattr(m, "macs"))  # Conv, Gemm, MatMul


def _numel(shape) -> int:
    """The element count of a shape whose dims may be numpy integers."""
    return math.prod(int(d) for d in shape)


def _macs(node, shapes) -> int:
    """Multiply-adds of one sample through ``node``: its card's ``macs`` (0 for other ops)."""
    if node["op_type"] not in MAC_OPS or shapes.get(node["outputs"][0]) is None:
        return 0
    return OPS[node["op_type"]].macs(node, shapes)


def head_params(graph: dict) -> list:
    """Names of the classifier head's parameters: those of the last Conv / Gemm / MatMul node
    and of every node after it (e.g. SeedNet's fc2 and the BatchNorm after it), what a user
    fine-tunes alone. Falls back to the last node with parameters."""
    roles = {t["name"]: t["role"] for t in graph["tensors"]}
    nodes = graph["nodes"]
    start = max((k for k, n in enumerate(nodes) if n["op_type"] in MAC_OPS
                 and any(roles.get(i) == "param" for i in n["inputs"])), default=None)
    if start is None:
        start = max((k for k, n in enumerate(nodes)
                     if any(roles.get(i) == "param" for i in n["inputs"])), default=len(nodes))
    out = []
    for n in nodes[start:]:
        out += [i for i in n["inputs"] if roles.get(i) == "param" and i not in out]
    return out


def memory_at(graph: dict, batch: int, trainable=None, loss=None, limits=None,
              budget=None, **kw) -> dict:
    """The GPU memory of training ``graph`` at ``batch`` (``train.memory.estimate``: bytes in
    all and per part, the largest buffer), ``problems`` (the limits it exceeds: the adapter's
    ``limits``, ``budget`` bytes) and ``max_batch`` (the largest batch that fits them; None
    without limits or budget). ``kw``: ``estimate``'s optimizer arguments."""
    kw.update(loss=loss, trainable=trainable)
    est = memory.estimate(graph, batch, **kw)
    return {"batch": est["batch"], "bytes": est["bytes"], "parts": est["parts"],
            "largest": est["largest"], "problems": memory.problems(est, limits, budget),
            "max_batch": memory.largest_batch(graph, limits, budget, **kw)
            if limits or budget else None}


def summarize(graph: dict, trainable=None, loss=None) -> dict:
    """The summary of a bundle graph for one sample.

    ``trainable``: names of the trainable parameters (default: every role "param" tensor);
    ``loss``: the loss spec (``ops/losses.py``; None: "auto").
    Returns ``{"name", "opset", "producer", "input": {name, shape}, "layers": [{"name", "op",
    "output_shape" (list, batch 1) or None, "params" (elements), "macs", "tensors": [names]}],
    "tensors": [{"name", "shape", "numel", "role", "trainable", "layer"}], "head": [names],
    "totals": {"params", "trainable", "frozen", "buffers", "macs"}, "loss": {"loss" (the
    resolved name), "auto" (bool), "final_op", "text"} or None, "not_trained": [{"name",
    "shape", "reason"}] (every initializer that does not train: the import's constants, the
    buffers, the parameters the fine-tuning options freeze), "notes": [str] (what the import
    changed), "errors": [str]}``. Shapes and MACs are None / 0 when the engine cannot plan the
    graph; ``errors`` says why.
    """
    tensors = {t["name"]: t for t in graph["tensors"]}
    train = set(trainable) if trainable is not None else \
        {n for n, t in tensors.items() if t["role"] == "param"}
    errors, shapes = [], {}
    try:
        shapes = Graph(graph).shapes(1)
    except GraphError as exc:
        errors.append(str(exc))
    owner = {}
    layers = []
    for node in graph["nodes"]:
        names = [i for i in node["inputs"] if i in tensors and i not in owner]
        for n in names:
            owner[n] = node["name"]
        out = shapes.get(node["outputs"][0]) if node["outputs"] else None
        layers.append({"name": node["name"], "op": node["op_type"], "output_shape": out,
                       "params": sum(_numel(tensors[n]["shape"]) for n in names
                                     if tensors[n]["role"] == "param"),
                       "macs": _macs(node, shapes) if shapes else 0, "tensors": names})
    rows = [{"name": n, "shape": t["shape"], "numel": _numel(t["shape"]), "role": t["role"],
             "trainable": n in train and t["role"] == "param", "layer": owner.get(n)}
            for n, t in tensors.items()]
    params = sum(r["numel"] for r in rows if r["role"] == "param")
    n_train = sum(r["numel"] for r in rows if r["trainable"])
    inp = graph["inputs"][0]
    not_trained = [{"name": f["name"], "shape": f["shape"], "reason": f["reason"]}
                   for f in graph.get("frozen", [])]
    not_trained += [{"name": r["name"], "shape": r["shape"],
                     "reason": "frozen by the fine-tuning choice" if r["role"] == "param"
                     else "a BatchNorm running statistic: updated in training mode, never "
                     "trained"} for r in rows if not r["trainable"]]
    loss_info = None
    ends_in = losses.final_op(graph) if graph.get("outputs") and graph.get("nodes") else None
    try:
        spec = losses.resolve(loss, ends_in)
        loss_info = {"loss": spec["loss"], "final_op": ends_in,
                     "auto": losses.normalize(loss)["loss"] == "auto",
                     "text": losses.describe(spec, ends_in)}
    except ValueError as exc:
        errors.append(str(exc))
    return {"name": graph.get("name"), "opset": graph.get("opset"),
            "producer": graph.get("producer"),
            "input": {"name": inp["name"], "shape": inp["shape"]},
            "layers": layers, "tensors": rows, "head": head_params(graph),
            "totals": {"params": params, "trainable": n_train, "frozen": params - n_train,
                       "buffers": sum(r["numel"] for r in rows if r["role"] == "buffer"),
                       "macs": sum(layer["macs"] for layer in layers)},
            "loss": loss_info, "not_trained": not_trained, "notes": list(graph.get("notes", [])),
            "errors": errors}

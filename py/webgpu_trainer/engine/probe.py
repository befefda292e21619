"""What the live views read from a model, shared by both engines and the worker (standard library
only): the name of the log-probabilities, the layers whose feature maps are shown, the first
conv layer's filters, and per-parameter L2 norms of flat float32 buffers (plan layout).

``GpuEngine.probe`` / ``CpuEngine.probe`` run the eval-mode forward of given images and return
the activations named; ``norms()`` on both engines return ``tensor_norms`` of their weight and
gradient buffers.
"""

import math
import operator

LOGP = "log_probabilities"  # probe's name for the log-probabilities (as ``eval_outputs``)


def feature_maps(graph) -> list:
    """``[(conv node name, activation name)]``: each Conv's output as the next layer sees it,
    i.e. after the ReLU that follows it alone (the GPU plan runs such a ReLU in place on the
    Conv's buffer, so the Conv's own output is not kept), in graph order. ``graph``: a
    ``Graph``."""
    out = []
    for node in graph.nodes:
        if node["op_type"] != "Conv":
            continue
        name = node["outputs"][0]
        users = graph.consumers.get(name, [])
        if len(users) == 1 and users[0]["op_type"] == "Relu" and name != graph.output:
            name = users[0]["outputs"][0]
        out.append((node["name"], name))
    return out


def first_conv_weight(graph):
    """The weight tensor name of the first Conv node of ``graph`` (a ``Graph``), or None."""
    for node in graph.nodes:
        if node["op_type"] == "Conv" and node["inputs"][1] in graph.tensors:
            return node["inputs"][1]
    return None


def params_in_order(graph) -> list:
    """``[(tensor name, node name)]`` of every parameter (role "param") in graph order of the
    first node that uses it."""
    out, seen = [], set()
    for node in graph.nodes:
        for name in node["inputs"]:
            t = graph.tensors.get(name)
            if t is not None and t["role"] == "param" and name not in seen:
                seen.add(name)
                out.append((name, node["name"]))
    return out


def _norm(buf: memoryview, t) -> float:
    part = buf[t["offset"] // 4:(t["offset"] + t["nbytes"]) // 4]
    return math.sqrt(math.fsum(map(operator.mul, part, part)))


def tensor_norms(graph, weights: bytes, grads: bytes | None, trainable) -> list:
    """L2 norms per parameter of the flat float32 buffers ``weights`` and ``grads`` (plan
    layout: each tensor at its bundle offset): ``[{"name", "layer", "numel", "weight", "grad"}]``
    in graph order; ``grad`` is None for a parameter not in ``trainable`` (frozen: no
    gradient) or when ``grads`` is None. Summed exactly (math.fsum) in float64."""
    w = memoryview(weights).cast("B").cast("f")
    g = memoryview(grads).cast("B").cast("f") if grads is not None else None
    rows = []
    for name, layer in params_in_order(graph):
        t = graph.tensors[name]
        rows.append({"name": name, "layer": layer, "numel": t["nbytes"] // 4,
                     "weight": _norm(w, t),
                     "grad": _norm(g, t) if g is not None and name in trainable else None})
    return rows

"""What the live views read from a model, shared by both engines and the worker (standard library
only): the name of the log-probabilities, the layers whose feature maps are shown, the first
conv layer's filters, and the parameters in the order the norms list them.

``GpuEngine.probe`` / ``CpuEngine.probe`` run the eval-mode forward of given images and return
the activations named; ``norms()`` on both engines return the L2 norms of each parameter's
weights and last gradient, in ``params_in_order``.
"""

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


def biases_before_norm(graph) -> set:
    """Names of the biases whose gradient is zero by construction: the bias (input 2) of a Conv
    or Gemm whose output feeds only BatchNormalization nodes (as their input 0). In training
    mode BatchNorm subtracts the batch mean of each channel, so a per-channel constant added
    before it changes nothing (Ioffe & Szegedy 2015, section 3.2: "the bias b can be
    ignored"). The norms view says so instead of flagging a vanishing gradient."""
    out = set()
    for node in graph.nodes:
        ins = node["inputs"]
        if node["op_type"] not in ("Conv", "Gemm") or len(ins) < 3 or not ins[2]:
            continue
        t = graph.tensors.get(ins[2])
        users = graph.consumers.get(node["outputs"][0], [])
        if t is not None and t["role"] == "param" and users and all(
                u["op_type"] == "BatchNormalization" and u["inputs"][0] == node["outputs"][0]
                for u in users):
            out.add(ins[2])
    return out

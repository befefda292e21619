"""What the live views read from a model, shared by both engines and the worker (standard library
only): the name of the log-probabilities, the layers whose feature maps are shown, the first
layer with weights and what can be shown of it, the first attention map, and the parameters
in the order the norms list them.

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


def with_height(shape, rank: int) -> list:
    """``shape`` as an image shape of ``rank`` axes: one short (a 1-D Conv's weight ``[O, I,
    K]`` or feature map ``[C, L]``) gets a height of 1 before its last axis (``[O, I, 1, K]``,
    ``[C, 1, L]``), so the views draw it as rows; other shapes as they are."""
    shape = list(shape)
    return shape[:-1] + [1] + shape[-1:] if len(shape) == rank - 1 else shape


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


LAYER_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "LSTM", "GRU", "RNN", "Gather")
SHOWN_ROWS = 64  # a Linear first layer: at most this many weight rows as images


def _param_source(graph, name, depth=4):
    """``(parameter name, transposed)`` when activation ``name`` is a parameter or one reached
    through at most ``depth`` Transpose / Identity / Cast nodes (``transposed``: an odd number
    of 2-D Transposes), else None."""
    flips = 0
    for _ in range(depth + 1):
        t = graph.tensors.get(name)
        if t is not None:
            return (name, flips % 2 == 1) if t["role"] == "param" else None
        node = graph.producer.get(name)
        if node is None or node["op_type"] not in ("Transpose", "Identity", "Cast"):
            return None
        flips += node["op_type"] == "Transpose"
        name = node["inputs"][0]
    return None


def first_layer(graph, sample_shape) -> dict | None:
    """The model's first layer with weights and what the live views can show of it: ``{"op",
    "node", "weight", "shape", "view", "rows", "image", "text"}``. ``view`` is "filters" (a
    Conv: its kernels), "rows" (a Linear over a flat image: weight row ``o`` of ``[out, in]``
    is an image of ``image`` = the sample shape; ``rows`` = (parameter, transposed): the
    parameter holds ``[in, out]`` when transposed) or None (no image view: ``text`` says
    why). ``graph``: a ``Graph``; ``sample_shape``: the dataset's ``[C, H, W]`` (or ``[F]``).
    None for a model without a weighted layer among ``LAYER_OPS``."""
    values = 1
    for d in sample_shape:
        values *= d
    image = len(sample_shape) == 3
    for node in graph.nodes:
        op = node["op_type"]
        if op not in LAYER_OPS:
            continue
        ins = node["inputs"]
        if op == "Gather":
            src = _param_source(graph, ins[0])
            if src is None:
                continue
            return {"op": op, "node": node["name"], "weight": src[0],
                    "shape": graph.tensors[src[0]]["shape"], "view": None, "image": None,
                    "text": "first layer is an embedding (Gather): its rows are token vectors, "
                            "no image view"}
        src = next((s for s in (_param_source(graph, n) for n in ins[1:2]) if s), None)
        if src is None and op in ("LSTM", "GRU", "RNN") and len(ins) > 1:
            src = (ins[1], False)  # W after the exporter's slices: named by the node
        if src is None:
            continue
        name, flipped = src
        shape = graph.tensors[name]["shape"] if name in graph.tensors else \
            graph.shapes(1).get(name)
        out = {"op": op, "node": node["name"], "weight": name, "shape": shape, "view": None,
               "image": list(sample_shape) if image else None}
        dims = "x".join(str(d) for d in shape or [])
        if op in ("Conv", "ConvTranspose"):
            flat = len(shape or []) == 3  # 1-D: [O, I, K]
            out.update(view="filters", text=f"first layer is a {'1-D ' if flat else ''}{op} "
                       f"({name} [{dims}]): its kernels shown"
                       + (" as 1 x K strips" if flat else ""))
        elif op in ("Gemm", "MatMul"):
            rows = _linear_rows(node, shape, flipped)
            if rows is None or not image or rows[1] != values:
                out["text"] = (f"first layer is a Linear ({op} {name} [{dims}]) over "
                               f"{'features' if not image else 'a reshaped input'}: no image "
                               "view")
            else:
                n_out, n_in, _ = rows
                side = "x".join(str(d) for d in (sample_shape[1:] if sample_shape[0] == 1
                                                 else sample_shape))
                shown = min(n_out, SHOWN_ROWS)
                out.update(view="rows", rows=rows[2], text=(
                    f"first layer is a Linear ({name}): its {n_in}->{n_out} weight rows shown "
                    f"as {side} images" + (f" (the first {shown} of {n_out})"
                                          if shown < n_out else "")))
        else:
            steps = graph.shapes(1).get(node["inputs"][0]) or []
            per = f" of {steps[-1]} values" if len(steps) == 3 else ""
            article = "an" if op in ("LSTM", "RNN") else "a"
            out["text"] = (f"first layer is {article} {op}: no image view (its gate weights "
                           f"act on one time step{per} at a time; node {node['name']})")
        return out
    return None


def _linear_rows(node, shape, flipped):
    """``(out, in, transposed)`` of a Gemm / MatMul weight ``shape`` (2-D), where
    ``transposed``: the tensor holds ``[in, out]``; None for another rank."""
    if not shape or len(shape) != 2:
        return None
    if node["op_type"] == "Gemm":
        held_out_in = bool(node.get("attrs", {}).get("transB", 0))
    else:  # MatMul(x, W): W is [in, out]; a Transpose of a [out, in] parameter flips it
        held_out_in = flipped
    if held_out_in:
        return shape[0], shape[1], False
    return shape[1], shape[0], True


def weight_rows(values, shape, transposed, count) -> list:
    """The first ``count`` rows ``[out, in]`` (flattened, floats) of a 2-D weight ``values``
    held as ``shape``; ``transposed``: the tensor is ``[in, out]``."""
    if not transposed:
        return list(values[:count * shape[1]])
    n_in, n_out = shape
    return [values[i * n_out + o] for o in range(min(count, n_out)) for i in range(n_in)]


def attention_softmax(graph):
    """``(node name, activation name)`` of the first attention map: a Softmax whose input is
    computed from a MatMul (QK^T, through at most three scale / mask nodes) and whose output
    is the first input of a MatMul (the weights of V), with a square ``[..., T, T]`` shape;
    None when the model has none. ``graph``: a ``Graph``."""
    shapes = graph.shapes(1)
    for node in graph.nodes:
        if node["op_type"] != "Softmax":
            continue
        out = node["outputs"][0]
        shape = shapes.get(out) or []
        if len(shape) < 2 or shape[-1] != shape[-2]:
            continue
        if not any(u["op_type"] == "MatMul" and u["inputs"][0] == out
                   for u in graph.consumers.get(out, [])):
            continue
        src = graph.producer.get(node["inputs"][0])
        for _ in range(3):
            if src is None or src["op_type"] not in ("Mul", "Div", "Add", "Where", "Sub"):
                break
            src = graph.producer.get(src["inputs"][0]) or \
                next((graph.producer.get(i) for i in src["inputs"][1:]
                      if graph.producer.get(i, {}).get("op_type") == "MatMul"), None)
        if src is not None and src["op_type"] == "MatMul":
            return node["name"], out
    return None


def head_mean(values, shape) -> list:
    """The mean over every axis but the last two of ``values`` (floats, row-major ``shape``
    ``[..., T, T]``): the attention map averaged over the batch-1 probe's heads."""
    t = shape[-1] * shape[-2]
    heads = len(values) // t
    return [sum(values[h * t + i] for h in range(heads)) / heads for i in range(t)]


def patch_grid(graph, tokens):
    """``(gh, gw, first)``: the tokens' patch grid, from the first Conv whose output's
    ``gh * gw`` spatial positions are the last ``tokens - first`` tokens (``first`` 0..4: the
    class / extra tokens, ahead of the patches as ``torch.cat([cls, x], 1)`` puts them);
    None when no Conv makes the tokens."""
    shapes = graph.shapes(1)
    for node in graph.nodes:
        if node["op_type"] != "Conv":
            continue
        shape = shapes.get(node["outputs"][0]) or []
        if len(shape) == 4 and 0 <= tokens - shape[2] * shape[3] <= 4:
            return shape[2], shape[3], tokens - shape[2] * shape[3]
    return None

"""Which neighbouring ops the plan fuses (``plan.py`` asks, ``Builder.fused(node)`` answers the
op families), each only where it is provably safe: the same arithmetic in the same order, so
the same floats, and no reader of what the fusion no longer writes.

- ``relu_forwards``: an op whose card says FUSES_RELU_FORWARD (Conv, Gemm, BatchNormalization,
  Add, Sub) applies max(y, 0) of the in-place ReLU after it. In place means the ReLU is the
  sole reader of its input, through views too, and that input is not the graph output
  (``Plan._sole_reader``), so nothing reads the unrectified values.
- ``relu_grads``: an op whose card says TAKES_RELU_GRAD (Conv, BatchNormalization, Dropout, the
  pools) masks its input gradient by the in-place ReLU before it, its only reader.
- ``relu_sums``: the sum of the gradients of a multi-use in-place ReLU output masks by it.
- ``split_offsets``: a Split whose parts are contiguous runs of its input (every dimension
  before the axis of size 1: nn.MultiheadAttention's packed q/k/v, ``rewrites/splits.py``)
  makes its outputs views of the input at their byte offsets, and their gradients views of the
  input's gradient (``Plan._split_part``): no copy either way.
- ``clips_after``: a BatchNormalization (FUSES_CLIP) writes the output of the Clip of constant
  bounds that alone reads its output, and its backward reads that Clip's output gradient,
  kept where lo <= y <= hi: the Clip dispatches nothing either way.
- ``passes_grad``: an Add hands its output gradient to each input of the output's shape
  (``Plan._allocate_grads``: shared buffers, no copy).
"""

import math

from .builder import Builder
from .ops import RUNS
from .ops.layout_rules import split_spec


def card_says(node, flag: str) -> bool:
    """Whether the card of ``node``'s op sets the fusion ``flag`` (``engine/ops``): True for
    every op of the card, or a tuple of the op_types it holds for."""
    value = getattr(RUNS.get(node["op_type"]), flag, False)
    return node["op_type"] in value if isinstance(value, tuple) else bool(value)


def relu_forwards(plan) -> set:
    """Names of the nodes that apply the in-place ReLU after them (FUSES_RELU_FORWARD)."""
    g = plan.graph
    return {g.producer[n["inputs"][0]]["name"] for n in g.nodes
            if n["op_type"] == "Relu" and n["inputs"][0] in g.producer
            and card_says(g.producer[n["inputs"][0]], "FUSES_RELU_FORWARD")
            and plan.acts[n["outputs"][0]].buf is plan.acts[n["inputs"][0]].buf}


def _in_place_relus(plan):
    """(ReLU node, output) of the ReLUs whose output and gradient alias their input's,
    the graph output excepted."""
    g = plan.graph
    for node in g.nodes:
        if node["op_type"] != "Relu":
            continue
        t, u = node["inputs"][0], node["outputs"][0]
        gu, gt = plan.grads.get(u), plan.grads.get(t)
        if gu is None or gt is None or gu.buf is not gt.buf or u == g.output:
            continue
        if plan.acts[u].buf is plan.acts[t].buf:
            yield node, u


def relu_grads(plan) -> dict:
    """{consumer node name: ReLU node name} for in-place ReLUs read by one op whose card says
    TAKES_RELU_GRAD as its first input (and nowhere else): that consumer's backward writes
    its input gradient already masked by input > 0, and the ReLU's backward is dropped."""
    out = {}
    for node, u in _in_place_relus(plan):
        users = plan.graph.consumers.get(u, [])
        if u not in plan.contrib_of and len(users) == 1 \
                and card_says(users[0], "TAKES_RELU_GRAD") \
                and users[0]["inputs"][0] == u and u not in users[0]["inputs"][1:]:
            out[users[0]["name"]] = node["name"]
    return out


def relu_sums(plan) -> dict:
    """{tensor: ReLU node name} for the outputs of in-place ReLUs with several uses: the sum
    of the uses' gradients masks by output > 0 in its last dispatch, and the ReLU's backward
    dispatch is dropped."""
    return {u: node["name"] for node, u in _in_place_relus(plan) if u in plan.contrib_of}


def clips_after(plan) -> dict:
    """{producer node name: (Clip node, lo, hi)}: Clips whose input is output 0 of an op whose
    card says FUSES_CLIP, read by nothing else (nor the graph output), with constant bounds
    (``unary.clip_constants``), and its input's gradient not one the caller named to keep
    (``keep_grads``; with ``keep_grads=True``, every gradient the plan makes, the fused
    input's gradient is not made). ``Builder.FUSE_CLIP``; False: none (A/B)."""
    from .ops.unary import clip_constants
    if not Builder.FUSE_CLIP:
        return {}
    g, out = plan.graph, {}
    for node in g.nodes:
        if node["op_type"] != "Clip":
            continue
        src = node["inputs"][0]
        made = g.producer.get(src)
        if made is None or made["outputs"][0] != src or not card_says(made, "FUSES_CLIP") \
                or src == g.output or len(g.consumers.get(src, [])) != 1 \
                or src in node["inputs"][1:] \
                or (plan.keep_grads is not True and src in plan.keep_grads):
            continue
        bounds = clip_constants(node, g.constants)
        if bounds is not None and plan.acts[src].buf is not plan.acts[node["outputs"][0]].buf:
            out[made["name"]] = (node, *bounds)
    return out


def gelu_grads(plan) -> dict:
    """{Gemm node name: (Gelu node, [u, ...])}: erf Gelus (approximate "none") whose output u
    is read by one Gemm alone, as its input A, directly or through views of u's own memory
    (a Reshape of 3-D tokens into rows, each read by the next alone), and whose input t by
    that Gelu alone, t made by a Gemm, MatMul or Add (whose backward passes never read their
    output), directly or through views of its memory each read by the next alone. None of
    these tensors is the graph output or summed from several uses; all have gradients; none
    is a gradient the caller named to keep (nor are all kept: ``keep_grads=True``, the parity
    tools' every gradient), and t (and what it views) no activation the caller reads
    (``keep_acts``). The training forward's Gelu leaves its slope GELU'(t) in t's buffer
    (gelu_slope.wgsl); the Gemm's input gradient kernel multiplies dA by it and writes dt
    (gemm.wgsl GELU_GRAD): the Gelu's backward pass over the activation is dropped, and the
    gradients of u and its views (the list) are never made. ``Builder.FUSE_GELU_GRAD``;
    False: none (A/B).

    The slope is computed in the forward, not in the Gemm's epilogue: erf in matmul_tiled's
    64 inlined stores made the fused plan 10-13% slower than the unfused one (H100,
    2026-12-06: encoder at batch 1000 1.76 vs 1.59 ms)."""
    from .ops import VIEWS
    from .ops.unary import CODES, _code
    if not Builder.FUSE_GELU_GRAD or plan.keep_grads is True:
        return {}
    g, out = plan.graph, {}
    for node in g.nodes:
        if node["op_type"] != "Gelu" or _code(node) != CODES["Gelu"]:
            continue
        t, chain = node["inputs"][0], [node["outputs"][0]]
        users = g.consumers.get(chain[-1], [])
        while len(users) == 1 and users[0]["op_type"] in VIEWS \
                and users[0]["inputs"][0] == chain[-1] and _same_memory(plan, users[0]):
            chain.append(users[0]["outputs"][0])
            users = g.consumers.get(chain[-1], [])
        a = chain[-1]
        made, held = g.producer.get(t), [t]
        while made is not None and made["op_type"] in VIEWS and _same_memory(plan, made) \
                and len(g.consumers.get(made["inputs"][0], [])) == 1 \
                and made["inputs"][0] != g.output:
            held.append(made["inputs"][0])  # t is a view of that output's memory
            made = g.producer.get(held[-1])
        if len(users) != 1 or users[0]["op_type"] != "Gemm" or users[0]["inputs"][0] != a \
                or a in users[0]["inputs"][1:] or len(g.consumers.get(t, [])) != 1 \
                or made is None or made["op_type"] not in ("Gemm", "MatMul", "Add") \
                or any(x in plan.keep_acts for x in held) \
                or plan.grads.get(t) is None or t in plan.contrib_of or t == g.output \
                or any(x == g.output or x in plan.contrib_of or x in plan.keep_grads
                       or plan.grads.get(x) is None for x in chain):
            continue
        out[users[0]["name"]] = (node, chain)
    return out


def _same_memory(plan, view) -> bool:
    """Whether a view node's output is its input's memory (activation and gradient alike)."""
    src, dst = view["inputs"][0], view["outputs"][0]
    a, b = plan.acts.get(src), plan.acts.get(dst)
    ga, gb = plan.grads.get(src), plan.grads.get(dst)
    return None not in (a, b, ga, gb) and a.buf is b.buf and a.offset == b.offset \
        and ga.buf is gb.buf and ga.offset == gb.offset


def passes_grad(node, shapes, k: int) -> bool:
    """Whether ``node`` is an Add of two different tensors whose input ``k`` has the output's
    shape: that input's gradient is the output's, which the plan then uses in place of a copy.
    The other input may broadcast (a position embedding, a bias added by hand: its gradient
    is still summed) under ``Builder.GRAD_THROUGH_BROADCAST_ADD``; else both must have the
    output's shape (A/B)."""
    ins = node["inputs"]
    if node["op_type"] != "Add" or len(ins) != 2 or ins[0] == ins[1] or k not in (0, 1):
        return False
    out = shapes[node["outputs"][0]]
    if not Builder.GRAD_THROUGH_BROADCAST_ADD:
        return shapes[ins[0]] == shapes[ins[1]] == out
    return shapes[ins[k]] == out


def split_offsets(node, shapes, constants) -> list | None:
    """Byte offsets of a Split's outputs in its input when each is one contiguous run of it
    (every input dimension before the axis of size 1) starting at a multiple of 256 bytes
    (WebGPU's largest minStorageBufferOffsetAlignment, so a binding of any adapter may start
    there); else None. The caller adds the input's own offset and checks it too."""
    x = shapes.get(node["inputs"][0])
    if x is None or not all(node["outputs"]):
        return None
    values = [constants[i]["values"] if i and i in constants else None for i in node["inputs"]]
    axis, sizes = split_spec(node, x, values)
    if math.prod(x[:axis]) != 1:
        return None
    inner = 4 * math.prod(x[axis + 1:])
    offs = [inner * sum(sizes[:k]) for k in range(len(sizes))]
    return None if any(o % 256 for o in offs) else offs

"""The embedding lookup: ONNX Gather(table, token ids, axis=0) whose indices are the model's
integer input, as ``nn.Embedding`` exports with both exporters (shaders/embed.wgsl; part of
the Gather card, ``gather.py``).

y[j, :] = table[clamp(ids[j]), :] for each of the N*T token ids j (the table viewed as
[rows, inner]); ids reach the GPU as u32 (the data gather copies them from the dataset's
shard, ``train/data_tokens.py``). An id outside [0, rows) is clamped to the nearest row (0 or
rows - 1) in the forward and the backward alike, on both engines; a dataset whose
``vocab_size`` exceeds the table is refused before any work (``data_tokens.check_tokens``).
ONNX carries no ``padding_idx``: its row trains like any other (PyTorch keeps its gradient 0).

The table's gradient is PyTorch's ``embedding_backward`` (dy scatter-added into zeros by
index) without atomics, bit-reproducible run to run: the N*T id positions are sorted by
(row, position) with a merge sort (ceil(log2(N*T)) passes, each element placed by a binary
search in its neighbouring run: O(N*T log^2(N*T)) reads in all), the table zeroed, then the
threads heading each row's run sum it in increasing position, per column (N*T * inner reads
in all): no cost grows with the vocabulary but the zeroing. (Until 2026-12 each id scanned
the others for the next equal one: O((N*T)^2) reads when the ids are mostly distinct.)
"""

import math

from ..backends.base import groups_1d
from ..errors import GraphError


def infer(node, ins, error):
    """The lookup's output shape: ids shape + table shape[1:]; ``error(node, msg)`` builds
    the GraphError (axis 0 only)."""
    axis = int(node.get("attrs", {}).get("axis", 0))
    if axis not in (0, -len(ins[0])):
        raise error(node, f"run-time indices (token ids) need axis 0 (an embedding lookup), "
                          f"got axis {axis}")
    return list(ins[1]) + list(ins[0][1:])


def check_indices(graph) -> None:
    """Refuse a Gather whose indices are neither a constant nor the model's integer input
    (GraphError naming the node), and an integer input read by anything but such a Gather."""
    inp = graph.input
    tokens = inp.get("dtype", "float32") == "int64"
    for n in graph.nodes:
        for k, name in enumerate(n["inputs"]):
            lookup = n["op_type"] == "Gather" and k == 1
            if lookup and name not in graph.constants and not (tokens and name == inp["name"]):
                raise GraphError(f"node {n['name']} (Gather): input 1 {name!r} (indices) is "
                                 "not a constant of the model; only constant indices or the "
                                 "model's token ids input are supported")
            if tokens and name == inp["name"] and not lookup:
                raise GraphError(f"node {n['name']} ({n['op_type']}) reads the token ids "
                                 f"input {name!r}; only a Gather's indices may")


def is_lookup(b, node) -> bool:
    """Whether ``node`` (a Gather) looks up run-time token ids."""
    return node["inputs"][1] not in b.plan.graph.constants


def _params(table, ids):
    inner = math.prod(table.shape[1:])
    return dict(inner=inner, count=ids.numel, rows=table.shape[0], width=0, src=0, dst=0)


async def forward(b, node, ins, outs):
    """y[j] = table[clamp(ids[j])]."""
    p = _params(ins[0], ins[1])
    n = p["count"] * p["inner"]
    if n:
        await b.kernel("embed", "embed_forward", groups_1d(n), params=dict(n=n, **p),
                       x=ins[0], ids=ins[1], out=outs[0])


async def backward(b, node, ins, gins, gouts):
    """d table[a] = sum over j with clamp(ids[j]) == a, increasing, of dy[j]: the id positions
    merge-sorted by (row, position), the table zeroed, each row's run summed by the threads
    of its first place."""
    p = _params(ins[0], ins[1])
    count = p["count"]
    size, n = p["rows"] * p["inner"], count * p["inner"]
    links = b.scratch(max(2 * count, 1))
    if size:
        await b.kernel("embed", "embed_zero", groups_1d(size), params=dict(n=size, **p),
                       ids=ins[1], out=gins[0], links=links)
    if not n:
        return
    await b.kernel("embed", "embed_iota", groups_1d(count), params=dict(n=n, **p),
                   ids=ins[1], links=links)
    src, width = 0, 1
    while width < count:
        await b.kernel("embed", "embed_merge", groups_1d(count),
                       params={**p, "n": n, "width": width, "src": src, "dst": count - src},
                       ids=ins[1], links=links)
        src, width = count - src, 2 * width
    await b.kernel("embed", "embed_backward", groups_1d(n), params={**p, "n": n, "src": src},
                   x=gouts[0], ids=ins[1], out=gins[0], links=links)

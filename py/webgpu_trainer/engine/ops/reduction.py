"""ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceSumSquare, ReduceL2, ReduceLogSumExp,
ReduceL1, ReduceProd forward and backward (shaders/reduction.wgsl), and
``per_row_workgroup``, the choice between one thread and one workgroup per reduced row that
Softmax and LayerNormalization share.

ONNX semantics: ``axes`` from the attribute (ReduceSum before opset 13, the others before 18) or
from the optional second input (which must be a constant of the model description); ``keepdims``
(default 1); no axes reduces everything unless ``noop_with_empty_axes`` = 1 (then the op is the
identity). float32 in, float32 out; the output has the input's shape with the reduced dims set to
1 (keepdims) or removed.

Gradients (PyTorch autograd): ReduceSum dx = dy broadcast; ReduceMean dx = dy / R (R values per
output); ReduceMax / ReduceMin follow ``torch.amax`` / ``torch.amin``: the gradient is split
evenly among all the positions equal to the extreme (ties), dx = dy / count where x == y, else 0
(not ``torch.max(dim)``, which gives it all to one index); ReduceSumSquare dx = 2 x dy;
ReduceL2 dx = x dy / y (0 where y == 0, torch's norm backward); ReduceLogSumExp dx =
dy exp(x - y) (torch.logsumexp); ReduceL1 dx = sign(x) dy; ReduceProd as torch's
prod_backward (dy y / x without zeros; at a row's single zero dy times the product of the
others; 0 elsewhere and in rows of several zeros). These five run one thread per output.
"""

import math

from ..backends.base import groups_1d
from ..errors import GraphError

TYPES = ("ReduceMax", "ReduceMean", "ReduceMin", "ReduceSum", "ReduceSumSquare", "ReduceL2",
         "ReduceLogSumExp", "ReduceL1", "ReduceProd")
REDUCE = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
          "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp")  # the importer maps all of them
ATTRS = {op: {"keepdims": 1, "noop_with_empty_axes": 0} for op in REDUCE}
_MODE = {"ReduceSum": 0, "ReduceMean": 0, "ReduceMax": 2, "ReduceMin": 3, "ReduceSumSquare": 1,
         "ReduceL2": 4, "ReduceLogSumExp": 5, "ReduceL1": 6, "ReduceProd": 7}
_ROW_VALUE = (1, 4, 5, 6, 7)  # modes of one thread per output only
_RUNS = 3  # runs of kept / reduced dims the kernel takes


def per_row_workgroup(rows: int, length: int, contiguous: bool = True) -> bool:
    """True when ``rows`` reductions of ``length`` values each run better with one 64-thread
    workgroup per row than with one thread per row: long rows, or too few rows to fill a GPU.
    ``contiguous``: a row's values are adjacent in memory; when they are not (rows interleave,
    e.g. softmax over the channels of NCHW), one thread per row reads neighbouring addresses
    in neighbouring threads, so it stays the choice while there are enough rows."""
    if not contiguous and rows >= 1024:
        return False
    return length >= 256 or (length >= 32 and rows < 1024)


def reduce_axes(node, rank, axes_values=None):
    """Sorted reduced axes (>= 0) of ``node`` for an input of ``rank`` dims; ``axes_values``: the
    values of the ``axes`` input when it is a constant. [] means the identity
    (noop_with_empty_axes); no axes otherwise means all. Raises GraphError."""
    a = node.get("attrs", {})
    axes = a.get("axes")
    if len(node["inputs"]) > 1 and node["inputs"][1]:
        if axes_values is None:
            raise GraphError(f"node {node['name']} ({node['op_type']}): the axes input "
                             f"{node['inputs'][1]!r} is not a constant")
        axes = axes_values
    if axes is None or len(axes) == 0:
        return [] if a.get("noop_with_empty_axes", 0) else list(range(rank))
    bad = [v for v in axes if not -rank <= int(v) < rank]
    if bad:
        raise GraphError(f"node {node['name']} ({node['op_type']}): axes {list(axes)} out of "
                         f"range for rank {rank}")
    return sorted({int(v) % rank for v in axes})


def infer(node, ins, consts):
    """Input shape with the reduced dims set to 1 (keepdims=1, default) or removed."""
    x = ins[0]
    axes = reduce_axes(node, len(x), consts[1] if len(consts) > 1 else None)
    if node.get("attrs", {}).get("keepdims", 1):
        return [[1 if i in axes else d for i, d in enumerate(x)]]
    return [[d for i, d in enumerate(x) if i not in axes]]


def _axes_of(b, node, rank):
    name = node["inputs"][1] if len(node["inputs"]) > 1 else ""
    c = b.plan.graph.constants.get(name) if name else None
    return reduce_axes(node, rank, c["values"] if c else None)


def runs(shape, axes):
    """(kept, reduced): the input's dims merged into runs of consecutive kept / reduced dims,
    each ``(size, element stride)``, outermost first; dims of size 1 are dropped."""
    merged = []
    for i, d in enumerate(shape):
        if d == 1:
            continue
        red = i in axes
        if merged and merged[-1][0] == red:
            merged[-1][1] *= d
        else:
            merged.append([red, d])
    kept, reduced, stride = [], [], 1
    for red, size in reversed(merged):
        (reduced if red else kept).insert(0, (size, stride))
        stride *= size
    return kept, reduced


def _params(b, node, shape):
    axes = _axes_of(b, node, len(shape))
    kept, reduced = runs(shape, axes)
    if len(kept) > _RUNS or len(reduced) > _RUNS:
        raise NotImplementedError(
            f"{node['name']} ({node['op_type']}): axes {axes} of shape {shape} split the "
            f"tensor into more than {_RUNS} runs of reduced or of kept dims")
    contiguous = not reduced or reduced[-1][1] == 1  # the innermost dims are reduced
    kept = [(1, 0)] * (_RUNS - len(kept)) + kept
    reduced = [(1, 0)] * (_RUNS - len(reduced)) + reduced
    n_out, r = math.prod(s for s, _ in kept), math.prod(s for s, _ in reduced)
    mode = _MODE[node["op_type"]]
    scale = 1.0 / r if node["op_type"] == "ReduceMean" and r else 1.0
    params = dict(n_out=n_out, mode=mode, R=r, scale=scale)
    for k in range(_RUNS):
        params.update({f"k{k}": kept[k][0], f"ks{k}": kept[k][1], f"r{k}": reduced[k][0],
                       f"rs{k}": reduced[k][1]})
    return params, n_out, r, mode, contiguous


async def forward(b, node, ins, outs, train):
    """y[o] = sum / mean / max / min of x over the reduced axes."""
    params, n_out, r, mode, contiguous = _params(b, node, ins[0].shape)
    if mode not in _ROW_VALUE and per_row_workgroup(n_out, r, contiguous):
        await b.kernel("reduction", "forward_wg", groups_1d(n_out, 1), params=params, x=ins[0],
                       out=outs[0])
    else:
        await b.kernel("reduction", "forward_out", groups_1d(n_out), params=params, x=ins[0],
                       out=outs[0])


async def backward(b, node, ins, outs, gins, gouts):
    """dx = dy (Sum), dy / R (Mean), dy / ties where x == extreme else 0 (Max / Min, as
    torch.amax / amin), 2 x dy, x dy / y, dy exp(x - y); no gradient for the axes input."""
    if gins[0] is None:
        return
    params, n_out, r, mode, contiguous = _params(b, node, ins[0].shape)
    binds = dict(params=params, x=ins[0] if mode else None, dy=gouts[0], out=gins[0])
    if mode not in _ROW_VALUE and per_row_workgroup(n_out, r, contiguous):
        await b.kernel("reduction", "backward_wg", groups_1d(n_out, 1), **binds)
    else:
        await b.kernel("reduction", "backward_out", groups_1d(n_out), **binds)

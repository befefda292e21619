"""LayerNormalization (ONNX opset 17) forward and backward (shaders/layernorm.wgsl).

Inputs X (float32, any rank), Scale, optional B; attributes ``axis`` (default -1: X is normalised
over the dims axis..rank-1, D values per row) and ``epsilon`` (1e-5); population variance.
Scale / B hold the normalised shape or a trailing part of it (leading 1s allowed, e.g. [D],
[1, D], or [W] of a [H, W] normalised shape, or a scalar): they broadcast as ONNX/NumPy does.
Outputs Y (X's shape) and, when the node names them, Mean and InvStdDev (X's shape with 1 on the
normalised dims), which get no gradient. ``stash_type`` is ignored (statistics are float32).

Gradients (PyTorch native_layer_norm_backward), with xhat = (x - mean) * rstd, g = dy * Scale:
  dx = rstd * (g - mean(g) - xhat * mean(g * xhat))  over each row,
  dScale = sum of dy * xhat and dB = sum of dy over the rows (and broadcast dims).
Short rows run one thread per row, long ones (or few rows) one workgroup per row; on GPU
adapters rows of 8-255 values run SEG threads a row (``segmented``); the last two are one
kernel (``*_seg``, SEG 64 or 16).
"""

import math

from ..backends.base import groups_1d
from . import gemm
from .reduction import per_row_workgroup
from ..errors import GraphError

TYPES = ("LayerNormalization",)
ATTRS = {"LayerNormalization": {"axis": -1, "epsilon": 1e-5, "stash_type": 1}}
# The backward adds the other use's gradient of X to dX when the plan asks (``Builder.
# grad_addend``; layernorm.wgsl flags bit 3): a residual stream read by LayerNorm and an Add.
GRAD_ADDEND = True
ADDEND = 8


def _axis(node, rank):
    axis = node.get("attrs", {}).get("axis", -1)
    if not -rank <= axis < rank:
        raise GraphError(f"node {node['name']} (LayerNormalization): axis {axis} out of range "
                         f"for rank {rank}")
    return axis % rank


def _param_size(node, shape, norm, what):
    """Values S of Scale / B, which must be a trailing part of the normalised shape ``norm``."""
    dims = list(shape)
    while dims and dims[0] == 1:
        dims.pop(0)
    if len(dims) > len(norm) or (dims and list(norm[len(norm) - len(dims):]) != dims):
        raise GraphError(f"node {node['name']} (LayerNormalization): {what} of shape "
                         f"{list(shape)} is not the normalised shape {list(norm)} or a trailing "
                         "part of it")
    return math.prod(dims)


def dims(node, x, scale, bias=None):
    """(rows, D, S, axis) of X shape ``x`` with Scale / B shapes; raises GraphError."""
    axis = _axis(node, len(x))
    s = _param_size(node, scale, x[axis:], "Scale")
    if bias is not None and _param_size(node, bias, x[axis:], "B") != s:
        raise GraphError(f"node {node['name']} (LayerNormalization): B of shape {list(bias)} "
                         f"does not match Scale {list(scale)}")
    return math.prod(x[:axis]), math.prod(x[axis:]), s, axis


def infer(node, ins, consts):
    """[Y, Mean, InvStdDev] shapes (as many as the node has outputs)."""
    x = ins[0]
    _, _, _, axis = dims(node, x, ins[1], ins[2] if len(ins) > 2 else None)
    stat = list(x[:axis]) + [1] * (len(x) - axis)
    return [list(x), stat, stat][:len(node["outputs"])]


def init(node, graph):
    """PyTorch's default init (nn.LayerNorm.reset_parameters): scale 1, bias 0."""
    return [(name, "fill", value) for name, value in zip(node["inputs"][1:3], (1.0, 0.0))
            if name in graph.tensors]


def _setup(b, node, ins):
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    rows, d, s, _ = dims(node, x.shape, scale.shape, bias.shape if bias else None)
    eps = float(node.get("attrs", {}).get("epsilon", 1e-5))
    return x, scale, bias, rows, d, s, eps, b.save(node, 2 * rows, "stats")


SEG = 16  # threads per row of layernorm.wgsl's *_seg kernels


def segmented(b, d: int) -> bool:
    """True for rows of 8-255 values on GPU adapters (``b.tiled``, ``Builder.LN_SEG``): SEG
    threads a row read neighbouring values, where one thread a row reads values D apart."""
    return b.tiled and b.LN_SEG and 8 <= d < 256


def _kernel(b, name, rows, d):
    """(entry point, workgroups, constants) of ``name`` (forward / backward) for ``rows``
    rows of ``d`` values: ``*_seg`` with SEG threads a row (16 when ``segmented``, 64 for
    long rows or few rows), else ``*_rows``."""
    seg = SEG if segmented(b, d) else 64 if per_row_workgroup(rows, d) else 0
    if seg:
        return f"{name}_seg", groups_1d(rows * seg), {"SEG": seg}
    return f"{name}_rows", groups_1d(rows), None


def param_parts(b, rows: int, d: int) -> int:
    """Parts of the rows the Scale / B gradients sum separately (a thread per (part, value)):
    on GPU adapters about ``Builder.LN_PARAM_THREADS`` threads of at least 16 rows each (the
    sums are latency-bound: each thread's loop reads 4 values a row); else ``b.splits``."""
    if not b.tiled:
        return b.splits(d, rows, min_per_split=64)
    return max(1, min(-(-b.LN_PARAM_THREADS // d), rows // 16, 8192))


def _params(rows, d, s, eps, has_bias=0, parts=1, flags=0) -> dict:
    """layernorm.wgsl's Params."""
    return dict(rows=rows, D=d, S=s, has_bias=has_bias, eps=eps, parts=parts, flags=flags)


async def forward(b, node, ins, outs, train):
    """Y = (X - mean) * rstd * Scale + B; the statistics stay in the node's save buffer for the
    backward and are copied to Mean / InvStdDev when those outputs exist."""
    x, scale, bias, rows, d, s, eps, stats = _setup(b, node, ins)
    params = _params(rows, d, s, eps, has_bias=int(bias is not None))
    entry, groups, constants = _kernel(b, "forward", rows, d)
    await b.kernel("layernorm", entry, groups, constants=constants, params=params, x=x,
                   scale=scale, bias=bias, out=outs[0], stats=stats)
    mean = outs[1] if len(outs) > 1 else None
    inv = outs[2] if len(outs) > 2 else None
    flags = (1 if mean is not None else 0) | (2 if inv is not None else 0)
    if flags:
        await b.kernel("layernorm", "stats_out", groups_1d(rows),
                       params=_params(rows, d, s, eps, flags=flags), out=mean, stats=stats,
                       out2=inv)


async def backward(b, node, ins, outs, gins, gouts):
    """dX, dScale, dB (each only when requested); nothing flows back through Mean / InvStdDev."""
    dy = gouts[0]
    if dy is None:
        return
    x, scale, _, rows, d, s, eps, stats = _setup(b, node, ins)
    if gins[0] is not None:
        entry, groups, constants = _kernel(b, "backward", rows, d)
        addend = b.grad_addend(node, 0)  # the other use's gradient of X: dX is their sum
        await b.kernel("layernorm", entry, groups, constants=constants,
                       params=_params(rows, d, s, eps, flags=ADDEND if addend else 0), x=x,
                       scale=scale, dy=dy, out=gins[0], stats=stats, out2=addend)
    gs = gins[1] if len(gins) > 1 else None
    gb = gins[2] if len(gins) > 2 else None
    if gs is None and gb is None:
        return
    parts = param_parts(b, rows, d)
    flags = (1 if gs is not None else 0) | (2 if gb is not None else 0)
    params = _params(rows, d, s, eps, parts=parts, flags=flags)
    if parts > 1 and s == d and b.tiled and b.LN_PARAM_TAIL:
        await _param_grads_one_fold(b, params, x, dy, stats, gs, gb)
        return
    direct = parts == 1 and s == d
    ps = (gs if direct else b.scratch(parts * d)) if gs is not None else None
    pb = (gb if direct else b.scratch(parts * d)) if gb is not None else None
    await b.kernel("layernorm", "param_grad", groups_1d(d * parts), params=params, x=x, dy=dy,
                   out=ps, stats=stats, out2=pb)
    if not direct:
        fold = _params(rows, d, s, eps, parts=parts)
        for g, part in ((gs, ps), (gb, pb)):
            if g is None:
                continue
            if b.tiled:  # GPU adapters: workgroups per scale value (H200, encoder at batch
                # 1000: ``fold``'s thread per value, 437 parts, 68 us each of four)
                await gemm.channel_sum(b, part, g, parts * (d // s), s, 1)
            else:
                await b.kernel("layernorm", "fold", groups_1d(s), params=fold, x=part, out=g,
                               stats=stats)


async def _param_grads_one_fold(b, params, x, dy, stats, gs, gb):
    """dScale / dB of a Scale as long as the row (S == D) summed in ``params["parts"]`` parts:
    ``param_grad`` writes float32 [parts, D] of dScale then [parts, D] of dB into one scratch
    buffer (flags bit 2), and one ``gemm.reduce_splits`` adds the first into ``gs`` and the
    second, as its tail, into ``gb`` (when only one is wanted, its parts alone). GPU adapters
    (``Builder.LN_PARAM_TAIL``): 2 dispatches where the two ``channel_sum`` folds took 3."""
    parts, d = params["parts"], params["D"]
    both = gs is not None and gb is not None
    part = b.scratch((2 if both else 1) * parts * d)
    if both:
        params = {**params, "flags": params["flags"] | 4}
    await b.kernel("layernorm", "param_grad", groups_1d(d * parts), params=params, x=x, dy=dy,
                   out=part if gs is not None else None, stats=stats,
                   out2=part if gs is None else None)
    await gemm.reduce_splits(b, part, gs if gs is not None else gb, parts, d,
                             tail=d if both else 0, out2=gb if both else None)

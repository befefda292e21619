"""Softmax and LogSoftmax on any axis (shaders/softmax.wgsl; short LogSoftmax rows through
shaders/loss.wgsl) and the NLL loss with batch metrics (shaders/loss.wgsl).

ONNX semantics by the model's opset (``graph.desc["opset"]``, 17 when absent): from opset 13 the
op normalises along ``axis`` (default -1); before 13 the input is coerced to 2-D at ``axis``
(default 1) and each row normalises over the whole flattened trailing block x.shape[axis:].
float32, output shape = input shape. Numerically stable (the row maximum is subtracted first).
"""

import math

from ..backends.base import groups_1d
from .reduction import per_row_workgroup
from ..errors import GraphError

TYPES = ("LogSoftmax", "Softmax")


def _axis(node, opset, shapes):
    return 1 if opset < 13 else -1


ATTRS = {op: {"axis": _axis} for op in TYPES}  # ONNX: -1 from opset 13, 1 before


def normalize(node, opset, shapes) -> list:
    """Before opset 13 a Softmax over a >2-D input flattens it: a problem unless the axis is
    the last one."""
    x, attrs, op = shapes(node["inputs"][0]), node["attrs"], node["op_type"]
    if opset < 13 and x is not None and len(x) > 2 and attrs["axis"] % len(x) != len(x) - 1:
        return [f"node {node['name']} ({op}): opset {opset} {op} flattens its {len(x)}-D "
                "input; re-export with opset >= 13"]
    return []


def axis_of(node, rank, opset):
    """The normalised axis (>= 0); ONNX's default is -1 from opset 13, 1 before."""
    axis = node.get("attrs", {}).get("axis", -1 if opset >= 13 else 1)
    if not -rank <= axis < rank:
        raise GraphError(f"node {node['name']} ({node['op_type']}): axis {axis} out of range "
                         f"for rank {rank}")
    return axis % rank


def view(shape, node, opset=17):
    """(outer, C, inner): the input seen as [outer, C, inner] with rows of C values along the
    softmax axis (opset >= 13), or as [outer, C, 1] with C = prod(shape[axis:]) (opset < 13)."""
    axis = axis_of(node, len(shape), opset)
    if opset < 13:
        return math.prod(shape[:axis]), math.prod(shape[axis:]), 1
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def _opset(b) -> int:
    return int(b.plan.graph.desc.get("opset", 17) or 17)


def infer(node, ins, consts):
    """Output shape = input shape; raises GraphError when the axis is out of range."""
    axis_of(node, len(ins[0]), 13)
    return [list(ins[0])]


SEG = 16  # threads per row of softmax.wgsl's *_seg kernels


def segmented(b, c: int, inner: int) -> bool:
    """True for rows of 8-255 contiguous values (``inner`` 1) on GPU adapters (``b.tiled``):
    SEG threads a row read neighbouring values, where one thread a row reads values C apart
    (an H200 profile of the ViT at batch 1000, 260,000 attention rows of 65: the softmax's
    forward and backward were 27% of the step)."""
    return b.tiled and inner == 1 and 8 <= c < 256


async def forward(b, node, ins, outs, train):
    """Softmax: y = exp(x - max) / sum(exp(x - max)); LogSoftmax: y = x - max - log(sum(...)),
    along the row of ``view``."""
    outer, c, inner = view(ins[0].shape, node, _opset(b))
    rows, log = outer * inner, int(node["op_type"] == "LogSoftmax")
    params = dict(outer=outer, C=c, inner=inner)
    if segmented(b, c, inner):
        await b.kernel("softmax", "forward_seg", groups_1d(rows * SEG), constants={"SEG": SEG},
                       params={**params, "use_log": log}, x=ins[0], out=outs[0])
    elif per_row_workgroup(rows, c, inner == 1):
        await b.kernel("softmax", "forward_wg", groups_1d(rows, 1),
                       params={**params, "use_log": log}, x=ins[0], out=outs[0])
    elif log:
        await b.kernel("loss", "log_softmax_forward", groups_1d(rows),
                       params={**params, "eps": 0.0}, st=b.step, x=ins[0], out=outs[0])
    else:
        await b.kernel("softmax", "forward_rows", groups_1d(rows),
                       params={**params, "use_log": log}, x=ins[0], out=outs[0])


async def backward(b, node, ins, outs, gins, gouts):
    """Softmax: dx = y * (dy - sum(dy * y)); LogSoftmax: dx = dy - exp(y) * sum(dy) (PyTorch's
    _softmax_backward_data / _log_softmax_backward_data), sums along the row."""
    if gins[0] is None:
        return
    outer, c, inner = view(ins[0].shape, node, _opset(b))
    rows, log = outer * inner, int(node["op_type"] == "LogSoftmax")
    params = dict(outer=outer, C=c, inner=inner)
    if segmented(b, c, inner):
        await b.kernel("softmax", "backward_seg", groups_1d(rows * SEG), constants={"SEG": SEG},
                       params={**params, "use_log": log}, x=outs[0], g=gouts[0], out=gins[0])
    elif per_row_workgroup(rows, c, inner == 1):
        await b.kernel("softmax", "backward_wg", groups_1d(rows, 1),
                       params={**params, "use_log": log}, x=outs[0], g=gouts[0], out=gins[0])
    elif log:
        await b.kernel("loss", "log_softmax_backward", groups_1d(rows),
                       params={**params, "eps": 0.0}, st=b.step, x=outs[0], y=gouts[0],
                       out=gins[0])
    else:
        await b.kernel("softmax", "backward_rows", groups_1d(rows),
                       params={**params, "use_log": log}, x=outs[0], g=gouts[0], out=gins[0])

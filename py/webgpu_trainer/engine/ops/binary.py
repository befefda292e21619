"""Add, Sub, Mul, Div, Pow with NumPy (multidirectional) broadcasting (shaders/binary.wgsl);
PRelu (the slope, trainable, broadcast to the input: per channel ``[C, 1, 1]``, one value, ...);
Max, Min, Sum, Mean of two or more inputs (variadic ONNX ops, each input broadcast): n inputs
run as a chain of n - 1 two-input steps, ((X0 op X1) op X2) ..., whose partial results are kept
for the backward (Mean: Sums, the last step scaled by 1/n, binary.wgsl's MEAN_SCALE).

Semantics are ONNX's (opset 7+ broadcasting: shapes aligned on the right, a dim of 1 stretches);
gradients are PyTorch's autograd formulas, summed over the broadcast dims of each operand
("unbroadcast"). Either operand may be an activation, a weight of ``P`` or a constant of the
model description, and both may be the same tensor (``Mul(x, x)``). Everything is float32.
Max / Min give a tie's whole gradient to the first input (torch.maximum splits it in halves).

Shapes are collapsed before they reach the shader: output dims of size 1 are dropped and
neighbouring dims with the same broadcast pattern merged, so ``[2, 3, 4, 5] + [3, 1, 5]`` runs as
``[2, 3, 4, 5]`` with B's strides ``(0, 5, 0, 1)`` and a residual ``[N, C] + [N, C]`` as one dim.
At most 6 collapsed dims (any input rank whose collapsed form fits).
"""

import math

from ..backends import shaders
from ..backends.base import groups_1d
from ..builder import Tensor
from .gemm import reduce_splits
from ..errors import GraphError

TYPES = ("Add", "Sub", "Mul", "Div", "Pow", "PRelu", "Max", "Min", "Sum", "Mean")
ATTRS = {op: {} for op in TYPES}

CODES = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Pow": 4, "PRelu": 5, "Max": 6, "Min": 7,
         "Sum": 8, "Mean": 9}  # the shader's OP override
shaders.define("binary_ops", {f"BINARY_{op.upper()}": code for op, code in CODES.items()},
               "ops/binary.py CODES: the values of binary.wgsl's OP override")
VARIADIC = ("Max", "Min", "Sum", "Mean")
MAX_DIMS = 6       # collapsed dims the uniform holds
NAN_BITS = 0x7FC00000
# Add / Sub of two inputs apply a following in-place Relu in their forward (residual Add + ReLU,
# MatMul + Add(bias) + ReLU): the last step's kernel writes max(y, 0) (plan.fused_relu).
FUSES_RELU_FORWARD = ("Add", "Sub")


def broadcast_shape(a, b):
    """NumPy's broadcast of shapes ``a`` and ``b`` (lists of int), or None when they do not
    broadcast. Example: ``broadcast_shape([2, 3, 4, 5], [3, 1, 5]) == [2, 3, 4, 5]``."""
    r = max(len(a), len(b))
    pa, pb = [1] * (r - len(a)) + list(a), [1] * (r - len(b)) + list(b)
    out = []
    for x, y in zip(pa, pb):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return out


def collapse(out, shapes):
    """The output ``out`` viewed as few dims, innermost first: ``[(size, strides, out_stride,
    broadcast)]`` with ``strides[k]`` the element stride of operand ``shapes[k]`` along the dim
    (0 where it is broadcast) and ``broadcast[k]`` whether it is. Output dims of size 1 are
    dropped; neighbours with the same broadcast pattern are merged.

    Example: ``collapse([2, 3, 4, 5], [[2, 3, 4, 5], [3, 1, 5]])`` ->
    ``[(5, [1, 1], 1, (F, F)), (4, [5, 0], 5, (F, T)), (3, [20, 5], 20, (F, F)),
    (2, [60, 0], 60, (F, T))]``.
    """
    r = len(out)
    padded = [[1] * (r - len(s)) + list(s) for s in shapes]
    groups = []  # outermost first: [size, pattern]
    for d in range(r):
        if out[d] == 1:
            continue
        pattern = tuple(s[d] == 1 for s in padded)
        if groups and groups[-1][1] == pattern:
            groups[-1][0] *= out[d]
        else:
            groups.append([out[d], pattern])
    dims, acc, acc_out = [], [1] * len(shapes), 1
    for size, pattern in reversed(groups):
        dims.append((size, [0 if bc else acc[k] for k, bc in enumerate(pattern)], acc_out,
                     pattern))
        acc = [a if bc else a * size for a, bc in zip(acc, pattern)]
        acc_out *= size
    return dims


def infer(node, ins, consts):
    """Output shape = broadcast of the input shapes; raises GraphError naming the node and
    the shapes when they do not broadcast (or need more than 6 dims once collapsed), a
    variadic op has fewer than two inputs (another op other than two), or PRelu's slope would
    change the input's shape."""
    op = node["op_type"]
    wrong = len(ins) < 2 if op in VARIADIC else len(ins) != 2
    if wrong or any(s is None for s in ins):
        raise GraphError(f"node {node['name']} ({op}): {len(ins)} inputs; only {op} of "
                         + ("two or more inputs is" if op in VARIADIC else "two inputs is")
                         + " supported")
    out = list(ins[0])
    for b in ins[1:]:
        a, b = out, list(b)
        out = broadcast_shape(a, b)
        if out is None or (op == "PRelu" and out != a):
            raise GraphError(f"node {node['name']} ({op}): shapes {a} and {b} do "
                             "not broadcast" + (" to the input's" if op == "PRelu" else ""))
        if len(collapse(out, [a, b])) > MAX_DIMS:
            raise GraphError(f"node {node['name']} ({node['op_type']}): shapes {a} and {b} "
                             f"broadcast over more than {MAX_DIMS} separate dims")
    return [out]


def _params(n, dims=(), red=(), total=1, chunk=1, relu=0) -> dict:
    """The shader's Params: header, then 6 rows of dims and 6 of red (padded with size 1);
    ``relu``: the forward writes max(y, 0)."""
    rows = list(dims) + [(1, 0, 0, 0)] * (MAX_DIMS - len(dims))
    reds = list(red) or [(1, 0, 0, 0)]
    reds += [(1, 0, 0, 0)] * (MAX_DIMS - len(reds))
    return dict(n=n, rank=len(dims), nred=len(red), total=total, chunk=chunk,
                nan_bits=NAN_BITS, relu=relu, dims=rows, red=reds)


def _steps(b, node, ins, out):
    """The chain of a node: ``[(consts, A, B, Y)]``, one two-input step each; a variadic
    node's partial results are per-node buffers (``b.save``), read again by the backward."""
    op = node["op_type"]
    last = len(ins) - 1
    code = CODES["Sum"] if op == "Mean" and last > 1 else CODES[op]
    steps, acc = [], ins[0]
    for k in range(1, last + 1):
        if k == last:
            consts = {"OP": CODES[op]}
            if op == "Mean":
                consts["MEAN_SCALE"] = 1.0 / len(ins)
            steps.append((consts, acc, ins[k], out))
            break
        shape = broadcast_shape(acc.shape, ins[k].shape)
        part = Tensor(shape, b.save(node, max(1, math.prod(shape)), f"partial{k}"))
        steps.append(({"OP": code}, acc, ins[k], part))
        acc = part
    return steps


async def forward(b, node, ins, outs, train):
    """Y = A op B (a variadic node: the chain of ``_steps``), one dispatch a step: index-free
    when A, B and Y have one size, else with the broadcast strides (0 on broadcast dims) of
    the collapsed shapes in the uniform; the last step applies a fused ReLU (``b.fused``)."""
    fused = int("forward" in b.fused(node))
    for consts, A, B, Y in _steps(b, node, ins, outs[0]):
        n = Y.numel
        relu = fused if Y is outs[0] else 0
        if n == 0:
            continue
        if A.numel == n and B.numel == n:
            await b.kernel("binary", "forward_same", b.elementwise_groups(n),
                           params=_params(n, relu=relu), constants=consts, out=Y, x0=A, x1=B)
            continue
        dims = [(size, st[0], st[1], 0)
                for size, st, _, _ in collapse(Y.shape, [A.shape, B.shape])]
        await b.kernel("binary", "forward", b.elementwise_groups(n),
                       params=_params(n, dims, relu=relu), constants=consts, out=Y, x0=A, x1=B)


async def backward(b, node, ins, outs, gins, gouts):
    """dA = unbroadcast(dY * dY/dA) to A's shape, dB likewise (each written, not added); a
    variadic node's chain backwards, step by step (the partial results' gradients in per-node
    buffers).

    Add, Sum: 1, 1; Sub: 1, -1; Mul: b, a; Div: 1/b, -(a/b)/b; Pow: b*a^(b-1) (0 where b ==
    0), a^b*ln(a) (0 where a == 0 and b >= 0) -- torch's pow_backward_self /
    pow_backward_exponent (tools/autograd/FunctionsManual.cpp); PRelu: a > 0 ? 1 : b, a > 0 ?
    0 : a (torch's prelu backward); Max: a >= b, b > a (Min: <=, <; ties to A); Mean: 1/n.
    """
    steps = _steps(b, node, ins, outs[0])
    dy = gouts[0]
    for k in range(len(steps), 0, -1):
        consts, A, B, Y = steps[k - 1]
        if gins[k] is not None and not _is_dy(consts, gins[k], dy):
            await _gradient(b, consts, 1, B, A, dy, gins[k], Y.shape)
        da = gins[0] if k == 1 else Tensor(A.shape, b.save(node, max(1, A.numel), f"d{k}"))
        if da is not None and not _is_dy(consts, da, dy):
            await _gradient(b, consts, 0, A, B, dy, da, Y.shape)
        dy = da
        if dy is None:
            return


def _is_dy(consts, g, dy) -> bool:
    """Whether the gradient ``g`` to write is ``dy`` itself (an Add's input gradient the plan
    aliased to its output's: ``fusion.passes_grad``): nothing to write."""
    return consts["OP"] == CODES["Add"] and g.buf is dy.buf and g.offset == dy.offset and \
        g.shape == dy.shape


async def _gradient(b, consts, side, t, o, dy, g, out_shape):
    """g = sum of dy * df/dt over the dims ``t`` is broadcast along: a gather (thread j owns
    t[j]), split over the broadcast positions when t alone leaves the GPU idle. ``consts``:
    the step's OP (and MEAN_SCALE)."""
    consts = {**consts, "SIDE": side}
    n_out = dy.numel
    count = t.numel
    if count == 0:
        return
    if count == n_out and o.numel == n_out:
        await b.kernel("binary", "backward_same", b.elementwise_groups(count),
                       params=_params(count), constants=consts, out=g, x0=t, x1=o, x2=dy)
        return
    dims = collapse(out_shape, [t.shape, o.shape])
    kept = [(size, so, st[1], 0) for size, st, so, bc in dims if not bc[0]]
    red = [(size, so, st[1], 0) for size, st, so, bc in dims if bc[0]]
    if not red and b.BINARY_FULL:  # t spans Y: one product an element (H200 ViT at batch
        # 1000: the attention's q / k scaling's gradient, 4.2 M elements, 35-64 -> ... us)
        await b.kernel("binary", "backward_full", b.elementwise_groups(count),
                       params=_params(count, kept), constants=consts, out=g, x0=t, x1=o, x2=dy)
        return
    total = 1
    for row in red:
        total *= row[0]
    splits = b.splits(count, total, min_per_split=64) if total else 1
    chunk = max(1, (total + splits - 1) // splits)
    splits = max(1, (total + chunk - 1) // chunk)
    target = b.scratch(splits * count) if splits > 1 else g
    gx, gy, _ = groups_1d(count)
    await b.kernel("binary", "backward", (gx, gy, splits),
                   params=_params(count, kept, red, total, chunk), constants=consts,
                   out=target, x0=t, x1=o, x2=dy)
    if splits > 1:
        await reduce_splits(b, target, g, splits, count)

"""2-D pooling (NCHW): MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool; 1-D ([N, C, L])
as 2-D over [N, C, 1, L] (numpy views).

ONNX attributes (kernel_shape, strides, pads [top, left, bottom, right], dilations, ceil_mode,
count_include_pad, auto_pad); output sizes and the average's divisor as PyTorch's
``pooling_output_shape`` / ``avg_pool2d``, gradients as PyTorch's autograd (max: to the FIRST
maximum of each window in window order, rows then columns; average: dy / divisor over the
window). Unsupported attributes raise ``graph.GraphError`` naming the node, with the same rules
as the GPU ops (``ops/pool.py``), whose geometry is not shared: this is the tests' oracle.
"""

import numpy as np

from ..engine.errors import GraphError
from ..engine.ops.card import lift_1d

TYPES = ("MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool")


def _error(node, msg):
    return GraphError(f"node {node['name']} ({node['op_type']}): {msg}")


def pool_out_len(size, k, s, p0, p1, d, ceil_mode):
    """Windows along one axis: floor (or ceil) of (size + p0 + p1 - span) / s + 1, where
    span = d*(k-1) + 1; with ceil_mode a last window that starts in the end padding (or past
    it) is dropped."""
    span = d * (k - 1) + 1
    room = size + p0 + p1 - span
    if room < 0:
        return 0
    n = (-(-room // s) if ceil_mode else room // s) + 1
    if ceil_mode and (n - 1) * s - p0 >= size:
        n -= 1
    return n


def _same_pads(mode, size, k, s, d):
    if mode == "VALID":
        return 0, 0
    total = max(0, (-(-size // s) - 1) * s + d * (k - 1) + 1 - size)
    if mode == "SAME_UPPER":
        return total // 2, total - total // 2
    return total - total // 2, total // 2


def attrs(node, shape):
    """dict(kernel, strides, pads, dilations, ceil_mode, include_pad) for an input ``shape``."""
    op = node["op_type"]
    if len(shape) not in (3, 4):
        raise _error(node, f"input {list(shape)} is not NCL or NCHW (only 1-D and 2-D pooling "
                     "are supported)")
    a = lift_1d(node).get("attrs", {}) or {}
    shape = list(shape[:2]) + [1] + list(shape[2:]) if len(shape) == 3 else shape
    if op.startswith("Global"):
        return {"kernel": tuple(shape[2:]), "strides": (1, 1), "pads": (0, 0, 0, 0),
                "dilations": (1, 1), "ceil_mode": 0, "include_pad": 0}
    if op == "MaxPool" and len(node["outputs"]) > 1 and node["outputs"][1]:
        raise _error(node, "the Indices output is not supported")
    kernel = tuple(a["kernel_shape"])
    strides = tuple(a.get("strides") or (1, 1))
    dil = tuple(a.get("dilations") or (1, 1))
    pads = tuple(a.get("pads") or (0, 0, 0, 0))
    if op == "AveragePool" and dil != (1, 1):
        raise _error(node, f"dilations {list(dil)} are not supported (only 1)")
    ceil_mode = int(a.get("ceil_mode", 0) or 0)
    auto_pad = a.get("auto_pad") or "NOTSET"
    if auto_pad != "NOTSET":
        if ceil_mode:
            raise _error(node, f"ceil_mode together with auto_pad={auto_pad} is not supported")
        (pt, pb), (pl, pr) = [_same_pads(auto_pad, shape[2 + i], kernel[i], strides[i], dil[i])
                              for i in (0, 1)]
        pads = (pt, pl, pb, pr)
    return {"kernel": kernel, "strides": strides, "pads": pads, "dilations": dil,
            "ceil_mode": ceil_mode, "include_pad": int(a.get("count_include_pad", 0) or 0)}


def _layout(shape, kernel, strides, pads, dilations, ceil_mode):
    """Output size and a padded extent that every tap of every window indexes."""
    h, w = shape[2:]
    oh = pool_out_len(h, kernel[0], strides[0], pads[0], pads[2], dilations[0], ceil_mode)
    ow = pool_out_len(w, kernel[1], strides[1], pads[1], pads[3], dilations[1], ceil_mode)
    if oh <= 0 or ow <= 0:
        raise ValueError(f"input {list(shape)} too small for pooling kernel {list(kernel)}")
    hp = max(pads[0] + h, (oh - 1) * strides[0] + dilations[0] * (kernel[0] - 1) + 1)
    wp = max(pads[1] + w, (ow - 1) * strides[1] + dilations[1] * (kernel[1] - 1) + 1)
    return oh, ow, hp, wp


def _taps(kernel, strides, dilations, oh, ow):
    """(row slice, col slice) of the padded plane read by each tap, in window order."""
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            r0, c0 = i * dilations[0], j * dilations[1]
            yield (slice(r0, r0 + strides[0] * (oh - 1) + 1, strides[0]),
                   slice(c0, c0 + strides[1] * (ow - 1) + 1, strides[1]))


def maxpool2d(x, kernel, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), ceil_mode=0):
    """(y [N, C, OH, OW], argmax [N, C, OH, OW] int64 = h*W + w in the input plane) of x
    [N, C, H, W]; the first maximum in window order wins; padding is -inf (never wins)."""
    n, c, h, w = x.shape
    oh, ow, hp, wp = _layout(x.shape, kernel, strides, pads, dilations, ceil_mode)
    pt, pl = pads[0], pads[1]
    xp = np.full((n, c, hp, wp), -np.inf, x.dtype)
    xp[:, :, pt:pt + h, pl:pl + w] = x
    inside = np.zeros((hp, wp), bool)
    inside[pt:pt + h, pl:pl + w] = True
    where = (np.arange(hp) - pt)[:, None] * w + (np.arange(wp) - pl)[None, :]
    y = np.full((n, c, oh, ow), -np.inf, x.dtype)
    arg = np.full((n, c, oh, ow), -1, np.int64)
    for rs, cs in _taps(kernel, strides, dilations, oh, ow):
        v = xp[:, :, rs, cs]
        take = inside[rs, cs] & ((arg < 0) | (v > y))
        y = np.where(take, v, y)
        arg = np.where(take, where[rs, cs], arg)
    if (arg < 0).any():
        raise ValueError(f"a pooling window of kernel {list(kernel)} holds only padding")
    return y, arg


def maxpool2d_backward(x_shape, arg, dy):
    """dx [N, C, H, W]: dy of each output added at its argmax."""
    n, c, h, w = x_shape
    plane = np.arange(n * c).reshape(n, c, 1, 1) * (h * w)
    dx = np.bincount((plane + arg).ravel(), weights=dy.ravel(), minlength=n * c * h * w)
    return dx.astype(dy.dtype).reshape(x_shape)


def _divisor(size, n_out, k, s, p0, p1, include_pad):
    """Per-output divisor along one axis (PyTorch avg_pool2d: hend clipped to size + p1)."""
    start = np.arange(n_out) * s - p0
    end = np.minimum(start + k, size + p1)
    if include_pad:
        return end - start
    return np.minimum(end, size) - np.maximum(start, 0)


def avgpool2d(x, kernel, strides=(1, 1), pads=(0, 0, 0, 0), ceil_mode=0, include_pad=0):
    """(y [N, C, OH, OW], divisor [OH, OW]) of x [N, C, H, W]: window sums over the divisor."""
    n, c, h, w = x.shape
    oh, ow, hp, wp = _layout(x.shape, kernel, strides, pads, (1, 1), ceil_mode)
    pt, pl = pads[0], pads[1]
    xp = np.zeros((n, c, hp, wp), x.dtype)
    xp[:, :, pt:pt + h, pl:pl + w] = x
    total = np.zeros((n, c, oh, ow), x.dtype)
    for rs, cs in _taps(kernel, strides, (1, 1), oh, ow):
        total += xp[:, :, rs, cs]
    div = np.outer(_divisor(h, oh, kernel[0], strides[0], pads[0], pads[2], include_pad),
                   _divisor(w, ow, kernel[1], strides[1], pads[1], pads[3], include_pad))
    if (div <= 0).any():
        raise ValueError(f"a pooling window of kernel {list(kernel)} holds only padding")
    return total / div, div


def avgpool2d_backward(x_shape, kernel, strides, pads, div, dy):
    """dx [N, C, H, W]: dy / divisor spread over each window."""
    n, c, h, w = x_shape
    oh, ow = dy.shape[2:]
    hp = max(pads[0] + h, (oh - 1) * strides[0] + kernel[0])
    wp = max(pads[1] + w, (ow - 1) * strides[1] + kernel[1])
    g = dy / div
    dxp = np.zeros((n, c, hp, wp), dy.dtype)
    for rs, cs in _taps(kernel, strides, (1, 1), oh, ow):
        dxp[:, :, rs, cs] += g
    return dxp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + w].copy()


def forward(node, ins, ctx):
    """[y]; a 1-D input [N, C, L] is pooled as [N, C, 1, L] (y [N, C, OL])."""
    x = ins[0]
    a = attrs(node, x.shape)
    x4 = x[:, :, None] if x.ndim == 3 else x
    if node["op_type"] in ("MaxPool", "GlobalMaxPool"):
        y, saved = maxpool2d(x4, a["kernel"], a["strides"], a["pads"], a["dilations"],
                             a["ceil_mode"])
    else:
        y, saved = avgpool2d(x4, a["kernel"], a["strides"], a["pads"], a["ceil_mode"],
                             a["include_pad"])
    return [y[:, :, 0] if x.ndim == 3 else y], (a, saved)


def backward(node, ins, outs, cache, douts, ctx):
    """[dx] of the forward's saved argmax / divisors."""
    a, saved = cache
    x, dy = ins[0], douts[0]
    shape, dy4 = (x.shape[:2] + (1,) + x.shape[2:], dy[:, :, None]) if x.ndim == 3 \
        else (x.shape, dy)
    if node["op_type"] in ("MaxPool", "GlobalMaxPool"):
        dx = maxpool2d_backward(shape, saved, dy4)
    else:
        dx = avgpool2d_backward(shape, a["kernel"], a["strides"], a["pads"], saved, dy4)
    return [dx.reshape(x.shape)]

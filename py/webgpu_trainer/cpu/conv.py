"""Conv 2-D (NCHW; ONNX pads [top, left, bottom, right], strides, dilations, group)."""

import numpy as np

TYPES = ("Conv",)


def _geometry(x, w, pads, strides, dilations):
    kh, kw = w.shape[2:]
    oh = (x.shape[2] + pads[0] + pads[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (x.shape[3] + pads[1] + pads[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    return oh, ow


def _padded(x, pads):
    pt, pl, pb, pr = pads
    return np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))


def _taps(w, strides, dilations, oh, ow):
    """(i, j, row slice, col slice) of the padded input seen by tap (i, j) of every output."""
    sh, sw = strides
    dh, dw = dilations
    for i in range(w.shape[2]):
        for j in range(w.shape[3]):
            yield i, j, slice(i * dh, i * dh + sh * (oh - 1) + 1, sh), \
                slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)


def conv2d(x, w, b=None, pads=(0, 0, 0, 0), strides=(1, 1), dilations=(1, 1), group=1):
    """y [N, K, OH, OW] of x [N, C, H, W] and w [K, C/group, KH, KW] (+ b [K])."""
    oh, ow = _geometry(x, w, pads, strides, dilations)
    xp = _padded(x, pads)
    n, c = x.shape[:2]
    k = w.shape[0]
    kg, cg = k // group, c // group
    y = np.zeros((n, k, oh, ow), x.dtype)
    for g in range(group):
        ks, cs = slice(g * kg, (g + 1) * kg), slice(g * cg, (g + 1) * cg)
        for i, j, rs, cl in _taps(w, strides, dilations, oh, ow):
            y[:, ks] += np.einsum("nchw,kc->nkhw", xp[:, cs, rs, cl], w[ks, :, i, j])
    if b is not None:
        y += b[None, :, None, None]
    return y


def conv2d_backward(x, w, dy, pads=(0, 0, 0, 0), strides=(1, 1), dilations=(1, 1), group=1):
    """(dx, dw, db) of conv2d for the output gradient dy."""
    oh, ow = dy.shape[2:]
    xp = _padded(x, pads)
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    k, c = w.shape[0], x.shape[1]
    kg, cg = k // group, c // group
    for g in range(group):
        ks, cs = slice(g * kg, (g + 1) * kg), slice(g * cg, (g + 1) * cg)
        for i, j, rs, cl in _taps(w, strides, dilations, oh, ow):
            dw[ks, :, i, j] += np.einsum("nkhw,nchw->kc", dy[:, ks], xp[:, cs, rs, cl])
            dxp[:, cs, rs, cl] += np.einsum("nkhw,kc->nchw", dy[:, ks], w[ks, :, i, j])
    pt, pl = pads[0], pads[1]
    dx = dxp[:, :, pt:pt + x.shape[2], pl:pl + x.shape[3]]
    return dx, dw, dy.sum(axis=(0, 2, 3))


def attrs(node) -> dict:
    a = node.get("attrs", {})
    return dict(pads=a.get("pads", [0, 0, 0, 0]), strides=a.get("strides", [1, 1]),
                dilations=a.get("dilations", [1, 1]), group=a.get("group", 1))


def forward(node, ins, ctx):
    b = ins[2] if len(ins) > 2 else None
    return [conv2d(ins[0], ins[1], b, **attrs(node))], None


def backward(node, ins, outs, cache, douts, ctx):
    dx, dw, db = conv2d_backward(ins[0], ins[1], douts[0], **attrs(node))
    return [dx, dw] + ([db] if len(ins) > 2 else [])

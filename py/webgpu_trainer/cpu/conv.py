"""Conv 2-D (NCHW; ONNX pads [top, left, bottom, right], strides, dilations, group); 1-D
([N, C, L]) as 2-D over [N, C, 1, L] (numpy views); ConvTranspose 2-D (written directly as its
scatter, one tap at a time, not through conv2d)."""

import numpy as np

from ..engine.ops.card import lift_1d

TYPES = ("Conv", "ConvTranspose")


def _geometry(x, w, pads, strides, dilations):
    kh, kw = w.shape[2:]
    oh = (x.shape[2] + pads[0] + pads[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (x.shape[3] + pads[1] + pads[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    return oh, ow


def _padded(x, pads):
    """x with zero rows / columns around (np.pad's general machinery cost more than the copy)."""
    pt, pl, pb, pr = pads
    if not (pt or pl or pb or pr):
        return x
    n, c, h, w = x.shape
    xp = np.zeros((n, c, h + pt + pb, w + pl + pr), x.dtype)
    xp[:, :, pt:pt + h, pl:pl + w] = x
    return xp


def _windows(xp, kh, kw, strides, dilations, oh, ow):
    """View [N, C, OH, OW, KH, KW] of the padded input: element (n, c, y, x, i, j) is
    xp[n, c, y*sh + i*dh, x*sw + j*dw] (no copy: numpy stride tricks)."""
    sh, sw = strides
    dh, dw = dilations
    win = np.lib.stride_tricks.sliding_window_view(
        xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    return win[:, :, :sh * (oh - 1) + 1:sh, :sw * (ow - 1) + 1:sw, ::dh, ::dw]


def _cols(xp, cs, kh, kw, strides, dilations, oh, ow):
    """im2col of one group per image: [N, Cg*KH*KW, OH*OW]. This order copies whole output
    rows (the window view's last axis is the output column), and W [Kg, Cg*KH*KW] times it
    (one batched product) is the output [N, Kg, OH*OW] already in NCHW order: no transpose of
    the output ([Cg*KH*KW, N*OH*OW] and one product cost an extra copy of y, 1.5-7x slower
    for SeedNet's layers at batch 64; [N*OH*OW, Cg*KH*KW] copied runs of KW values)."""
    win = _windows(xp[:, cs], kh, kw, strides, dilations, oh, ow)
    return win.transpose(0, 1, 4, 5, 2, 3).reshape(win.shape[0], win.shape[1] * kh * kw, -1)


def conv2d(x, w, b=None, pads=(0, 0, 0, 0), strides=(1, 1), dilations=(1, 1), group=1,
           keep=None):
    """y [N, K, OH, OW] of x [N, C, H, W] and w [K, C/group, KH, KW] (+ b [K]): im2col, then
    one batched matrix product per group (BLAS). ``keep``: a list that receives each group's
    im2col matrices (``conv2d_backward``'s ``cols``)."""
    oh, ow = _geometry(x, w, pads, strides, dilations)
    xp = _padded(x, pads)
    n, c = x.shape[:2]
    k, _, kh, kw = w.shape
    kg, cg = k // group, c // group
    y = np.empty((n, k, oh * ow), x.dtype)
    for g in range(group):
        ks, cs = slice(g * kg, (g + 1) * kg), slice(g * cg, (g + 1) * cg)
        cols = _cols(xp, cs, kh, kw, strides, dilations, oh, ow)
        if keep is not None:
            keep.append(cols)
        np.matmul(w[ks].reshape(kg, -1), cols, out=y[:, ks])  # [N, Kg, OH*OW]
    y = y.reshape(n, k, oh, ow)
    if b is not None:
        y += b[None, :, None, None]
    return y


def _full_pads(kh, kw, pads, dilations):
    """Pads of the forward convolution that computes a stride-1 convolution's input gradient
    ("full" correlation with the flipped filter), or None where a pad exceeds the window."""
    dh, dw = dilations
    full = (dh * (kh - 1) - pads[0], dw * (kw - 1) - pads[1], dh * (kh - 1) - pads[2],
            dw * (kw - 1) - pads[3])
    return full if min(full) >= 0 else None


def conv2d_backward(x, w, dy, pads=(0, 0, 0, 0), strides=(1, 1), dilations=(1, 1), group=1,
                    cols=None, need_dx=True):
    """(dx, dw, db) of conv2d for the output gradient dy: dw = dy^T @ im2col(x); dx of a
    stride-1 convolution as the forward convolution of dy with the flipped, transposed filter
    (im2col + BLAS again), else by adding dy @ w back into the window positions (col2im, one
    vectorised add per tap). ``cols``: the forward's im2col matrices (``conv2d(keep=...)``),
    reused; ``need_dx`` False: dx is None (a graph input)."""
    oh, ow = dy.shape[2:]
    xp = _padded(x, pads)
    dw = np.empty_like(w)
    k, _, kh, kw = w.shape
    n, c = x.shape[:2]
    kg, cg = k // group, c // group
    sh, sw = strides
    full = _full_pads(kh, kw, pads, dilations) if tuple(strides) == (1, 1) else None
    for g in range(group):
        ks, cs = slice(g * kg, (g + 1) * kg), slice(g * cg, (g + 1) * cg)
        dyr = dy[:, ks].reshape(n, kg, -1)  # [N, Kg, OH*OW]
        gcols = cols[g] if cols else _cols(xp, cs, kh, kw, strides, dilations, oh, ow)
        # sum over images of (cols_n dy_n^T)^T, not dy_n cols_n^T: OpenBLAS's product with a
        # transposed right operand and a long inner dimension ran 50x slower (540 ms against
        # 9 ms for SeedNet's conv3 at batch 64, as one product over N*OH*OW)
        dw[ks] = np.matmul(gcols, dyr.transpose(0, 2, 1)).sum(axis=0).T.reshape(
            kg, cg, kh, kw)
    if not need_dx:
        return None, dw, dy.sum(axis=(0, 2, 3))
    if full is not None:
        # w_t [C, Kg, KH, KW]: group g's rows are w[group g]^T, flipped in both window axes
        wt = np.concatenate([w[g * kg:(g + 1) * kg].transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]
                             for g in range(group)])
        dx = conv2d(dy, wt, None, full, (1, 1), dilations, group)
        return dx, dw, dy.sum(axis=(0, 2, 3))
    dxp = np.zeros_like(xp)
    for g in range(group):
        ks, cs = slice(g * kg, (g + 1) * kg), slice(g * cg, (g + 1) * cg)
        dym = dy[:, ks].transpose(0, 2, 3, 1).reshape(-1, kg)  # [N*OH*OW, Kg]
        dcols = (dym @ w[ks].reshape(kg, -1)).reshape(n, oh, ow, cg, kh, kw)
        for i in range(kh):
            for j in range(kw):
                r0, c0 = i * dilations[0], j * dilations[1]
                dxp[:, cs, r0:r0 + sh * (oh - 1) + 1:sh, c0:c0 + sw * (ow - 1) + 1:sw] += \
                    dcols[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    pt, pl = pads[0], pads[1]
    dx = dxp[:, :, pt:pt + x.shape[2], pl:pl + x.shape[3]]
    return dx, dw, dy.sum(axis=(0, 2, 3))


def attrs(node) -> dict:
    """conv2d's keyword arguments of a node (a 1-D node's window with a leading H of 1)."""
    a = lift_1d(node).get("attrs", {})
    return dict(pads=a.get("pads", [0, 0, 0, 0]), strides=a.get("strides", [1, 1]),
                dilations=a.get("dilations", [1, 1]), group=a.get("group", 1))


def forward(node, ins, ctx):
    """Training mode keeps the im2col matrices for the weight gradient."""
    if node["op_type"] == "ConvTranspose":
        b = ins[2] if len(ins) > 2 else None
        return [conv_transpose2d(ins[0], ins[1], b, **t_attrs(node))], None
    b = ins[2] if len(ins) > 2 else None
    keep = [] if ctx.train else None
    if ins[0].ndim == 3:
        y = conv2d(ins[0][:, :, None], ins[1][:, :, None], b, **attrs(node), keep=keep)
        return [y[:, :, 0]], keep
    return [conv2d(ins[0], ins[1], b, **attrs(node), keep=keep)], keep


def backward(node, ins, outs, cache, douts, ctx):
    if node["op_type"] == "ConvTranspose":
        dx, dw, db = conv_transpose2d_backward(ins[0], ins[1], douts[0], **t_attrs(node))
        return [dx, dw] + ([db] if len(ins) > 2 else [])
    need_dx = not ctx.input or node["inputs"][0] != ctx.input
    x, w, dy = ins[0], ins[1], douts[0]
    one_d = x.ndim == 3
    if one_d:
        x, w, dy = x[:, :, None], w[:, :, None], dy[:, :, None]
    dx, dw, db = conv2d_backward(x, w, dy, **attrs(node), cols=cache, need_dx=need_dx)
    if one_d:
        dx, dw = (None if dx is None else dx[:, :, 0]), dw[:, :, 0]
    return [dx, dw] + ([db] if len(ins) > 2 else [])


def t_attrs(node) -> dict:
    """ConvTranspose's attributes (output_shape / auto_pad resolved into pads by the card)."""
    a = node.get("attrs", {})
    return dict(**attrs(node), output_padding=a.get("output_padding", [0, 0]))


def _t_frame(x, w, pads, strides, dilations, output_padding):
    """Output size (OH, OW) and the uncropped frame's size (FH, FW) that holds every tap's
    contribution and the output window [pt:pt+OH, pl:pl+OW]."""
    kh, kw = w.shape[2:]
    out, frame = [], []
    for i, k in enumerate((kh, kw)):
        full = strides[i] * (x.shape[2 + i] - 1) + dilations[i] * (k - 1) + 1
        o = full + output_padding[i] - pads[i] - pads[i + 2]
        out.append(o)
        frame.append(max(full, pads[i] + o))
    return out, frame


def conv_transpose2d(x, w, b=None, pads=(0, 0, 0, 0), strides=(1, 1), dilations=(1, 1),
                     group=1, output_padding=(0, 0)):
    """y [N, Co, OH, OW] of x [N, Ci, H, W] and w [Ci, Co/group, KH, KW] (+ b [Co]) by the
    ONNX ConvTranspose definition: every input pixel (a, b) adds x * w[:, :, i, j] at frame
    position (a*sh + i*dh, b*sw + j*dw); the frame is then cropped by the pads."""
    (oh, ow), (fh, fw) = _t_frame(x, w, pads, strides, dilations, output_padding)
    n, ci, h, wd = x.shape
    cig, cog = ci // group, w.shape[1]
    y = np.zeros((n, cog * group, fh, fw), x.dtype)
    sh, sw = strides
    for g in range(group):
        cs, os_ = slice(g * cig, (g + 1) * cig), slice(g * cog, (g + 1) * cog)
        for i in range(w.shape[2]):
            for j in range(w.shape[3]):
                r, c = i * dilations[0], j * dilations[1]
                y[:, os_, r:r + sh * (h - 1) + 1:sh, c:c + sw * (wd - 1) + 1:sw] += \
                    np.einsum("nchw,co->nohw", x[:, cs], w[cs, :, i, j])
    y = y[:, :, pads[0]:pads[0] + oh, pads[1]:pads[1] + ow]
    return y + b[None, :, None, None] if b is not None else np.ascontiguousarray(y)


def conv_transpose2d_backward(x, w, dy, pads=(0, 0, 0, 0), strides=(1, 1), dilations=(1, 1),
                              group=1, output_padding=(0, 0)):
    """(dx, dw, db) of conv_transpose2d: dy placed back into the frame, then per tap
    dx += dy_frame[taps] . w[:, :, i, j] and dw[:, :, i, j] = x . dy_frame[taps]."""
    (oh, ow), (fh, fw) = _t_frame(x, w, pads, strides, dilations, output_padding)
    n, ci, h, wd = x.shape
    cig, cog = ci // group, w.shape[1]
    frame = np.zeros((n, dy.shape[1], fh, fw), dy.dtype)
    frame[:, :, pads[0]:pads[0] + oh, pads[1]:pads[1] + ow] = dy
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    sh, sw = strides
    for g in range(group):
        cs, os_ = slice(g * cig, (g + 1) * cig), slice(g * cog, (g + 1) * cog)
        for i in range(w.shape[2]):
            for j in range(w.shape[3]):
                r, c = i * dilations[0], j * dilations[1]
                d = frame[:, os_, r:r + sh * (h - 1) + 1:sh, c:c + sw * (wd - 1) + 1:sw]
                dx[:, cs] += np.einsum("nohw,co->nchw", d, w[cs, :, i, j])
                dw[cs, :, i, j] = np.einsum("nohw,nchw->co", d, x[:, cs])
    return dx, dw, dy.sum(axis=(0, 2, 3))

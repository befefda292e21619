"""Conv 2-D (NCHW; ONNX pads [top, left, bottom, right], strides, dilations, group); 1-D
([N, C, L]) as 2-D over [N, C, 1, L] (numpy views); ConvTranspose 2-D (written directly as its
scatter, one tap at a time, not through conv2d)."""

import numpy as np

from ..engine.ops.card import lift_1d

TYPES = ("Conv", "ConvTranspose")
DCOLS_BYTES = 1 << 20  # the input gradient's w^T dy, images at a time (_backward_wide)


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


def _wide_input(x, pads, ext):
    """The zero-padded input as flat rows [N, C, HP*WP + ext] (``ext`` zeros after the last row:
    the last output row's wrapped columns read up to (KW-1)*DW past it) and WP."""
    pt, pl, pb, pr = pads
    n, c, h, wd = x.shape
    hp, wp = h + pt + pb, wd + pl + pr
    xf = np.zeros((n, c, hp * wp + ext), x.dtype)
    xf[:, :, :hp * wp].reshape(n, c, hp, wp)[:, :, pt:pt + h, pl:pl + wd] = x
    return xf, wp


def _wide_windows(xf, kh, kw, dilations, oh, wp):
    """View [N, C, KH, KW, OH*WP] of the flat padded input (``_wide_input``) for a stride-1
    convolution over WIDE output rows: element (n, c, i, j, p) is xf[n, c, i*dh*WP + j*dw + p]
    (each (c, i, j) one contiguous run: im2col copies long runs, against runs of OW values of
    the window view). Output (y, x) is wide column y*WP + x; the columns x >= OW wrap into the
    next row and are dropped (or multiply zeros)."""
    s0, s1, s2 = xf.strides
    return np.lib.stride_tricks.as_strided(
        xf, xf.shape[:2] + (kh, kw, oh * wp),
        (s0, s1, dilations[0] * wp * s2, dilations[1] * s2, s2), writeable=False)


def _wide_dy(dy, wp):
    """dy [N, K, OH, OW] as wide rows [N, K, OH*WP] (zeros in the columns >= OW)."""
    n, k, oh, ow = dy.shape
    d = np.empty((n, k, oh, wp), dy.dtype)
    d[..., ow:] = 0
    d[..., :ow] = dy
    return d.reshape(n, k, oh * wp)


def conv2d(x, w, b=None, pads=(0, 0, 0, 0), strides=(1, 1), dilations=(1, 1), group=1,
           keep=None):
    """y [N, K, OH, OW] of x [N, C, H, W] and w [K, C/group, KH, KW] (+ b [K]): im2col, then
    batched matrix products (BLAS). Stride 1: the im2col of every group at once over wide rows
    [N, G, Cg*KH*KW, OH*WP] (``_wide_windows``), one product for all images and groups, y a
    view of the wide rows; other strides: one im2col and product per group. ``keep``: a list
    that receives the im2col matrices (``conv2d_backward``'s ``cols``)."""
    oh, ow = _geometry(x, w, pads, strides, dilations)
    n, c = x.shape[:2]
    k, _, kh, kw = w.shape
    kg, cg = k // group, c // group
    if tuple(strides) == (1, 1):
        xf, wp = _wide_input(x, pads, (kw - 1) * dilations[1])
        cols = _wide_windows(xf, kh, kw, dilations, oh, wp).reshape(
            n, group, cg * kh * kw, oh * wp)
        if keep is not None:
            keep.append(cols)
        y = np.empty((n, k, oh * wp), x.dtype)
        np.matmul(w.reshape(group, kg, -1), cols, out=y.reshape(n, group, kg, oh * wp))
        if b is not None:
            y += b[None, :, None]
        return y.reshape(n, k, oh, wp)[..., :ow]
    xp = _padded(x, pads)
    y = np.empty((n, k, oh * ow), x.dtype)
    for g in range(group):
        ks, cs = slice(g * kg, (g + 1) * kg), slice(g * cg, (g + 1) * cg)
        cols = _cols(xp, cs, kh, kw, strides, dilations, oh, ow)
        if keep is not None:
            keep.append(cols)
        np.matmul(w[ks].reshape(kg, -1), cols, out=y[:, ks])  # [N, Kg, OH*OW]
    if b is not None:
        y += b[None, :, None]
    return y.reshape(n, k, oh, ow)


def conv2d_backward(x, w, dy, pads=(0, 0, 0, 0), strides=(1, 1), dilations=(1, 1), group=1,
                    cols=None, need_dx=True):
    """(dx, dw, db) of conv2d for the output gradient dy: dw = dy^T @ im2col(x); dx = w^T @ dy
    (BLAS) added back into the window positions (col2im): for stride 1 over wide rows
    (``_backward_wide``), else one strided add per tap. ``cols``: the forward's im2col
    matrices (``conv2d(keep=...)``), reused; ``need_dx`` False: dx is None (a graph input)."""
    if tuple(strides) == (1, 1):
        return _backward_wide(x, w, dy, pads, dilations, group, cols, need_dx)
    oh, ow = dy.shape[2:]
    k, _, kh, kw = w.shape
    n, c, h, wd = x.shape
    kg, cg = k // group, c // group
    xp = _padded(x, pads)
    dw = np.empty_like(w)
    sh, sw = strides
    for g in range(group):
        ks, cs = slice(g * kg, (g + 1) * kg), slice(g * cg, (g + 1) * cg)
        dyr = dy[:, ks].reshape(n, kg, -1)  # [N, Kg, OH*OW]
        gcols = cols[g] if cols else _cols(xp, cs, kh, kw, strides, dilations, oh, ow)
        dw[ks] = _dw(gcols, dyr, w.shape)
    if not need_dx:
        return None, dw, dy.sum(axis=(0, 2, 3))
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
    return dxp[:, :, pt:pt + h, pl:pl + wd], dw, dy.sum(axis=(0, 2, 3))


def _dw(gcols, dyr, wshape):
    """One group's weight gradient [Kg, Cg, KH, KW] of its im2col [N, Cg*KH*KW, P] and dy rows
    [N, Kg, P]: the sum over images of (cols_n dy_n^T)^T, not dy_n cols_n^T: OpenBLAS's product
    with a transposed right operand and a long inner dimension ran 50x slower (540 ms against
    9 ms for SeedNet's conv3 at batch 64, as one product over N*OH*OW)."""
    return np.matmul(gcols, dyr.transpose(0, 2, 1)).sum(axis=0).T.reshape(
        (dyr.shape[1],) + tuple(wshape[1:]))


def _backward_wide(x, w, dy, pads, dilations, group, cols, need_dx):
    """conv2d_backward of a stride-1 convolution over wide rows (``_wide_windows``), every group
    in one product: dy gets zero columns up to WP, so the wrapped columns of the im2col add
    nothing to dw, and dcols = w^T dy [N, G, KH*KW, Cg, OH*WP] goes back into the flat padded
    input as one contiguous add per tap (offset i*dh*WP + j*dw; the wrapped columns add
    zeros)."""
    n, c, h, wd = x.shape
    k, _, kh, kw = w.shape
    kg, cg = k // group, c // group
    oh = dy.shape[2]
    ext = (kw - 1) * dilations[1]
    pt, pl, pb, pr = pads
    hp, wp = h + pt + pb, wd + pl + pr
    span = oh * wp
    dyw = _wide_dy(dy, wp).reshape(n, group, kg, span)
    cols = cols[0] if cols else _wide_windows(_wide_input(x, pads, ext)[0], kh, kw, dilations,
                                               oh, wp).reshape(n, group, cg * kh * kw, span)
    # the sum over images of cols_n dy_n^T (see _dw), [G, Cg*KH*KW, Kg]
    dw = np.matmul(cols, dyw.transpose(0, 1, 3, 2)).sum(axis=0)
    dw = np.ascontiguousarray(dw.transpose(0, 2, 1)).reshape(w.shape)
    db = dy.sum(axis=(0, 2, 3))
    if not need_dx:
        return None, dw, db
    dxf = np.zeros((n, c, hp * wp + ext), dy.dtype)
    dxg = dxf.reshape(n, group, cg, -1)
    if kg == 1:  # one output channel a group (depthwise): each tap's product is one term, no
        # BLAS (calls of inner size 1 per image and group ran 5x slower) and no dcols
        wt = w.reshape(group, cg, kh * kw)[..., None]  # [G, Cg, KH*KW, 1]
        for i in range(kh):
            for j in range(kw):
                o = i * dilations[0] * wp + j * dilations[1]
                dxg[..., o:o + span] += wt[:, :, i * kw + j] * dyw
        return dxf[:, :, :hp * wp].reshape(n, c, hp, wp)[:, :, pt:pt + h, pl:pl + wd], dw, db
    wt = w.reshape(group, kg, cg, kh * kw).transpose(0, 3, 2, 1).reshape(group, -1, kg)
    # dcols of a few images at a time (about DCOLS_BYTES: added back while in cache, and no
    # [N, KH*KW*C, OH*WP] array: SeedNet's conv3 input gradient 4.0 -> 3.5 ms at batch 64)
    step = max(1, DCOLS_BYTES // (kh * kw * c * span * dy.itemsize))
    buf = np.empty((min(step, n), group, kh * kw * cg, span), dy.dtype)
    for a in range(0, n, step):
        b = min(a + step, n)
        dcols = np.matmul(wt, dyw[a:b], out=buf[:b - a]).reshape(
            b - a, group, kh * kw, cg, span)  # rows (i, j, c)
        for i in range(kh):
            for j in range(kw):
                o = i * dilations[0] * wp + j * dilations[1]
                dxg[a:b, ..., o:o + span] += dcols[:, :, i * kw + j]
    return dxf[:, :, :hp * wp].reshape(n, c, hp, wp)[:, :, pt:pt + h, pl:pl + wd], dw, db


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

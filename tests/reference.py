"""Independent float64 numpy references (forward and hand-written backward) for the engine's ops.

The oracle of tests/test_ops.py: written from the ONNX / PyTorch definitions, sharing no code
with the engine. ``chain_step`` runs a chain of bundle nodes (each consuming the previous node's
output) forward, through NLLLoss(mean), and backward.
"""

import numpy as np


def _f64(a):
    return np.asarray(a, dtype=np.float64)


# ---- Conv (NCHW, ONNX pads [top, left, bottom, right], strides, dilations, group) -------------

def _conv_geometry(x, w, pads, strides, dilations):
    n, c, h, wd = x.shape
    k, cg, kh, kw = w.shape
    pt, pl, pb, pr = pads
    sh, sw = strides
    dh, dw = dilations
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    return oh, ow


def _padded(x, pads):
    pt, pl, pb, pr = pads
    return np.pad(_f64(x), ((0, 0), (0, 0), (pt, pb), (pl, pr)))


def _taps(w, strides, dilations, oh, ow):
    """(i, j, row slice, col slice) of the padded input seen by tap (i, j) of every output."""
    sh, sw = strides
    dh, dw = dilations
    for i in range(w.shape[2]):
        for j in range(w.shape[3]):
            yield i, j, slice(i * dh, i * dh + sh * (oh - 1) + 1, sh), \
                slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)


def conv2d(x, w, b=None, pads=(0, 0, 0, 0), strides=(1, 1), dilations=(1, 1), group=1):
    x, w = _f64(x), _f64(w)
    oh, ow = _conv_geometry(x, w, pads, strides, dilations)
    xp = _padded(x, pads)
    n, c = x.shape[:2]
    k = w.shape[0]
    kg, cg = k // group, c // group
    y = np.zeros((n, k, oh, ow))
    for g in range(group):
        ks, cs = slice(g * kg, (g + 1) * kg), slice(g * cg, (g + 1) * cg)
        for i, j, rs, cl in _taps(w, strides, dilations, oh, ow):
            y[:, ks] += np.einsum("nchw,kc->nkhw", xp[:, cs, rs, cl], w[ks, :, i, j])
    if b is not None:
        y += _f64(b)[None, :, None, None]
    return y


def conv2d_backward(x, w, dy, pads=(0, 0, 0, 0), strides=(1, 1), dilations=(1, 1), group=1):
    """(dx, dw, db) of conv2d for the output gradient dy."""
    x, w, dy = _f64(x), _f64(w), _f64(dy)
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


# ---- Gemm: Y = alpha * op(A) @ op(B) + beta * C -------------------------------------------

def gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=0, trans_b=0):
    a, b = _f64(a), _f64(b)
    oa = a.T if trans_a else a
    ob = b.T if trans_b else b
    y = alpha * (oa @ ob)
    if c is not None:
        y = y + beta * _f64(c)
    return y


def gemm_backward(a, b, dy, c=None, alpha=1.0, beta=1.0, trans_a=0, trans_b=0):
    """(dA, dB, dC); dC is reduced over the broadcast dimensions of C."""
    a, b, dy = _f64(a), _f64(b), _f64(dy)
    oa = a.T if trans_a else a
    ob = b.T if trans_b else b
    d_oa = alpha * dy @ ob.T
    d_ob = alpha * oa.T @ dy
    da = d_oa.T if trans_a else d_oa
    db = d_ob.T if trans_b else d_ob
    dc = None
    if c is not None:  # sum beta * dy over the dimensions C is broadcast along
        c = _f64(c)
        dc = beta * dy
        while dc.ndim > c.ndim:
            dc = dc.sum(axis=0)
        for ax, size in enumerate(c.shape):
            if size == 1 and dc.shape[ax] != 1:
                dc = dc.sum(axis=ax, keepdims=True)
        dc = dc.reshape(c.shape)
    return da, db, dc


# ---- BatchNormalization over NC(...) --------------------------------------------------------

def _bn_view(x):
    """Axes reduced per channel and the broadcast shape of a per-channel vector."""
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    return axes, shape


def batchnorm_train(x, gamma, beta, running_mean, running_var, eps=1e-5, momentum=0.9):
    """Training mode: (y, new_running_mean, new_running_var, cache). ONNX momentum m:
    running = running * m + batch * (1 - m), with the unbiased batch variance."""
    x = _f64(x)
    axes, shape = _bn_view(x)
    m = x.size // x.shape[1]
    mean = x.mean(axis=axes)
    var = ((x - mean.reshape(shape)) ** 2).mean(axis=axes)
    invstd = 1.0 / np.sqrt(var + eps)
    xhat = (x - mean.reshape(shape)) * invstd.reshape(shape)
    y = xhat * _f64(gamma).reshape(shape) + _f64(beta).reshape(shape)
    unbiased = var * m / max(m - 1, 1)
    new_mean = _f64(running_mean) * momentum + mean * (1 - momentum)
    new_var = _f64(running_var) * momentum + unbiased * (1 - momentum)
    return y, new_mean, new_var, (xhat, invstd, _f64(gamma))


def batchnorm_backward(dy, cache):
    """(dx, dgamma, dbeta) of training-mode batchnorm."""
    xhat, invstd, gamma = cache
    dy = _f64(dy)
    axes, shape = _bn_view(dy)
    m = dy.size // dy.shape[1]
    dbeta = dy.sum(axis=axes)
    dgamma = (dy * xhat).sum(axis=axes)
    dx = (gamma * invstd).reshape(shape) * (
        dy - dbeta.reshape(shape) / m - xhat * dgamma.reshape(shape) / m)
    return dx, dgamma, dbeta


def batchnorm_eval(x, gamma, beta, running_mean, running_var, eps=1e-5):
    x = _f64(x)
    _, shape = _bn_view(x)
    return ((x - _f64(running_mean).reshape(shape)) / np.sqrt(_f64(running_var).reshape(shape)
                                                             + eps)
            * _f64(gamma).reshape(shape) + _f64(beta).reshape(shape))


# ---- elementwise, dropout, log-softmax, NLL -------------------------------------------------

def relu(x):
    return np.maximum(_f64(x), 0.0)


def relu_backward(x, dy):
    return np.where(_f64(x) > 0, _f64(dy), 0.0)


def dropout(x, keep, ratio):
    """Inverted dropout with a given keep mask (bool array)."""
    scale = 1.0 / (1.0 - ratio) if ratio < 1 else 0.0
    return np.where(keep, _f64(x) * scale, 0.0)


def log_softmax(x, axis=-1):
    x = _f64(x)
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def log_softmax_backward(y, dy, axis=-1):
    y, dy = _f64(y), _f64(dy)
    return dy - np.exp(y) * dy.sum(axis=axis, keepdims=True)


def nll(logp, labels):
    """NLLLoss(reduction="mean") of [B, C] log-probabilities: (loss, dlogp, accuracy)."""
    logp = _f64(logp)
    b = logp.shape[0]
    idx = np.arange(b), np.asarray(labels, np.int64)
    loss = -logp[idx].mean()
    d = np.zeros_like(logp)
    d[idx] = -1.0 / b
    acc = float((logp.argmax(axis=1) == idx[1]).mean())
    return float(loss), d, acc


# ---- a chain of bundle nodes ----------------------------------------------------------------

def chain_step(nodes, params, x, labels, train=True, keep=None):
    """Forward + NLL + backward of ``nodes`` applied one after another to ``x``.

    ``params``: {name: array} for every weight input; ``keep``: {node name: (bool keep mask,
    ratio)} for Dropout in training (others are the identity). Returns a dict: ``acts`` {output name: forward value}, ``dacts``
    {output name: gradient}, ``grads`` {param name: gradient}, ``buffers`` {running stat name:
    value after the step}, ``loss``, ``acc``. With ``train=False`` (eval): forward and loss only.
    """
    acts, caches = {}, []
    buffers = {}
    h = _f64(x)
    for node in nodes:
        op, a, ins = node["op_type"], node.get("attrs", {}), node["inputs"]
        inp = h
        if op == "Conv":
            b = params[ins[2]] if len(ins) > 2 and ins[2] else None
            geo = dict(pads=a.get("pads", [0, 0, 0, 0]), strides=a.get("strides", [1, 1]),
                       dilations=a.get("dilations", [1, 1]), group=a.get("group", 1))
            h = conv2d(inp, params[ins[1]], b, **geo)
            caches.append((node, inp, geo))
        elif op == "Gemm":
            c = params[ins[2]] if len(ins) > 2 and ins[2] else None
            geo = dict(alpha=a.get("alpha", 1.0), beta=a.get("beta", 1.0),
                       trans_a=a.get("transA", 0), trans_b=a.get("transB", 0))
            if ins[0] in params:  # A is a parameter, B the activation
                h = gemm(params[ins[0]], inp, c, **geo)
            else:
                h = gemm(inp, params[ins[1]], c, **geo)
            caches.append((node, inp, geo))
        elif op == "BatchNormalization":
            g, bt, rm, rv = (params[n] for n in ins[1:5])
            eps, mom = a.get("epsilon", 1e-5), a.get("momentum", 0.9)
            if train:
                h, nm, nv, cache = batchnorm_train(inp, g, bt, rm, rv, eps, mom)
                buffers[ins[3]], buffers[ins[4]] = nm, nv
            else:
                h, cache = batchnorm_eval(inp, g, bt, rm, rv, eps), None
            caches.append((node, inp, cache))
        elif op == "Relu":
            h = relu(inp)
            caches.append((node, inp, None))
        elif op == "Dropout":
            if train and keep is not None and node["name"] in keep:
                mask, ratio = keep[node["name"]]
                h = dropout(inp, mask, ratio)
                caches.append((node, inp, (mask, ratio)))
            else:
                h = inp.copy()
                caches.append((node, inp, None))
        elif op in ("Flatten", "Identity"):
            h = inp.reshape(inp.shape[0], -1) if op == "Flatten" else inp.copy()
            caches.append((node, inp, None))
        elif op == "LogSoftmax":
            h = log_softmax(inp, a.get("axis", -1))
            caches.append((node, inp, h))
        else:
            raise NotImplementedError(op)
        acts[node["outputs"][0]] = h
    loss, d, acc = nll(h, labels)
    dacts, grads = {}, {}
    for node, inp, cache in (reversed(caches) if train else ()):
        op, ins = node["op_type"], node["inputs"]
        dacts[node["outputs"][0]] = d
        if op == "Conv":
            dx, dw, db = conv2d_backward(inp, params[ins[1]], d, **cache)
            grads[ins[1]] = dw
            if len(ins) > 2 and ins[2]:
                grads[ins[2]] = db
            d = dx
        elif op == "Gemm":
            c = params[ins[2]] if len(ins) > 2 and ins[2] else None
            if ins[0] in params:
                da, db, dc = gemm_backward(params[ins[0]], inp, d, c, **cache)
                grads[ins[0]], d = da, db
            else:
                da, db, dc = gemm_backward(inp, params[ins[1]], d, c, **cache)
                grads[ins[1]], d = db, da
            if c is not None:
                grads[ins[2]] = dc
        elif op == "BatchNormalization":
            dx, dg, dbt = batchnorm_backward(d, cache)
            grads[ins[1]], grads[ins[2]] = dg, dbt
            d = dx
        elif op == "Relu":
            d = relu_backward(inp, d)
        elif op == "Dropout":
            if cache is not None:
                d = dropout(d, *cache)
        elif op in ("Flatten", "Identity"):
            d = d.reshape(inp.shape)
        elif op == "LogSoftmax":
            d = log_softmax_backward(cache, d, node.get("attrs", {}).get("axis", -1))
    return {"acts": acts, "dacts": dacts, "grads": grads, "buffers": buffers, "loss": loss,
            "acc": acc, "logp": h}

"""BatchNormalization over N C (...): training mode with batch statistics (and the running
statistics update of ONNX / PyTorch: running = running * momentum + batch * (1 - momentum), with
the unbiased batch variance), eval mode with the running statistics."""

import numpy as np

from ..engine.ops.batchnorm import ATTRS
from ..engine.ops.card import read

TYPES = ("BatchNormalization",)


def _view(x):
    """Axes reduced per channel and the broadcast shape of a per-channel vector."""
    return (0,) + tuple(range(2, x.ndim)), (1, x.shape[1]) + (1,) * (x.ndim - 2)


def batchnorm_train(x, gamma, beta, running_mean, running_var, eps=1e-5, momentum=0.9):
    """(y, new_running_mean, new_running_var, cache)."""
    axes, shape = _view(x)
    m = x.size // x.shape[1]
    mean = x.mean(axis=axes)
    xhat = x - mean.reshape(shape)  # centred here, normalised in place below
    var = np.square(xhat).mean(axis=axes)
    invstd = 1.0 / np.sqrt(var + eps)
    xhat *= invstd.reshape(shape)
    y = xhat * gamma.reshape(shape)
    y += beta.reshape(shape)
    unbiased = var * m / max(m - 1, 1)
    new_mean = running_mean * momentum + mean * (1 - momentum)
    new_var = running_var * momentum + unbiased * (1 - momentum)
    return y, new_mean, new_var, (xhat, invstd, gamma)


def batchnorm_backward(dy, cache):
    """(dx, dgamma, dbeta) of training-mode batchnorm."""
    xhat, invstd, gamma = cache
    axes, shape = _view(dy)
    m = dy.size // dy.shape[1]
    dbeta = dy.sum(axis=axes)
    dgamma = (dy * xhat).sum(axis=axes)
    dx = xhat * (dgamma / -m).reshape(shape)
    dx += dy
    dx -= (dbeta / m).reshape(shape)
    dx *= (gamma * invstd).reshape(shape)
    return dx, dgamma, dbeta


def batchnorm_eval(x, gamma, beta, running_mean, running_var, eps=1e-5):
    _, shape = _view(x)
    return ((x - running_mean.reshape(shape)) / np.sqrt(running_var.reshape(shape) + eps)
            * gamma.reshape(shape) + beta.reshape(shape))


def forward(node, ins, ctx):
    a = read(node, ATTRS)
    eps, mom = a["epsilon"], a["momentum"]
    x, g, b, rm, rv = ins[:5]
    if ctx.train:
        y, nm, nv, cache = batchnorm_train(x, g, b, rm, rv, eps, mom)
        ctx.updates[node["inputs"][3]], ctx.updates[node["inputs"][4]] = nm, nv
        return [y, nm, nv], cache
    y = batchnorm_eval(x, g, b, rm, rv, eps)
    return [y, rm, rv], None


def backward(node, ins, outs, cache, douts, ctx):
    dx, dg, db = batchnorm_backward(douts[0], cache)
    return [dx, dg, db, None, None]

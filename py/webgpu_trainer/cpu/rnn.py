"""LSTM and GRU (ONNX, layout 0, default activations, GRU ``linear_before_reset`` 1) forward
and backpropagation through time in numpy, written from the ONNX operator definitions (gates
i, o, f, c and z, r, h) with the whole batch per time step. What the engine refuses is refused
here too (engine/ops/rnn.py ``dims``)."""

import numpy as np

from ..engine.ops.card import read
from ..engine.ops.rnn import ATTRS, dims

TYPES = ("LSTM", "GRU")
GRAD_EVERY_OUTPUT = True  # Y_h / Y_c alone may carry the gradient (engine.py)


def _sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def _opt(ins, k):
    return ins[k] if len(ins) > k and ins[k] is not None else None


def _steps(node, t, d):
    """The time indices of direction ``d`` in the order it runs them."""
    rev = d == 1 or read(node, ATTRS)["direction"] == "reverse"
    return list(reversed(range(t))) if rev else list(range(t))


def _cell(op, x, h, c, w, r, wb, rb):
    """One step: (h, c, saved gates) from x [N, I] and the previous state."""
    hh = h.shape[1]
    if op == "LSTM":
        a = x @ w.T + h @ r.T + wb + rb
        i, o, f = _sig(a[:, :hh]), _sig(a[:, hh:2 * hh]), _sig(a[:, 2 * hh:3 * hh])
        g = np.tanh(a[:, 3 * hh:])
        c = f * c + i * g
        return o * np.tanh(c), c, (i, o, f, g)
    ax = x @ w.T + wb
    ah = h @ r.T + rb
    z = _sig(ax[:, :hh] + ah[:, :hh])
    rg = _sig(ax[:, hh:2 * hh] + ah[:, hh:2 * hh])
    hn = ah[:, 2 * hh:]
    nn = np.tanh(ax[:, 2 * hh:] + rg * hn)
    return (1 - z) * nn + z * h, None, (z, rg, nn, hn)


def forward(node, ins, ctx):
    """(outs [Y, Y_h, Y_c][:outputs], cache: per direction the states and gates of each step)."""
    op = node["op_type"]
    x, w, r = ins[0], ins[1], ins[2]
    t, n, _, h, d, g = dims(node, [a.shape if a is not None else None for a in ins])
    b = _opt(ins, 3)
    b = np.zeros((d, 2 * g * h), x.dtype) if b is None else b
    h0, c0 = _opt(ins, 5), _opt(ins, 6) if op == "LSTM" else None
    y = np.zeros((t, d, n, h), x.dtype)
    yh, yc, cache = np.zeros((d, n, h), x.dtype), np.zeros((d, n, h), x.dtype), []
    for k in range(d):
        hs = [np.zeros((n, h), x.dtype) if h0 is None else h0[k]]
        cs = [np.zeros((n, h), x.dtype) if c0 is None else c0[k]]
        gates = []
        for tt in _steps(node, t, k):
            hn, cn, gs = _cell(op, x[tt], hs[-1], cs[-1], w[k], r[k], b[k, :g * h],
                               b[k, g * h:])
            hs.append(hn)
            cs.append(cn)
            gates.append(gs)
            y[tt, k] = hn
        yh[k], yc[k] = hs[-1], (cs[-1] if op == "LSTM" else 0)
        cache.append((hs, cs, gates))
    return [y, yh, yc][:len(node["outputs"])], cache


def backward(node, ins, outs, cache, douts, ctx):
    """[dX, dW, dR, dB, None, d initial_h, d initial_c (LSTM)][:inputs]."""
    op = node["op_type"]
    x, w, r = ins[0], ins[1], ins[2]
    t, n, _, h, d, g = dims(node, [a.shape if a is not None else None for a in ins])
    dy, dyh, dyc = (douts[k] if len(douts) > k else None for k in range(3))
    dx, dw, dr = np.zeros_like(x), np.zeros_like(w), np.zeros_like(r)
    db = np.zeros((d, 2 * g * h), x.dtype)
    dh0, dc0 = np.zeros((d, n, h), x.dtype), np.zeros((d, n, h), x.dtype)
    for k in range(d):
        hs, cs, gates = cache[k]
        dh = np.zeros((n, h), x.dtype) if dyh is None else dyh[k].copy()
        dc = np.zeros((n, h), x.dtype) if dyc is None or op != "LSTM" else dyc[k].copy()
        order = _steps(node, t, k)
        for s in reversed(range(t)):
            tt = order[s]
            if dy is not None:
                dh = dh + dy[tt, k]
            if op == "LSTM":
                i, o, f, gg = gates[s]
                tc = np.tanh(cs[s + 1])
                dc = dc + dh * o * (1 - tc ** 2)
                da = np.concatenate([dc * gg * i * (1 - i), dh * tc * o * (1 - o),
                                     dc * cs[s] * f * (1 - f), dc * i * (1 - gg ** 2)], 1)
                dax = dah = da
                dc = dc * f
                direct = 0.0
            else:
                z, rg, nn, hn = gates[s]
                dan = dh * (1 - z) * (1 - nn ** 2)
                daz = dh * (hs[s] - nn) * z * (1 - z)
                dar = dan * hn * rg * (1 - rg)
                dax = np.concatenate([daz, dar, dan], 1)
                dah = np.concatenate([daz, dar, dan * rg], 1)
                direct = dh * z
            dx[tt] += dax @ w[k]
            dw[k] += dax.T @ x[tt]
            dr[k] += dah.T @ hs[s]
            db[k, :g * h] += dax.sum(0)
            db[k, g * h:] += dah.sum(0)
            dh = dah @ r[k] + direct
        dh0[k], dc0[k] = dh, dc
    out = [dx, dw, dr, db, None, dh0, dc0 if op == "LSTM" else None, None]
    return [v if k < 4 or (v is not None and _opt(ins, k) is not None) else None
            for k, v in enumerate(out)][:len(ins)]

"""LSTM and GRU (ops/rnn.py, shaders/rnn.wgsl): input [N, T*F] -> Gemm -> Reshape [N, T, F] ->
Transpose [T, N, F] -> the RNN -> its output(s) laid out per sample -> Flatten -> Gemm ->
LogSoftmax. Variants: forward, reverse and bidirectional; initial states given (computed from
the input, so their gradients are checked) or absent; B absent; Y, Y_h or Y_c alone feeding the
head (the others unused), and all of them concatenated."""

import numpy as np

from cases import case
from conftest import f32, head, node, rng_for

T, F, H, BATCH = 4, 3, 5, 2  # steps, features per step, hidden size, batch


def _const(values):
    return {"dtype": "int64", "shape": [len(values)], "values": list(values)}


def _rnn(op, direction="forward", init=False, bias=True, use=("Y",), selfcheck=False,
         batch=BATCH, hidden=H):
    """One case: ``use`` names the outputs that feed the head (Y, Y_h, Y_c)."""
    rng = rng_for("rnn", op, direction, init, bias, *use, *([batch] if batch != BATCH else []),
                  *([hidden] if hidden != H else []))
    d = 2 if direction == "bidirectional" else 1
    g = 4 if op == "LSTM" else 3
    feats = T * F
    nodes = [node("Gemm", ["input", "pre.w", "pre.b"], ["pre"], transB=1),
             node("Reshape", ["pre", "seq_shape"], ["seq"]),
             node("Transpose", ["seq"], ["x"], perm=[1, 0, 2])]
    tensors = [("pre.w", f32(rng.standard_normal((feats, feats)) / np.sqrt(feats) * 2), "param"),
               ("pre.b", f32(0.3 * rng.standard_normal(feats)), "param")]
    consts = {"seq_shape": _const([-1, T, F]), "state_shape": _const([-1, d, hidden])}
    bound = 1 / np.sqrt(hidden) * 2
    tensors += [("rnn.w", f32(rng.uniform(-bound, bound, (d, g * hidden, F))), "param"),
                ("rnn.r", f32(rng.uniform(-bound, bound, (d, g * hidden, hidden))), "param")]
    if bias:
        tensors.append(("rnn.b", f32(rng.uniform(-bound, bound, (d, 2 * g * hidden))), "param"))
    inputs = ["x", "rnn.w", "rnn.r", "rnn.b" if bias else "", ""]
    states = ("h0", "c0") if op == "LSTM" else ("h0",)
    for st in states if init else ():
        nodes += [node("Gemm", ["input", f"{st}.w", f"{st}.b"], [f"{st}_pre"], transB=1),
                  node("Reshape", [f"{st}_pre", "state_shape"], [f"{st}_nd"]),
                  node("Transpose", [f"{st}_nd"], [st], perm=[1, 0, 2])]
        tensors += [(f"{st}.w", f32(rng.standard_normal((d * hidden, feats)) / np.sqrt(feats)),
                     "param"), (f"{st}.b", f32(0.3 * rng.standard_normal(d * hidden)), "param")]
        inputs.append(st)
    outputs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    attrs = dict(direction=direction, hidden_size=hidden)
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    nodes.append(node(op, inputs, outputs, **attrs))
    flat, size = [], 0
    for name in use:
        src = {"Y": "y", "Y_h": "yh", "Y_c": "yc"}[name]
        perm = [2, 0, 1, 3] if name == "Y" else [1, 0, 2]
        nodes += [node("Transpose", [src], [f"{src}_t"], perm=perm),
                  node("Flatten", [f"{src}_t"], [f"{src}_f"], axis=1)]
        flat.append(f"{src}_f")
        size += (T if name == "Y" else 1) * d * hidden
    if len(flat) > 1:
        nodes.append(node("Concat", flat, ["feat"], axis=1))
    feat = "feat" if len(flat) > 1 else flat[0]
    hn, ht = head(feat, size, 3, rng)
    x = f32(rng.standard_normal((batch, feats)))
    labels = rng.integers(0, 3, batch)
    cid = f"rnn/{op}_{direction}" + ("_init" if init else "") + ("" if bias else "_nobias") + \
        "_" + "+".join(use) + (f"_n{batch}" if batch != BATCH else "") \
        + (f"_h{hidden}" if hidden != H else "")
    acts = ("x",) + tuple({"Y": "y", "Y_h": "yh", "Y_c": "yc"}[u] for u in use)
    return case(cid, nodes + hn, tensors + ht, x, labels, constants=consts, tag=op, acts=acts,
                dacts=("x",) + states[:len(states) if init else 0], selfcheck=selfcheck)


CASES = [_rnn(op, direction) for op in ("LSTM", "GRU")
         for direction in ("forward", "reverse", "bidirectional")] + [
    _rnn("LSTM", "bidirectional", init=True, use=("Y", "Y_h", "Y_c")),
    _rnn("GRU", "bidirectional", init=True, use=("Y", "Y_h")),
    _rnn("LSTM", "forward", init=True, use=("Y_c",)),
    _rnn("LSTM", "reverse", use=("Y_h",)),
    _rnn("GRU", "forward", bias=False, use=("Y_h",)),
    _rnn("GRU", "reverse", init=True, bias=False, use=("Y",)),
    # T * N = 640 pairs: the weight gradients' sums split into parts (split-K, rnn._splits)
    _rnn("LSTM", "bidirectional", use=("Y", "Y_h"), batch=160),
    _rnn("GRU", "reverse", init=True, use=("Y",), batch=160),
    # hidden 70 > 64 threads: a thread of the sequence's workgroup takes two units
    _rnn("LSTM", "bidirectional", init=True, use=("Y", "Y_h", "Y_c"), hidden=70),
    _rnn("GRU", "forward", use=("Y", "Y_h"), hidden=70),
    # hidden 260 > SEQ_H (rnn.wgsl): the sequence kernels read h and dg from storage
    _rnn("LSTM", "bidirectional", init=True, use=("Y_h", "Y_c"), hidden=260),
    _rnn("GRU", "reverse", init=True, use=("Y_h",), hidden=260),
    # hidden 8 and 64 (multiples of 4, at most 64): the GPU path's sequence kernels keep R in
    # registers (rnn._registers)
    _rnn("LSTM", "bidirectional", init=True, use=("Y", "Y_h", "Y_c"), hidden=8),
    _rnn("GRU", "reverse", init=True, use=("Y", "Y_h"), hidden=8),
    _rnn("LSTM", "forward", use=("Y",), hidden=64),
    _rnn("GRU", "bidirectional", use=("Y_h",), hidden=64),
    # 7 samples: with several a workgroup (rnn._rows, rnn.wgsl NB) the last block is partial;
    # hidden 12: 36 GRU gate rows, 7 threads a row of R
    _rnn("LSTM", "bidirectional", init=True, use=("Y", "Y_h", "Y_c"), batch=7, hidden=8),
    _rnn("GRU", "reverse", init=True, use=("Y", "Y_h"), batch=7, hidden=12),
]

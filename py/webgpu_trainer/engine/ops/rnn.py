"""LSTM and GRU (ONNX opsets 7-22 as torch.onnx.export writes them) forward and
backpropagation through time (shaders/rnn.wgsl).

Inputs X [T, N, I] (layout 0), W [D, G*H, I], R [D, G*H, H], optional B [D, 2*G*H], initial_h
(and LSTM's initial_c) [D, N, H] or absent (zeros); D = 2 for ``bidirectional``. Gates in ONNX
order (LSTM i, o, f, c: G = 4; GRU z, r, h: G = 3), default activations (Sigmoid, Tanh, Tanh)
only; GRU with ``linear_before_reset`` 1 (torch's nn.GRU). Outputs Y [T, D, N, H], Y_h (and
LSTM's Y_c) [D, N, H], each optional. Refused (naming the attribute or input): other
activations, ``clip``, ``input_forget``, ``layout`` 1, ``sequence_lens``, LSTM peepholes ``P``,
GRU ``linear_before_reset`` 0.

Dispatches: forward 3 or 4 (initial state, x-projections of every step, the whole sequence,
final state; on GPU adapters R transposed, so neighbouring threads read neighbouring values,
and the x-projections of a one-direction RNN as the tiled GEMM after its bias halves summed;
a bidirectional one transposes W instead),
backward 2 to 6 (the whole sequence in reverse, the initial states' gradients
when wanted, dW, dR, dB, dX), each weight gradient split over its T * N sum (split-K) and its
parts added by one more dispatch when its outputs alone leave the GPU idle. The sequence runs
as one workgroup per (direction, sample) stepping through time (samples are independent; a
step needs only its own sample's previous state), where a dispatch per step cost ~20 us each
on an H200. The hidden states, cell states and activated gates of every step stay in save
buffers for the backward, which writes the gates' gradients over the gates
(``Builder.RNN_DG_IN_PLACE``); a one-direction forward LSTM's x-projections are made in the
gates buffer and each step's gates written over its own (``Builder.RNN_XP_IN_PLACE``).
"""

from ..backends.base import groups_1d
from ..errors import GraphError
from . import gemm
from .gemm import reduce_splits

TYPES = ("LSTM", "GRU")
GRAD_EVERY_OUTPUT = True  # Y_h / Y_c feed models as often as Y (plan.py)

_COMMON = {"direction": "forward", "hidden_size": None, "layout": 0, "clip": None,
           "activations": None, "activation_alpha": None, "activation_beta": None}
ATTRS = {"LSTM": {**_COMMON, "input_forget": 0},
         "GRU": {**_COMMON, "linear_before_reset": 0}}

GATES = {"LSTM": 4, "GRU": 3}
DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


def problems(node) -> list:
    """What the engine cannot run in ``node`` (strings naming the node and the attribute)."""
    op, a, ins = node["op_type"], node.get("attrs") or {}, node["inputs"]
    where, out = f"node {node['name']} ({op})", []
    if a.get("direction", "forward") not in DIRECTIONS:
        out.append(f"{where}: direction {a['direction']!r} is not forward, reverse or "
                   "bidirectional")
    d = DIRECTIONS.get(a.get("direction", "forward"), 1)
    acts = a.get("activations")
    if acts is not None and list(acts) != DEFAULT_ACTIVATIONS[op] * d:
        out.append(f"{where}: activations {list(acts)} are not supported (only the default "
                   f"{DEFAULT_ACTIVATIONS[op] * d})")
    for key in ("activation_alpha", "activation_beta", "clip"):
        if a.get(key) is not None:
            out.append(f"{where}: attribute {key} is not supported")
    if a.get("layout", 0) != 0:
        out.append(f"{where}: layout {a['layout']} is not supported (only 0: [T, N, I])")
    if op == "LSTM" and a.get("input_forget", 0):
        out.append(f"{where}: input_forget {a['input_forget']} is not supported (only 0)")
    if op == "GRU" and a.get("linear_before_reset", 0) != 1:
        out.append(f"{where}: linear_before_reset {a.get('linear_before_reset', 0)} is not "
                   "supported (only 1, torch's nn.GRU)")
    if len(ins) > 4 and ins[4]:
        out.append(f"{where}: input sequence_lens is not supported (every sequence is T long)")
    if op == "LSTM" and len(ins) > 7 and ins[7]:
        out.append(f"{where}: input P (peepholes) is not supported")
    return out


def normalize(node, opset, shapes) -> list:
    """The refusals of :func:`problems` at import time."""
    return problems(node)


def dims(node, ins) -> tuple:
    """(T, N, I, H, D, G) from the input shapes; raises GraphError when they do not fit."""
    bad = problems(node)
    if bad:
        raise GraphError("; ".join(bad))
    op, name = node["op_type"], node["name"]
    x, w, r = ins[0], ins[1], ins[2]
    g = GATES[op]
    d = DIRECTIONS[(node.get("attrs") or {}).get("direction", "forward")]
    if len(x) != 3 or len(w) != 3 or len(r) != 3:
        raise GraphError(f"node {name} ({op}): X {x}, W {w}, R {r} must be 3-D")
    t, n, i = x
    h = (node.get("attrs") or {}).get("hidden_size") or r[2]
    want = {"W": ([d, g * h, i], w), "R": ([d, g * h, h], r)}
    if len(ins) > 3 and ins[3] is not None:
        want["B"] = ([d, 2 * g * h], ins[3])
    for k, what in ((5, "initial_h"), (6, "initial_c")):
        if len(ins) > k and ins[k] is not None:
            want[what] = ([d, n, h], ins[k])
    for what, (shape, got) in want.items():
        if list(got) != shape:
            raise GraphError(f"node {name} ({op}): {what} has shape {list(got)}, expected "
                             f"{shape} (X {list(x)}, hidden_size {h}, {d} direction(s))")
    return t, n, i, h, d, g


def infer(node, ins, consts):
    """[Y [T, D, N, H], Y_h [D, N, H], Y_c [D, N, H]] (as many as the node has outputs)."""
    t, n, _, h, d, _ = dims(node, ins)
    return [[t, d, n, h], [d, n, h], [d, n, h]][:len(node["outputs"])]


def macs(node, shapes) -> int:
    """Multiply-adds of one sample: T * D * G * H * (I + H)."""
    t, _, i = shapes[node["inputs"][0]]
    d, gh, _ = shapes[node["inputs"][1]]
    return t * d * gh * (i + shapes[node["inputs"][2]][2])


def init(node, graph):
    """PyTorch's default init (nn.RNNBase.reset_parameters): W, R and B ~ U(+-1 / sqrt(H))."""
    r = graph.tensors.get(node["inputs"][2])
    if r is None:
        return []
    return [(name, "uniform", r["shape"][2]) for name in node["inputs"][1:4]
            if name in graph.tensors]


def _get(seq, k):
    return seq[k] if len(seq) > k else None


async def _kernel(bld, node, entry, groups, params, constants=None, **slots):
    """One dispatch of shaders/rnn.wgsl ``entry`` (``constants``: its override constants); each
    writable slot left unbound gets a small buffer of its own (WebGPU refuses two writable
    bindings of one placeholder buffer)."""
    for name in ("a", "b", "c", "out"):
        if slots.get(name) is None:
            slots[name] = bld.save(node, 4, "unused_" + name)
    await bld.kernel("rnn", entry, groups, params=params, constants=constants, **slots)


# Loop iterations one thread may run in a dispatch: lavapipe (Mesa's llvmpipe) stops a shader
# thread's loops after 65,535 iterations in all (measured; tests/test_losses_wide.py), silently.
LOOP_BUDGET = 32768
PARTS_FLOATS = 1 << 22  # 16 MiB: the most split-K scratch the GPU rule of _splits asks for


def steps_per_dispatch(h: int, g: int) -> int:
    """Steps of ``forward_seq`` / ``backward_seq`` per dispatch for hidden size ``h`` and ``g``
    gates: a thread runs ceil(h / 64) units a step, each ~(g + 1) * h loop iterations (the
    recurrent dot products, the later step's dh), kept under ``LOOP_BUDGET`` (every step of the
    zoo's LSTM, h 64 and T 28, in one dispatch; an LSTM of h 256: 6 steps a dispatch)."""
    per_step = -(-h // 64) * ((g + 1) * h + 8)
    return max(1, LOOP_BUDGET // per_step)


def _splits(b, count: int, pairs: int) -> int:
    """Parts of a weight gradient's sum over ``pairs`` (T * N) for ``count`` outputs: enough
    threads for the adapter (``b.splits``) and, on GPU adapters, at most ~256 pairs a part
    (an H200 profile, LSTM hidden 64 at batch 1000: 4 parts of 7,000 pairs left ``grad_r``
    the largest kernel of the step) while the parts stay under ``PARTS_FLOATS`` (their scratch
    buffer); never more than ``LOOP_BUDGET`` pairs a part."""
    splits = b.splits(count, pairs, min_per_split=64)
    if b.tiled:
        splits = max(splits, min(256, pairs // 256, PARTS_FLOATS // count))
    return max(splits, -(-pairs // LOOP_BUDGET))


def _setup(b, node, ins):
    op = node["op_type"]
    t, n, i, h, d, g = dims(node, [x.shape if x is not None else None for x in ins])
    rev0 = int((node.get("attrs") or {}).get("direction") == "reverse")
    base = dict(T=t, N=n, I=i, H=h, D=d, G=g, s=0, flags=0, rev0=rev0, steps=0,
                rshift=h if op == "GRU" else 0)
    saves = dict(hs=b.save(node, d * (t + 1) * n * h, "hs"),
                 cs=b.save(node, d * (t + 1) * n * h, "cs") if op == "LSTM" else None,
                 gates=b.save(node, d * t * n * 4 * h, "gates"),
                 carry=b.save(node, d * n * h, "carry"))
    return base, saves


async def forward(b, node, ins, outs, train):
    """Y, Y_h, Y_c: the initial state into the save buffers, the x-projections of all steps,
    then the sequence (``steps_per_dispatch`` steps a dispatch: all of them unless long).
    An output nothing reads (``Builder.unread``: torch's Y_h and Y_c beside a model that
    uses Y) is not written: no ``final_state`` dispatch for it."""
    lstm = node["op_type"] == "LSTM"
    base, sv = _setup(b, node, ins)
    t, n, i, h, d, g = (base[k] for k in ("T", "N", "I", "H", "D", "G"))
    bias, h0, c0 = _get(ins, 3), _get(ins, 5), _get(ins, 6) if lstm else None
    state = groups_1d(d * n * h)
    zero = 0  # no initial state: the first sequence dispatch writes the zeros (flags 256)
    if h0 is None and c0 is None and b.RNN_ZERO_STATE_IN_SEQ:
        zero = 256
    else:
        await _kernel(b, node, "init_state", state,
                       params={**base, "flags": int(h0 is not None) | 2 * int(c0 is not None)},
                       x=h0, dy=c0, a=sv["hs"], b=sv["cs"])
    y, yh, yc = (None if b.unread(_get(node["outputs"], k)) else _get(outs, k)
                 for k in range(3))  # what nothing reads is not written
    flags = int(y is not None) | 2 * int(bias is not None)
    if lstm and d == 1 and not base["rev0"] and b.RNN_XP_IN_PLACE:  # t = s: xp in the gates
        xp, flags = sv["gates"], flags | 64
    else:
        xp = b.scratch(d * t * n * g * h)
    await _xproj(b, node, base, ins[0], ins[1], bias, xp)
    rt, consts = None, _registers(b, h)
    if b.tiled and b.RNN_TRANSPOSED_R and not consts:  # R^T: units read neighbours
        rt = b.scratch(d * g * h * h, "rnn.rt")
        await _kernel(b, node, "transpose_r", groups_1d(d * g * h * h), params=base, r=ins[2],
                       out=rt)
        flags |= 4
    per = steps_per_dispatch(h, g)
    entry, groups = "forward_seq", groups_1d(d * n, 1)
    if _wide(b, h):
        entry, flags = "forward_seq_wide", flags | 16 | 32 * bool(consts)
        consts, groups = _rows(b, consts, d, n, h)
        flags |= 128 * _ahead(b, lstm, consts, h)
    for s0 in range(0, t, per):
        await _kernel(b, node, entry, groups,
                       params={**base, "flags": flags | (zero if s0 == 0 else 0), "s": s0,
                               "steps": per}, constants=consts,
                       x=None if flags & 64 else xp, w=rt, r=ins[2], bias=bias, a=sv["hs"],
                       b=sv["cs"], c=sv["gates"], out=y)
    if yh is not None or yc is not None:
        await _kernel(b, node, "final_state", state,
                       params={**base, "flags": int(yh is not None) | 2 * int(yc is not None)},
                       x=sv["hs"], dy=sv["cs"], a=yh, b=yc)


SEQ_H = 256  # rnn.wgsl: the hidden sizes whose sequence kernels keep rows in workgroup memory


def _wide(b, h: int) -> bool:
    """Whether the sequence runs on the 256-thread ``*_seq_wide`` kernels (GPU adapters,
    ``Builder.RNN_SEQ_WIDE``, H <= SEQ_H): a thread per gate row, so a step's serial chain of
    multiply-adds is H long instead of G * H. The backward's dh then sums its R part per gate
    first (another order of the same sum)."""
    return b.tiled and b.RNN_SEQ_WIDE and h <= SEQ_H


def _registers(b, h: int) -> dict | None:
    """The override constants of the ``*_seq_wide`` kernels keeping each thread's H values of R
    in registers for the whole sequence (rnn.wgsl flags 32: ``RV`` vec4 of them), or None: H a
    multiple of 4 and at most 64, ``Builder.RNN_R_REGISTERS``. The same products summed in the
    same order as from R in storage; no R^T (``transpose_r``) needed."""
    if _wide(b, h) and h % 4 == 0 and h <= 64 and b.RNN_R_REGISTERS:
        return {"RV": h // 4}
    return None


ROW_FLOATS = 1024  # rnn.wgsl: the floats of its workgroup arrays `row` and `rsum`
ROWS_MAX = 4  # samples a *_seq_wide workgroup at most


def _rows(b, consts: dict | None, d: int, n: int, h: int) -> tuple:
    """(constants, groups) of a ``*_seq_wide`` dispatch: with registers (``consts``), NB
    samples a workgroup, the largest power of 2 up to ``ROWS_MAX`` whose rows fit `row`
    (NB * 4H floats) and that leaves at least ``Builder.RNN_ROWS_MIN_GROUPS`` workgroups (an
    H200 holds two of these 256-thread workgroups per SM: the zoo's LSTM at batch 1000 runs
    250 instead of 1,000, all resident at once). Each workgroup's loads of R into registers
    serve NB samples. The same products in the same order as one sample a workgroup, so the
    same bits."""
    nb = 1
    floor = b.RNN_ROWS_MIN_GROUPS
    if consts and floor is not None:
        while (nb < ROWS_MAX and 2 * nb * 4 * h <= ROW_FLOATS
               and d * -(-n // (2 * nb)) >= floor):
            nb *= 2
    if nb == 1:
        return consts, groups_1d(d * n, 1)
    return {**consts, "NB": nb}, groups_1d(d * -(-n // nb), 1)


def _ahead(b, lstm: bool, consts: dict | None, h: int) -> bool:
    """Whether an LSTM's ``*_seq_wide`` kernels load each step's values that do not depend on
    the recurrence (x-projections; saved gates, cells and dY) one step ahead and keep the cell
    or the dc carry in a register (rnn.wgsl flags 128, ``Builder.RNN_AHEAD``): when every
    thread owns at most one unit (NB * H <= 256). The same floats in the same order."""
    nb = (consts or {}).get("NB", 1)
    return lstm and b.RNN_AHEAD and nb * h <= 256


async def _xproj(b, node, base, x, w, bias, xp):
    """xp = X [T*N, I] W[d]^T + Wb[d] (+ Rb[d], except GRU's h gate). One direction on GPU
    adapters (``Builder.RNN_XPROJ_GEMM``): one tiled GEMM, the bias halves summed first by
    ``bias_sum`` (an H200, LSTM hidden 64 at batch 1000: 0.9 ms as ``xproj``; the directions of
    a bidirectional one would need offsets into pooled scratch). Else ``xproj``, on GPU
    adapters reading W^T (``transpose_r``) so neighbouring threads read neighbouring values."""
    t, n, i, h, d, g = (base[k] for k in ("T", "N", "I", "H", "D", "G"))
    gh = g * h
    xflags = int(node["op_type"] == "GRU") | 2 * int(bias is not None)
    if b.tiled and b.RNN_XPROJ_GEMM and d == 1:
        bsum = None
        if bias is not None:
            bsum = b.scratch(gh, "rnn.bsum")
            await _kernel(b, node, "bias_sum", groups_1d(gh), params={**base, "flags": xflags},
                           bias=bias, out=bsum)
        await gemm.matmul(b, x, (i, 1), w, (1, i), xp, t * n, gh, i, bias=bsum, bias_mode=1)
        return
    wt = None
    if b.tiled and b.RNN_TRANSPOSED_R:
        wt = b.scratch(d * gh * i, "rnn.wt")
        await _kernel(b, node, "transpose_r", groups_1d(d * gh * i),
                       params={**base, "flags": 8}, r=w, out=wt)
        xflags |= 4
    await _kernel(b, node, "xproj", groups_1d(d * t * n * gh), params={**base, "flags": xflags},
                   x=x, w=w, r=wt, bias=bias, out=xp)


async def backward(b, node, ins, outs, gins, gouts):
    """Backpropagation through time (the sequence in reverse, chunked as forward), then the
    gradients of the initial states, W, R, B and X (each only when requested)."""
    lstm = node["op_type"] == "LSTM"
    base, sv = _setup(b, node, ins)
    t, n, i, h, d, g = (base[k] for k in ("T", "N", "I", "H", "D", "G"))
    dy, dyh, dyc = _get(gouts, 0), _get(gouts, 1), _get(gouts, 2)
    if dy is None and dyh is None and dyc is None:
        return
    state = groups_1d(d * n * h)
    flags = int(dy is not None) | 2 * int(dyh is not None) | 4 * int(dyc is not None)
    entry, consts = "backward_seq", _registers(b, h)
    groups = groups_1d(d * n, 1)
    if _wide(b, h):
        entry, flags = "backward_seq_wide", flags | 16 | 32 * bool(consts)
        consts, groups = _rows(b, consts, d, n, h)
        flags |= 128 * _ahead(b, lstm, consts, h)
    per = steps_per_dispatch(h, g)
    gates = sv["gates"]
    if b.RNN_DG_IN_PLACE:  # the gates' gradients over the gates (rnn.wgsl flags 64)
        sv["dg"], gates, flags = gates, None, flags | 64
    else:
        sv["dg"] = b.scratch(d * t * n * 4 * h, "rnn.dg")  # the gates' gradients, every step
    for s0 in reversed(range(0, t, per)):
        last = min(s0 + per, t) - 1  # this dispatch runs steps last, last - 1, ..., s0
        p = {**base, "flags": flags, "s": last, "steps": last - s0 + 1}
        if lstm:
            await _kernel(b, node, entry, groups, params=p, constants=consts,
                           x=dyh, r=ins[2], dy=dy, bias=dyc, a=gates, b=sv["cs"],
                           c=sv["dg"], out=sv["carry"])
        else:
            await _kernel(b, node, entry, groups, params=p, constants=consts,
                           x=dyh, r=ins[2], dy=dy, a=gates, b=sv["hs"], c=sv["dg"],
                           out=sv["carry"])
    gh0, gc0 = _get(gins, 5), _get(gins, 6) if lstm else None
    if gh0 is not None or gc0 is not None:
        await _kernel(b, node, "back_init", state,
                       params={**base, "flags": int(gh0 is not None) | 2 * int(gc0 is not None)},
                       r=ins[2], dy=sv["carry"], a=gh0, b=gc0, c=sv["dg"])
    grads = (("grad_w", _get(gins, 1), d * g * h * i, dict(x=ins[0])),
             ("grad_r", _get(gins, 2), d * g * h * h, dict(x=sv["hs"])),
             ("grad_b", _get(gins, 3), d * 2 * g * h, {}),
             ("grad_x", _get(gins, 0), t * n * i, dict(w=ins[1])))
    plain = b.tiled and lstm and d == 1 and not base["rev0"] and b.RNN_GEMM_GRADS
    for entry, out, count, extra in grads:
        if out is None:
            continue
        if plain and entry in ("grad_w", "grad_r"):
            # a forward LSTM's dW = dg^T [4H, T*N] x X [T*N, I] and dR = dg^T x hs[0:T] are
            # plain products: the Gemm's kernels (GPU adapters)
            src, width = (ins[0], i) if entry == "grad_w" else (sv["hs"], h)
            await gemm.matmul(b, sv["dg"], (1, 4 * h), src, (width, 1), out, 4 * h, width,
                              t * n)
            continue
        # the weight gradients sum over T * N pairs: split-K parts when the outputs are few
        splits = 1 if entry == "grad_x" else _splits(b, count, t * n)
        target = b.temp(splits * count) if splits > 1 else out
        gx, gy, _ = groups_1d(count)
        await _kernel(b, node, entry, (gx, gy, splits), params=base, dy=sv["dg"], out=target,
                       **extra)
        if splits > 1:
            await reduce_splits(b, target, out, splits, count)


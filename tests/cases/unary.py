"""Unary elementwise ops (ops/unary.py, shaders/unary.wgsl) and Clip: each op sits in
input -> Gemm (near identity, so the op's input range is the drawn range and the op's input
gradient flows) -> op -> Gemm + LogSoftmax over 2 classes (blocks.head2), labels all 0; sizes 1,
7, 33 and a few thousand elements; the GPU erf elementwise against math.erf (eval cases).
"""

import math

import numpy as np

from cases import case
from cases.blocks import chain, floats, head2
from conftest import _record, f32, node, rng_for

# op id -> (op_type, attrs, input sampler(rng, n))


def _mix(lo, hi, big=0.0):
    """Uniform on [lo, hi], a quarter of the values near 0 (|x| < 1e-2), and when ``big`` some
    of magnitude in [big / 2, big] of both signs."""
    def draw(rng, n):
        x = rng.uniform(lo, hi, n)
        k = rng.random(n)
        x = np.where(k < 0.25, rng.uniform(-1e-2, 1e-2, n), x)
        if big:
            mag = rng.uniform(big / 2, big, n) * rng.choice([-1.0, 1.0], n)
            x = np.where(k > 0.85, mag, x)
        return x
    return draw


def _pos(lo, hi):
    return lambda rng, n: rng.uniform(lo, hi, n)


def _away(lo, hi):
    """|x| in [lo, hi] with a random sign (Reciprocal)."""
    return lambda rng, n: rng.uniform(lo, hi, n) * rng.choice([-1.0, 1.0], n)


OPS = {
    "LeakyRelu": ("LeakyRelu", {}, _mix(-3, 3)),
    "LeakyRelu_a0.2": ("LeakyRelu", {"alpha": 0.2}, _mix(-3, 3)),
    "Sigmoid": ("Sigmoid", {}, _mix(-6, 6, big=30)),
    "Tanh": ("Tanh", {}, _mix(-3, 3, big=30)),
    "Gelu": ("Gelu", {}, _mix(-5, 5, big=12)),
    "Gelu_none": ("Gelu", {"approximate": "none"}, _mix(-4, 4, big=30)),
    "Gelu_tanh": ("Gelu", {"approximate": "tanh"}, _mix(-5, 5, big=30)),
    "Erf": ("Erf", {}, _mix(-3, 3, big=8)),
    "Exp": ("Exp", {}, _mix(-6, 3)),
    "Log": ("Log", {}, _pos(0.3, 5)),
    "Sqrt": ("Sqrt", {}, _pos(0.3, 5)),
    "Neg": ("Neg", {}, _mix(-3, 3)),
    "Abs": ("Abs", {}, _mix(-3, 3)),
    "Reciprocal": ("Reciprocal", {}, _away(0.5, 3)),
    "Softplus": ("Softplus", {}, _mix(-6, 6, big=40)),
    "Softsign": ("Softsign", {}, _mix(-5, 5, big=1e4)),
    "Elu": ("Elu", {}, _mix(-5, 3)),
    "Elu_a0.5": ("Elu", {"alpha": 0.5}, _mix(-5, 3)),
    "Selu": ("Selu", {}, _mix(-5, 3)),
    "Selu_a2_g0.5": ("Selu", {"alpha": 2.0, "gamma": 0.5}, _mix(-5, 3)),
    "Celu": ("Celu", {}, _mix(-5, 3)),
    "Celu_a0.5": ("Celu", {"alpha": 0.5}, _mix(-6, 3)),
    "Mish": ("Mish", {}, _mix(-6, 6, big=30)),
    "HardSigmoid": ("HardSigmoid", {}, _mix(-5, 5)),
    "HardSigmoid_torch": ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5}, _mix(-5, 5)),
    "HardSwish": ("HardSwish", {}, _mix(-5, 5)),
}

SIZES = {1: (1, 1), 7: (1, 7), 33: (3, 11)}



def tag_of(op_type, attrs):
    if op_type == "Gelu":
        return f"Gelu({attrs.get('approximate', 'none')})"
    return op_type


def _c(v):
    return {"dtype": "float32", "shape": [], "values": [v]}


def op_case(id, op_nodes, sampler, batch, features, constants=None, extra=(), tag=None,
            acts=("h", "u"), dacts=("h", "u"), positive=False, key=None, **opts):
    """input -> Gemm(pre, ~identity) -> ``op_nodes`` (reading "h", ending in "u") -> head2;
    the input drawn by ``sampler``, labels all 0 (the head's bias gradient, a sum over the
    batch, cannot cancel). ``key``: the generator's key (default ``id``)."""
    rng = rng_for("unary", id if key is None else key, batch, features)
    pre_w = f32(np.eye(features) + 1e-3 * rng.standard_normal((features, features)))
    pre_b = f32(1e-3 * rng.standard_normal(features))
    nodes = [node("Gemm", ["input", "pre.w", "pre.b"], ["h"], transB=1)] + op_nodes
    hn, ht = head2("u", features, rng, positive)
    tensors = [("pre.w", pre_w, "param"), ("pre.b", pre_b, "param")] + list(extra) + ht
    x = f32(sampler(rng, batch * features).reshape(batch, features))
    return case(f"unary/{id}", nodes + hn, tensors, x, np.zeros(batch, np.int64),
                constants=constants, tag=tag, acts=acts, dacts=dacts, **opts)


def _unary(name, size):
    op_type, attrs, sampler = OPS[name]
    batch, features = SIZES[size]
    return op_case(f"{name}_{size}", [node(op_type, ["h"], ["u"], **attrs)], sampler, batch,
                   features, tag=tag_of(op_type, attrs), key=name)


def _thousands(name):
    """A few thousand elements (40 x 80)."""
    if name == "Clip":
        consts = {"lo": _c(0.0), "hi": _c(6.0)}
        return op_case("Clip_40x80", [node("Clip", ["h", "lo", "hi"], ["u"])], _mix(-4, 10),
                       40, 80, constants=consts, tag="Clip", key="Clip")
    op_type, attrs, sampler = OPS[name]
    return op_case(f"{name}_40x80", [node(op_type, ["h"], ["u"], **attrs)], sampler, 40, 80,
                   tag=tag_of(op_type, attrs), key=name)


# ---- Clip ---------------------------------------------------------------------------------

CLIPS = {
    # id: (inputs after "h", attrs, constants)
    "relu6": (["lo", "hi"], {}, {"lo": _c(0.0), "hi": _c(6.0)}),
    "min_only": (["lo"], {}, {"lo": _c(-0.5)}),
    "max_only": (["", "hi"], {}, {"hi": _c(1.5)}),
    "no_bounds": ([], {}, {}),
    "attrs_opset6": ([], {"min": -1.0, "max": 2.0}, {}),
    "min_gt_max": (["lo", "hi"], {}, {"lo": _c(1.0), "hi": _c(-1.0)}),
}


def _clip(name, size):
    inputs, attrs, consts = CLIPS[name]
    batch, features = SIZES[size]
    return op_case(f"clip_{name}_{size}", [node("Clip", ["h"] + inputs, ["u"], **attrs)],
                   _mix(-3, 8), batch, features, constants=consts, tag="Clip",
                   key=("clip", name))


def _clip_tensor_bounds(which):
    """min / max as trainable weights (a float initializer): torch.clamp's bound gradients."""
    lo, hi = {"both": (-0.5, 1.5), "min": (0.25, None), "max": (None, 0.75),
              "crossed": (1.0, -1.0)}[which]
    extra = []
    if lo is not None:
        extra.append(("clip.min", f32(np.array(lo)), "param"))
    if hi is not None:
        extra.append(("clip.max", f32(np.array(hi)), "param"))
    inputs = ["clip.min" if lo is not None else "", "clip.max" if hi is not None else ""]

    def bound_gradients(res, want):
        for name, _arr, _role in extra:
            assert name in res["grads"]

    return op_case(f"clip_tensor_bounds_{which}", [node("Clip", ["h"] + inputs, ["u"])],
                   _mix(-3, 3), 4, 9, extra=extra, tag="Clip", positive=True,
                   key=("clip_t", which), checks=(bound_gradients,))


def _tanh_then_inplace_relu():
    """Tanh -> Relu: the Relu runs in place over tanh's output (the backward of Tanh then
    recomputes tanh from x; where the Relu zeroed y its gradient is 0 anyway)."""
    def in_place(res, want):
        from harness import same_memory
        assert same_memory(res["plan"].acts["t"], res["plan"].acts["u"])  # the case under test

    nodes = [node("Tanh", ["h"], ["t"]), node("Relu", ["t"], ["u"])]
    return op_case("tanh_then_inplace_relu", nodes, _mix(-3, 3), 3, 11, tag="Tanh",
                   acts=("h", "u"), dacts=("h", "t"), key="tanh_relu", checks=(in_place,))


def _chain3():
    """Sigmoid -> Exp -> Neg: kernels back to back, each backward from the saved output."""
    nodes = [node("Sigmoid", ["h"], ["s"]), node("Exp", ["s"], ["e"]), node("Neg", ["e"], ["u"])]
    return op_case("sigmoid_exp_neg", nodes, _mix(-4, 4), 3, 11, tag="Sigmoid",
                   acts=("s", "e", "u"), dacts=("h", "s", "e"), key="chain")


def _gelu_torchscript_pattern(size):
    """GELU as the TorchScript exporter writes it: Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x ->
    Mul 0.5 (needs the binary ops); the reference's value is also the Gelu node's."""
    consts = {"sqrt2": _c(1.4142135381698608), "one": _c(1.0), "half": _c(0.5)}
    nodes = [node("Div", ["h", "sqrt2"], ["d"]), node("Erf", ["d"], ["e"]),
             node("Add", ["e", "one"], ["a"]), node("Mul", ["h", "a"], ["m"]),
             node("Mul", ["m", "half"], ["u"])]
    batch, features = SIZES[size]

    def same_as_gelu(res, want):
        from webgpu_trainer.cpu import unary
        gelu = {"op_type": "Gelu", "name": "g", "attrs": {}}
        u = unary.unary_forward(gelu, want["acts"]["h"])
        # sqrt 2 is a float32 constant in the pattern: 2e-8 relative on erf's argument
        assert np.abs(want["acts"]["u"] - u).max() <= 1e-7 * np.abs(u).max()

    return op_case(f"gelu_torchscript_pattern_{size}", nodes, _mix(-4, 4, big=8), batch,
                   features, constants=consts, tag="Erf", acts=("h", "e", "u"),
                   dacts=("h", "d", "e"), key=("gelu_ts", size), checks=(same_as_gelu,))


# ---- erf accuracy -------------------------------------------------------------------------

def erf_points():
    lin = np.linspace(-6, 6, 12001)
    tiny = np.geomspace(1e-20, 1.0, 1500)
    return f32(np.concatenate([lin, tiny, -tiny, [0.0, 1.0, -1.0, 0.99999994, 1.0000001]]))


def _erf_accuracy(op):
    """The WGSL erf against math.erf at float32 inputs: relative error per element (~1e-7).
    Gelu(x) = x Phi(x) is checked where Phi > 1e-3 (its left tail goes through erfc). The eval
    forward of input -> op -> head."""
    from conftest import head
    pts = erf_points()
    features = 128
    pad = (-len(pts)) % features
    x = np.concatenate([pts, np.zeros(pad, np.float32)]).reshape(-1, features)
    rng = rng_for("erf_acc", op)
    nodes = [node(op, ["input"], ["u"])]
    hn, ht = head("u", features, 3, rng)
    labels = rng.integers(0, 3, x.shape[0])

    def per_element(res, want):
        got = res["acts"]["u"].astype(np.float64).ravel()
        xs = x.astype(np.float64).ravel()
        if op == "Erf":
            ref = np.array([math.erf(v) for v in xs])
            mask = ref != 0
        else:
            ref = np.array([v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in xs])
            mask = (np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in xs]) > 1e-3) & \
                (xs != 0)
        rel = np.abs(got[mask] - ref[mask]) / np.abs(ref[mask])
        worst = float(rel.max())
        _record(f"{op} per element", "fwd", worst)  # shown in the error summary
        # Gelu's left tail: rounding x / sqrt 2 (3e-8 relative) moves erfc by 2 u^2 times that
        limit = 3e-7 if op == "Erf" else 2e-6
        assert worst <= limit, \
            f"{op}: max relative error {worst:.3g} at x = {xs[mask][rel.argmax()]}"
        assert np.all(got[xs == 0] == 0)

    return case(f"unary/{op}_accuracy_per_element", nodes + hn, ht, x, labels, train=False,
                tag=op, acts=("u",), checks=(per_element,))


# ---- composites (the browser's first parity list) -----------------------------------------

def _twelve_in_a_row():
    rng = rng_for("unary_chain")
    c, hw = 3, 7
    ops = [("LeakyRelu", {"alpha": 0.1}), ("Sigmoid", {}), ("Tanh", {}),
           ("Gelu", {"approximate": "tanh"}), ("Erf", {}), ("Exp", {}), ("Abs", {}),
           ("Neg", {}), ("Softplus", {}), ("Elu", {}), ("HardSigmoid", {}), ("HardSwish", {})]
    body, prev = [], "pre"
    for k, (op, attrs) in enumerate(ops):
        out_name = "body_out" if k == len(ops) - 1 else f"u{k}"
        body.append(node(op, [prev], [out_name], **attrs))
        prev = out_name
    return chain(rng, "unary/chain_twelve_ops", c, hw, body, c * hw * hw, tag="HardSwish",
                 acts=("u0", "u5", "body_out"), dacts=("pre", "u0", "u5"))


def _clip_sqrt_log_reciprocal():
    rng = rng_for("clip_sqrt_log_reciprocal")
    c, hw = 3, 7
    return chain(rng, "unary/chain_clip_sqrt_log_reciprocal", c, hw, [
        node("Clip", ["pre", "lo", "hi"], ["cl"]), node("Sqrt", ["cl"], ["sq"]),
        node("Log", ["sq"], ["lg"]), node("Reciprocal", ["cl"], ["rc"]),
        node("Add", ["lg", "rc"], ["body_out"])], c * hw * hw,
        constants={"lo": floats(0.5, shape=[]), "hi": floats(2.0, shape=[])}, tag="Clip",
        acts=("cl", "sq", "lg", "rc", "body_out"), dacts=("pre", "cl", "sq"))


UNARY = [_unary(name, size) for name in OPS for size in SIZES]
CLIP = [_clip(name, size) for name in CLIPS for size in SIZES]
CASES = UNARY + [_thousands(n) for n in ["Gelu", "Gelu_tanh", "Sigmoid", "Erf", "Clip"]] + \
    CLIP + [_clip_tensor_bounds(w) for w in ["both", "min", "max", "crossed"]] + \
    [_tanh_then_inplace_relu(), _chain3(), _gelu_torchscript_pattern(7),
     _gelu_torchscript_pattern(33), _erf_accuracy("Erf"), _erf_accuracy("Gelu"),
     _twelve_in_a_row(), _clip_sqrt_log_reciprocal()]

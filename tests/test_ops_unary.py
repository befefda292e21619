"""Unary elementwise ops (ops/unary.py, shaders/unary.wgsl) against the float64 numpy engine.

Each op sits in input -> Gemm (near identity, so the op's input range is the drawn range and the
op's input gradient flows) -> op -> Gemm + LogSoftmax; one training step is compared through
``compare``. The GPU erf is also checked elementwise against math.erf, and the numpy engine's
Erf / Gelu against math.erf values.
"""

import math

import numpy as np
import pytest

import conftest
import reference as ref
from conftest import compare, f32, head, make_graph, node, one_step, params_of, rng_for, run

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend

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
    "Elu": ("Elu", {}, _mix(-5, 3)),
    "Elu_a0.5": ("Elu", {"alpha": 0.5}, _mix(-5, 3)),
    "HardSigmoid": ("HardSigmoid", {}, _mix(-5, 5)),
    "HardSigmoid_torch": ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5}, _mix(-5, 5)),
    "HardSwish": ("HardSwish", {}, _mix(-5, 5)),
}

SIZES = {1: (1, 1), 7: (1, 7), 33: (3, 11)}


def _tag(op_type, attrs):
    if op_type == "Gelu":
        return f"Gelu({attrs.get('approximate', 'none')})"
    return op_type


def _head(features, rng, positive=False):
    """Gemm(transB=1) -> LogSoftmax over 2 classes with weights (s, -s): the op's output
    gradient is 2 s_f (p0 - e0), free of the cancellation a random head can produce in a
    tensor of one element (which the relative error would then measure). ``positive``: s > 0,
    so with every label 0 all output gradients are negative (sums of them cannot cancel)."""
    s = rng.uniform(0.05, 0.3, features)
    if not positive:
        s = s * rng.choice([-1.0, 1.0], features)
    w, b = f32(np.stack([s, -s])), f32(0.1 * rng.standard_normal(2))
    nodes = [node("Gemm", ["u", "fc.w", "fc.b"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    return nodes, [("fc.w", w, "param"), ("fc.b", b, "param")]


def _model(rng, op_nodes, batch, features, constants=None, extra=(), positive=False):
    """input -> Gemm(pre, ~identity) -> ``op_nodes`` (reading "h", ending in "u") -> head;
    labels all 0 (the head's bias gradient, a sum over the batch, cannot cancel)."""
    pre_w = f32(np.eye(features) + 1e-3 * rng.standard_normal((features, features)))
    pre_b = f32(1e-3 * rng.standard_normal(features))
    nodes = [node("Gemm", ["input", "pre.w", "pre.b"], ["h"], transB=1)] + op_nodes
    hn, ht = _head(features, rng, positive)
    tensors = [("pre.w", pre_w, "param"), ("pre.b", pre_b, "param")] + list(extra) + ht
    graph, blob = make_graph(nodes + hn, tensors, [("input", ["N", features])],
                             [("output", ["N", 2])], constants=constants)
    labels = np.zeros(batch, np.int64)
    return nodes + hn, tensors, graph, blob, labels


def _run_op(device, case, op_nodes, sampler, batch, features, constants=None, extra=(),
            tag=None, acts=("h", "u"), dacts=("h", "u"), positive=False):
    rng = rng_for("unary", case, batch, features)
    nodes, tensors, graph, blob, labels = _model(rng, op_nodes, batch, features,
                                                 constants=constants, extra=extra,
                                                 positive=positive)
    x = f32(sampler(rng, batch * features).reshape(batch, features))
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.chain_step(nodes, params_of(tensors), x, labels, constants=constants)
    compare(tag, res, want, acts=list(acts), dacts=list(dacts))
    return res, want


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("case", list(OPS))
def test_unary(device, case, size):
    op_type, attrs, sampler = OPS[case]
    batch, features = SIZES[size]
    _run_op(device, case, [node(op_type, ["h"], ["u"], **attrs)], sampler, batch, features,
            tag=_tag(op_type, attrs))


@pytest.mark.parametrize("case", ["Gelu", "Gelu_tanh", "Sigmoid", "Erf", "Clip"])
def test_unary_thousands(device, case):
    """A few thousand elements (40 x 80)."""
    if case == "Clip":
        consts = {"lo": {"dtype": "float32", "shape": [], "values": [0.0]},
                  "hi": {"dtype": "float32", "shape": [], "values": [6.0]}}
        _run_op(device, case, [node("Clip", ["h", "lo", "hi"], ["u"])], _mix(-4, 10), 40, 80,
                constants=consts, tag="Clip")
        return
    op_type, attrs, sampler = OPS[case]
    _run_op(device, case, [node(op_type, ["h"], ["u"], **attrs)], sampler, 40, 80,
            tag=_tag(op_type, attrs))


# ---- Clip ---------------------------------------------------------------------------------

def _c(v):
    return {"dtype": "float32", "shape": [], "values": [v]}


CLIP_CASES = {
    # id: (inputs after "h", attrs, constants)
    "relu6": (["lo", "hi"], {}, {"lo": _c(0.0), "hi": _c(6.0)}),
    "min_only": (["lo"], {}, {"lo": _c(-0.5)}),
    "max_only": (["", "hi"], {}, {"hi": _c(1.5)}),
    "no_bounds": ([], {}, {}),
    "attrs_opset6": ([], {"min": -1.0, "max": 2.0}, {}),
    "min_gt_max": (["lo", "hi"], {}, {"lo": _c(1.0), "hi": _c(-1.0)}),
}


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("case", list(CLIP_CASES))
def test_clip(device, case, size):
    inputs, attrs, consts = CLIP_CASES[case]
    batch, features = SIZES[size]
    _run_op(device, ("clip", case), [node("Clip", ["h"] + inputs, ["u"], **attrs)],
            _mix(-3, 8), batch, features, constants=consts, tag="Clip")


@pytest.mark.parametrize("which", ["both", "min", "max", "crossed"])
def test_clip_tensor_bounds(device, which):
    """min / max as trainable weights (a float initializer): torch.clamp's bound gradients."""
    lo, hi = {"both": (-0.5, 1.5), "min": (0.25, None), "max": (None, 0.75),
              "crossed": (1.0, -1.0)}[which]
    extra = []
    if lo is not None:
        extra.append(("clip.min", f32(np.array(lo)), "param"))
    if hi is not None:
        extra.append(("clip.max", f32(np.array(hi)), "param"))
    inputs = ["clip.min" if lo is not None else "", "clip.max" if hi is not None else ""]
    res, _ = _run_op(device, ("clip_t", which), [node("Clip", ["h"] + inputs, ["u"])],
                     _mix(-3, 3), 4, 9, extra=extra, tag="Clip", positive=True)
    for name, _arr, _role in extra:
        assert name in res["grads"]


def test_tanh_then_inplace_relu(device):
    """Tanh -> Relu: the Relu runs in place over tanh's output (the backward of Tanh then
    recomputes tanh from x; where the Relu zeroed y its gradient is 0 anyway)."""
    nodes = [node("Tanh", ["h"], ["t"]), node("Relu", ["t"], ["u"])]
    res, _ = _run_op(device, "tanh_relu", nodes, _mix(-3, 3), 3, 11, tag="Tanh",
                     acts=("h", "u"), dacts=("h", "t"))
    plan = res["plan"]
    assert plan.acts["t"].buf is plan.acts["u"].buf  # the case under test


def test_unary_chain(device):
    """Sigmoid -> Exp -> Neg: kernels back to back, each backward from the saved output."""
    nodes = [node("Sigmoid", ["h"], ["s"]), node("Exp", ["s"], ["e"]), node("Neg", ["e"], ["u"])]
    _run_op(device, "chain", nodes, _mix(-4, 4), 3, 11, tag="Sigmoid",
            acts=("s", "e", "u"), dacts=("h", "s", "e"))


@pytest.mark.parametrize("size", [7, 33])
def test_gelu_torchscript_pattern(device, size):
    """GELU as the TorchScript exporter writes it: Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x ->
    Mul 0.5 (needs the binary ops); compared with the engine and with the Gelu node."""
    from webgpu_trainer.engine import ops
    if "Div" not in ops.OPS:
        pytest.skip("binary ops not registered")
    consts = {"sqrt2": _c(1.4142135381698608), "one": _c(1.0), "half": _c(0.5)}
    nodes = [node("Div", ["h", "sqrt2"], ["d"]), node("Erf", ["d"], ["e"]),
             node("Add", ["e", "one"], ["a"]), node("Mul", ["h", "a"], ["m"]),
             node("Mul", ["m", "half"], ["u"])]
    batch, features = SIZES[size]
    res, want = _run_op(device, ("gelu_ts", size), nodes, _mix(-4, 4, big=8), batch, features,
                        constants=consts, tag="Erf", acts=("h", "e", "u"),
                        dacts=("h", "d", "e"))
    gelu = {"op_type": "Gelu", "name": "g", "attrs": {}}
    from webgpu_trainer.cpu import unary
    h = want["acts"]["h"]
    # sqrt 2 is a float32 constant in the pattern: 2e-8 relative on erf's argument
    u = unary.unary_forward(gelu, h)
    assert np.abs(want["acts"]["u"] - u).max() <= 1e-7 * np.abs(u).max()


# ---- erf accuracy -------------------------------------------------------------------------

def _erf_points():
    lin = np.linspace(-6, 6, 12001)
    tiny = np.geomspace(1e-20, 1.0, 1500)
    return f32(np.concatenate([lin, tiny, -tiny, [0.0, 1.0, -1.0, 0.99999994, 1.0000001]]))


@pytest.mark.parametrize("op", ["Erf", "Gelu"])
def test_erf_kernel_accuracy(device, op):
    """The WGSL erf against math.erf at float32 inputs: relative error per element (~1e-7).
    Gelu(x) = x Phi(x) is checked where Phi > 1e-3 (its left tail goes through erfc)."""
    pts = _erf_points()
    features = 128
    pad = (-len(pts)) % features
    x = np.concatenate([pts, np.zeros(pad, np.float32)]).reshape(-1, features)
    rng = rng_for("erf_acc", op)
    nodes = [node(op, ["input"], ["u"])]
    hn, ht = head("u", features, 3, rng)
    graph, blob = make_graph(nodes + hn, ht, [("input", ["N", features])],
                             [("output", ["N", 3])])
    labels = rng.integers(0, 3, x.shape[0])
    res = run(one_step(device, graph, blob, x, labels, train=False))
    got = res["acts"]["u"].astype(np.float64).ravel()
    xs = x.astype(np.float64).ravel()
    if op == "Erf":
        want = np.array([math.erf(v) for v in xs])
        mask = want != 0
    else:
        want = np.array([v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in xs])
        mask = (np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in xs]) > 1e-3) & (xs != 0)
    rel = np.abs(got[mask] - want[mask]) / np.abs(want[mask])
    worst = float(rel.max())
    conftest._record(f"{op} per element", "fwd", worst)  # shown in the error summary
    # Gelu's left tail: rounding x / sqrt 2 (3e-8 relative) moves erfc by 2 u^2 times that
    limit = 3e-7 if op == "Erf" else 2e-6
    assert worst <= limit, f"{op}: max relative error {worst:.3g} at x = {xs[mask][rel.argmax()]}"
    assert np.all(got[xs == 0] == 0)


# ---- the numpy engine ---------------------------------------------------------------------

def test_numpy_erf_gelu_against_math():
    from webgpu_trainer.cpu import unary
    xs = np.array([-8.0, -3.5, -1.0, -0.3, -1e-8, 0.0, 1e-8, 0.5, 1.0, 2.0, 4.0, 10.0])
    np.testing.assert_allclose(unary.erf(xs), [math.erf(v) for v in xs], rtol=1e-15, atol=0)
    gelu = unary.unary_forward({"op_type": "Gelu", "name": "g", "attrs": {}}, xs)
    want = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in xs]
    keep = xs > -3  # below, 1 + erf cancels (the engine uses erfc there)
    np.testing.assert_allclose(gelu[keep], np.array(want)[keep], rtol=1e-12, atol=1e-300)
    want = [0.5 * v * math.erfc(-v / math.sqrt(2)) for v in xs]
    np.testing.assert_allclose(gelu, want, rtol=1e-14, atol=1e-300)
    # derivative of the erf form by central differences
    d = unary.unary_backward({"op_type": "Gelu", "name": "g", "attrs": {}}, xs, gelu,
                             np.ones_like(xs))
    h = 1e-6
    fd = [(0.5 * (v + h) * (1 + math.erf((v + h) / math.sqrt(2)))
           - 0.5 * (v - h) * (1 + math.erf((v - h) / math.sqrt(2)))) / (2 * h) for v in xs]
    np.testing.assert_allclose(d, fd, rtol=1e-6, atol=1e-9)
    derf = unary.unary_backward({"op_type": "Erf", "name": "e", "attrs": {}}, xs,
                                unary.erf(xs), np.ones_like(xs))
    fd = [(math.erf(v + h) - math.erf(v - h)) / (2 * h) for v in xs]
    np.testing.assert_allclose(derf, fd, rtol=1e-6, atol=1e-9)
    # float32 engine dtype stays float32
    x32 = xs.astype(np.float32)
    assert unary.erf(x32).dtype == np.float32
    outs, _ = unary.forward({"op_type": "Gelu", "name": "g", "attrs": {}}, [x32], None)
    assert outs[0].dtype == np.float32


@pytest.mark.parametrize("case", [c for c in OPS if OPS[c][0] not in ("Log", "Sqrt",
                                                                     "Reciprocal")])
def test_numpy_matches_torch(case):
    """The numpy engine's forward and backward against torch (float64) where torch has the op."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from webgpu_trainer.cpu import unary
    op_type, attrs, sampler = OPS[case]
    rng = rng_for("torch", case)
    x = sampler(rng, 257)
    dy = rng.standard_normal(257)
    n = {"op_type": op_type, "name": case, "attrs": attrs}
    fns = {
        "LeakyRelu": lambda t: F.leaky_relu(t, attrs.get("alpha", 0.01)),
        "Sigmoid": torch.sigmoid, "Tanh": torch.tanh,
        "Gelu": lambda t: F.gelu(t, approximate=attrs.get("approximate", "none")),
        "Erf": torch.erf, "Exp": torch.exp, "Neg": torch.neg, "Abs": torch.abs,
        "Softplus": F.softplus, "Elu": lambda t: F.elu(t, attrs.get("alpha", 1.0)),
        "HardSigmoid": lambda t: torch.clamp(attrs.get("alpha", 0.2) * t
                                             + attrs.get("beta", 0.5), 0, 1),
        "HardSwish": F.hardswish,
    }
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    y = fns[op_type](t)
    y.backward(torch.tensor(dy))
    got_y = unary.unary_forward(n, x)
    got_dx = unary.unary_backward(n, x, got_y, dy)
    # torch's Softplus returns x above its threshold 20 (ONNX: log(1 + e^x), e^-20 more)
    atol = 3e-9 if op_type == "Softplus" else 1e-12
    np.testing.assert_allclose(got_y, y.detach().numpy(), rtol=1e-12, atol=atol)
    np.testing.assert_allclose(got_dx, t.grad.numpy(), rtol=1e-10, atol=atol)


def test_numpy_clip_matches_torch():
    torch = pytest.importorskip("torch")
    from webgpu_trainer.cpu import unary
    rng = rng_for("torch_clip")
    x = rng.uniform(-3, 3, 101)
    x[:3] = [-0.5, 1.5, 0.0]  # exactly on the bounds: torch passes the gradient
    dy = rng.standard_normal(101)
    for lo, hi in [(-0.5, 1.5), (1.0, -1.0)]:
        t = torch.tensor(x, requires_grad=True)
        tl = torch.tensor(lo, dtype=torch.float64, requires_grad=True)
        th = torch.tensor(hi, dtype=torch.float64, requires_grad=True)
        torch.clamp(t, tl, th).backward(torch.tensor(dy))
        n = {"op_type": "Clip", "name": "c", "attrs": {}}
        ins = [x, np.array(lo), np.array(hi)]
        (y,), _ = unary.forward(n, ins, None)
        dx, dl, dh = unary.backward(n, ins, [y], None, [dy], None)
        np.testing.assert_allclose(y, torch.clamp(torch.tensor(x), lo, hi).numpy())
        np.testing.assert_allclose(dx, t.grad.numpy())
        np.testing.assert_allclose(dl, tl.grad.numpy())
        np.testing.assert_allclose(dh, th.grad.numpy())

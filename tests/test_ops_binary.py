"""Add, Sub, Mul, Div, Pow with NumPy broadcasting: one training step on the native device
against the float64 numpy engine (forward values, every activation gradient on the way, every
parameter gradient), with operands that are activations, parameters or constants.

Activations of any shape come from the graph input through Gemm(input, W, c) and Reshape, so
their gradients (and W's, c's) check the op's input gradients; the op's output goes through
Reshape([batch, -1]) -> Gemm -> LogSoftmax. Divisors and Pow's bases stay away from 0 and Pow's
bases are positive unless the exponent is an integer constant.
"""

import numpy as np
import pytest

import reference as ref
from conftest import compare, f32, head, make_graph, node, one_step, params_of, rng_for, run

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend

F0 = 3        # features of the graph input
CLASSES = 5

# value ranges: ("sym", scale) ~ N(0, scale); ("pos", lo, hi) in [lo, hi];
# ("away", lo, hi): |v| in [lo, hi] with a random sign
SYM, POS, AWAY = ("sym", 1.0), ("pos", 0.6, 1.8), ("away", 0.7, 1.5)
RANGES = {"Add": (SYM, SYM), "Sub": (SYM, SYM), "Mul": (SYM, SYM), "Div": (SYM, AWAY),
          "Pow": (POS, ("sym", 0.6))}


def _numel(shape):
    return int(np.prod(shape, dtype=np.int64))


def _values(rng, rng_spec, shape):
    kind = rng_spec[0]
    if kind == "sym":
        return f32(rng.standard_normal(shape) * rng_spec[1])
    v = rng.uniform(rng_spec[1], rng_spec[2], shape)
    if kind == "away":
        v *= rng.choice([-1.0, 1.0], shape)
    return f32(v)


class Model:
    """Nodes, tensors and constants of a test graph under construction."""

    def __init__(self, batch, rng):
        self.batch, self.rng = batch, rng
        self.nodes, self.tensors, self.consts = [], [], {}

    def const(self, name, values, shape, dtype="float32"):
        self.consts[name] = {"dtype": dtype, "shape": list(shape),
                             "values": [v.item() if hasattr(v, "item") else v
                                        for v in np.ravel(values)]}
        return name

    def reshape(self, src, out, shape):
        self.nodes.append(node("Reshape", [src, self.const(out + ".shape", shape, [len(shape)],
                                                           "int64")], [out]))
        return out

    def operand(self, kind, name, shape, rng_spec):
        """A tensor ``name`` of ``shape``: "param" (trainable), "const" or "act" (from the graph
        input through Gemm + Reshape, with values around ``rng_spec``'s range)."""
        rng = self.rng
        if kind == "param":
            self.tensors.append((name, _values(rng, rng_spec, shape), "param"))
            return name
        if kind == "const":
            return self.const(name, _values(rng, rng_spec, shape), shape)
        m = _numel(shape) // self.batch
        assert m * self.batch == _numel(shape), (shape, self.batch)
        # act = x @ W + c: c carries the range, W a small spread (x ~ N(0, 1))
        if rng_spec[0] == "sym":
            w, c = rng.standard_normal((F0, m)) * 0.5 * rng_spec[1], \
                rng.standard_normal(m) * 0.3 * rng_spec[1]
        else:
            w = rng.standard_normal((F0, m)) * 0.04
            lo, hi = rng_spec[1] + 0.2, rng_spec[2] - 0.2
            c = _values(rng, (rng_spec[0], lo, hi), (m,))
        self.tensors += [(name + ".w", f32(w), "param"), (name + ".c", f32(c), "param")]
        self.nodes.append(node("Gemm", ["input", name + ".w", name + ".c"], [name + ".g"]))
        return self.reshape(name + ".g", name, shape)

    def finish(self, out, out_shape):
        """Reshape(out, [batch, -1]) -> Gemm -> LogSoftmax; returns (graph, blob)."""
        flat = self.reshape(out, out + ".flat", [self.batch, -1])
        hn, ht = head(flat, _numel(out_shape) // self.batch, CLASSES, self.rng)
        self.nodes += hn
        self.tensors += ht
        return make_graph(self.nodes, self.tensors, [("input", ["N", F0])],
                          [("output", ["N", CLASSES])], constants=self.consts)


def _step(device, tag, m, graph, blob, acts, dacts, x=None):
    rng = m.rng
    if x is None:
        x = f32(rng.standard_normal((m.batch, F0)))
    labels = rng.integers(0, CLASSES, m.batch)
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.graph_step(graph, params_of(m.tensors), x, labels)
    for name in acts:
        assert np.all(np.isfinite(want["acts"][name])), f"reference {name} not finite"
    compare(tag, res, want, acts=acts, dacts=dacts)
    return res, want


# ---- every op x shapes x operand kinds ---------------------------------------------------

CASES = {
    # id: (kind of A, shape of A, kind of B, shape of B, batch)
    "act4d_param3d": ("act", [2, 3, 4, 5], "param", [3, 1, 5], 2),
    "param3d_act4d": ("param", [3, 1, 5], "act", [2, 3, 4, 5], 2),
    "act_act_both_ways": ("act", [2, 1, 4, 1], "act", [2, 3, 1, 5], 2),
    "act4d_const3d": ("act", [2, 3, 4, 5], "const", [3, 1, 5], 2),
    "const3d_act4d": ("const", [3, 1, 5], "act", [2, 3, 4, 5], 2),
    "act_scalar_const": ("act", [2, 3, 4, 5], "const", [1], 2),
    "act_rank0_const": ("act", [3, 7], "const", [], 3),
    "scalar_param_act": ("param", [1], "act", [2, 3, 4, 5], 2),
    "scalar_param_split": ("act", [33, 7], "param", [1], 33),
    "vec7_param_act33": ("param", [7], "act", [33, 7], 33),
    "act33_vec7_param": ("act", [33, 7], "param", [7], 33),
    "act7_param33": ("act", [7], "param", [33, 7], 1),
    "row_param_split": ("param", [1, 7], "act", [260, 7], 260),
    "params_both_ways": ("param", [4, 1], "param", [3, 1, 5], 1),
    "same_shape_acts": ("act", [4, 7], "act", [4, 7], 4),
    "rank6_alternating": ("act", [2, 1, 3, 1, 2, 1], "param", [1, 2, 1, 3, 1, 2], 2),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow"])
def test_binary(device, op, case):
    ka, sa, kb, sb, batch = CASES[case]
    m = Model(batch, rng_for("binary", op, case))
    ra, rb = RANGES[op]
    a = m.operand(ka, "a", sa, ra)
    b = m.operand(kb, "b", sb, rb)
    out_shape = list(np.broadcast_shapes(tuple(sa), tuple(sb)))
    m.nodes.append(node(op, [a, b], ["y"]))
    graph, blob = m.finish("y", out_shape)
    act_names = [n for n, k in ((a, ka), (b, kb)) if k == "act"]
    _step(device, op, m, graph, blob, acts=["y"] + act_names, dacts=["y"] + act_names)


# ---- Pow: integer exponents (negative bases), 0.5, zeros in the base ----------------------

@pytest.mark.parametrize("exponent,base", [(2.0, "sym"), (3.0, "sym"), (-1.0, "away"),
                                           (-2.0, "away"), (0.0, "sym"), (1.0, "sym"),
                                           (0.5, "pos"), (1.5, "pos"), (-0.5, "pos")])
def test_pow_constant_exponent(device, exponent, base):
    """Pow(x, c) for a scalar constant c: x < 0 is in the test only for integral c."""
    m = Model(4, rng_for("pow_const", exponent))
    x = m.operand("act", "x", [4, 33], {"sym": SYM, "away": AWAY, "pos": POS}[base])
    e = m.const("e", [exponent], [])
    m.nodes.append(node("Pow", [x, e], ["y"]))
    graph, blob = m.finish("y", [4, 33])
    want = _step(device, "Pow", m, graph, blob, acts=["x", "y"], dacts=["x", "y"])[1]
    if base != "pos":
        assert (want["acts"]["x"] < 0).any()


def test_pow_int64_exponent_per_column(device):
    """Pow(x [N, 3], int64 constant [1, 2, 3]) with negative bases (exponents as exported)."""
    m = Model(5, rng_for("pow_int64"))
    x = m.operand("act", "x", [5, 3], AWAY)
    e = m.const("e", [1, 2, 3], [3], "int64")
    m.nodes.append(node("Pow", [x, e], ["y"]))
    graph, blob = m.finish("y", [5, 3])
    _step(device, "Pow", m, graph, blob, acts=["x", "y"], dacts=["x", "y"])


def test_pow_constant_base(device):
    """Pow(2, x): the gradient of the exponent, ln(2) * 2^x."""
    m = Model(3, rng_for("pow_base"))
    x = m.operand("act", "x", [3, 7], SYM)
    m.nodes.append(node("Pow", [m.const("two", [2.0], []), x], ["y"]))
    graph, blob = m.finish("y", [3, 7])
    _step(device, "Pow", m, graph, blob, acts=["y"], dacts=["x", "y"])


def test_pow_zero_base(device):
    """Zeros in the base with exponents > 1: d/db is 0 there (torch), not 0 * ln(0) = NaN."""
    m = Model(4, rng_for("pow_zero"))
    a = _values(m.rng, POS, (4, 6))
    a[:, ::2] = 0.0
    m.tensors.append(("a", a, "param"))
    e = m.operand("act", "e", [4, 6], ("pos", 1.5, 2.5))
    m.nodes.append(node("Pow", ["a", e], ["y"]))
    graph, blob = m.finish("y", [4, 6])
    res = _step(device, "Pow", m, graph, blob, acts=["y"], dacts=["e", "y"])[0]
    assert np.all(res["dacts"]["e"][:, ::2] == 0)


# ---- graph-level: residual DAG, the same tensor twice in one node, x / 255 ---------------

def test_residual_block(device):
    """x -> Gemm h -> Relu r -> Gemm g -> Add(h, g) -> Relu -> Gemm -> LogSoftmax: h has two
    uses, so the plan sums its gradient over the Relu and the Add."""
    batch, features, hidden = 4, 5, 7
    rng = rng_for("residual")
    nodes = [node("Gemm", ["input", "w1", "b1"], ["h"], transB=1),
             node("Relu", ["h"], ["r"]),
             node("Gemm", ["r", "w2", "b2"], ["g"], transB=1),
             node("Add", ["h", "g"], ["s"]),
             node("Relu", ["s"], ["rs"])]
    hn, ht = head("rs", hidden, CLASSES, rng)
    tensors = [("w1", f32(rng.standard_normal((hidden, features)) / 2), "param"),
               ("b1", f32(rng.standard_normal(hidden) * 0.1), "param"),
               ("w2", f32(rng.standard_normal((hidden, hidden)) / 2), "param"),
               ("b2", f32(rng.standard_normal(hidden) * 0.1), "param")] + ht
    graph, blob = make_graph(nodes + hn, tensors, [("input", ["N", features])],
                             [("output", ["N", CLASSES])])
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, CLASSES, batch)
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.graph_step(graph, params_of(tensors), x, labels)
    # s is overwritten by the in-place Relu; rs = max(s, 0) checks it
    compare("Add", res, want, acts=["h", "g", "rs"], dacts=["h", "r", "g", "s"])


def test_same_tensor_twice(device):
    """Mul(h, h) and Add(w, w): both gradient contributions of one node are summed."""
    m = Model(4, rng_for("twice"))
    h = m.operand("act", "h", [4, 7], SYM)
    m.tensors.append(("w", _values(m.rng, SYM, (7,)), "param"))
    m.nodes += [node("Mul", [h, h], ["sq"]), node("Add", ["w", "w"], ["ww"]),
                node("Add", ["sq", "ww"], ["y"])]
    graph, blob = m.finish("y", [4, 7])
    _step(device, "Mul", m, graph, blob, acts=["sq", "ww", "y"], dacts=["h", "sq", "ww", "y"])


def test_input_over_255(device):
    """Div(input, 255): the graph input scaled by a constant (no gradient to either)."""
    batch = 3
    rng = rng_for("x255")
    nodes = [node("Div", ["input", "k"], ["xs"]), node("Flatten", ["xs"], ["flat"], axis=1)]
    hn, ht = head("flat", 16, CLASSES, rng)
    consts = {"k": {"dtype": "float32", "shape": [], "values": [255.0]}}
    graph, blob = make_graph(nodes + hn, ht, [("input", ["N", 1, 4, 4])],
                             [("output", ["N", CLASSES])], constants=consts)
    x = f32(rng.integers(0, 256, (batch, 1, 4, 4)))
    labels = rng.integers(0, CLASSES, batch)
    res = run(one_step(device, graph, blob, x, labels))
    want = ref.graph_step(graph, params_of(ht), x, labels)
    compare("Div", res, want, acts=["xs"])


# ---- shapes that do not broadcast ----------------------------------------------------------

@pytest.mark.parametrize("sa,sb", [([2, 3], [4]), ([2, 3, 4], [3, 1, 5])])
def test_not_broadcastable(sa, sb):
    from webgpu_trainer.engine.graph import Graph, GraphError
    tensors = [("a", np.zeros(sa, np.float32), "param"), ("b", np.zeros(sb, np.float32),
                                                          "param")]
    graph, _ = make_graph([node("Mul", ["a", "b"], ["y"], name="/blk/Mul")], tensors,
                          [("input", ["N", 2])], [("y", ["N", 2])])
    with pytest.raises(GraphError, match=r"/blk/Mul \(Mul\): shapes " + str(sa).replace(
            "[", r"\[").replace("]", r"\]") + " and " + str(sb).replace("[", r"\[")
            .replace("]", r"\]") + " do not broadcast"):
        Graph(graph).shapes(2)


# ---- the reference itself, against torch (skipped without torch) --------------------------

def test_reference_matches_torch():
    torch = pytest.importorskip("torch")
    from webgpu_trainer.cpu.binary import binary, binary_backward
    rng = np.random.default_rng(1)
    fns = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div,
           "Pow": torch.pow}
    a_zero = np.abs(rng.standard_normal((3, 1, 5))) + 0.5
    a_zero[0, 0, :2] = 0.0
    cases = [(op, rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((3, 1, 5)) + 3)
             for op in ("Add", "Sub", "Mul", "Div")]
    cases += [("Pow", np.abs(rng.standard_normal((2, 3, 4, 5))) + 0.1,
               rng.standard_normal((3, 1, 5))),
              ("Pow", rng.standard_normal((4, 7)), np.array([2.0, 3.0, -1.0, 0.0, 1.0, 2.0,
                                                             3.0])),
              ("Pow", a_zero, rng.uniform(0.0, 2.0, (2, 1, 4, 5)))]
    for op, a, b in cases:
        at = torch.tensor(a, requires_grad=True)
        bt = torch.tensor(b, requires_grad=True)
        yt = fns[op](at, bt)
        dy = rng.standard_normal(tuple(yt.shape))
        yt.backward(torch.tensor(dy))
        assert np.allclose(binary(op, a, b), yt.detach().numpy(), equal_nan=True), op
        da, db = binary_backward(op, a, b, dy)
        assert np.allclose(da, at.grad.numpy(), equal_nan=True), f"{op} dA"
        assert np.allclose(db, bt.grad.numpy(), equal_nan=True), f"{op} dB"

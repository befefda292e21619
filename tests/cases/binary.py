"""Add, Sub, Mul, Div, Pow, PRelu, and Max, Min, Sum, Mean of two or more inputs, with NumPy
broadcasting (ops/binary.py, shaders/binary.wgsl), with operands that are activations,
parameters or constants.

Activations of any shape come from the graph input through Gemm(input, W, c) and Reshape, so
their gradients (and W's, c's) check the op's input gradients; the op's output goes through
Reshape([batch, -1]) -> Gemm -> LogSoftmax. Divisors and Pow's bases stay away from 0 and Pow's
bases are positive unless the exponent is an integer constant.
"""

import numpy as np

from cases import case
from cases.blocks import chain, floats
from conftest import f32, head, node, rng_for

F0 = 3        # features of the graph input
CLASSES = 5

# value ranges: ("sym", scale) ~ N(0, scale); ("pos", lo, hi) in [lo, hi];
# ("away", lo, hi): |v| in [lo, hi] with a random sign
SYM, POS, AWAY = ("sym", 1.0), ("pos", 0.6, 1.8), ("away", 0.7, 1.5)
RANGES = {"Add": (SYM, SYM), "Sub": (SYM, SYM), "Mul": (SYM, SYM), "Div": (SYM, AWAY),
          "Pow": (POS, ("sym", 0.6))}
OPS = ["Add", "Sub", "Mul", "Div", "Pow"]


def _numel(shape):
    return int(np.prod(shape, dtype=np.int64))


def values(rng, rng_spec, shape):
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

    def const(self, name, vals, shape, dtype="float32"):
        self.consts[name] = {"dtype": dtype, "shape": list(shape),
                             "values": [v.item() if hasattr(v, "item") else v
                                        for v in np.ravel(vals)]}
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
            self.tensors.append((name, values(rng, rng_spec, shape), "param"))
            return name
        if kind == "const":
            return self.const(name, values(rng, rng_spec, shape), shape)
        m = _numel(shape) // self.batch
        assert m * self.batch == _numel(shape), (shape, self.batch)
        # act = x @ W + c: c carries the range, W a small spread (x ~ N(0, 1))
        if rng_spec[0] == "sym":
            w, c = rng.standard_normal((F0, m)) * 0.5 * rng_spec[1], \
                rng.standard_normal(m) * 0.3 * rng_spec[1]
        else:
            w = rng.standard_normal((F0, m)) * 0.04
            lo, hi = rng_spec[1] + 0.2, rng_spec[2] - 0.2
            c = values(rng, (rng_spec[0], lo, hi), (m,))
        self.tensors += [(name + ".w", f32(w), "param"), (name + ".c", f32(c), "param")]
        self.nodes.append(node("Gemm", ["input", name + ".w", name + ".c"], [name + ".g"]))
        return self.reshape(name + ".g", name, shape)

    def case(self, id, out, out_shape, x=None, **opts):
        """Reshape(out, [batch, -1]) -> Gemm -> LogSoftmax; the input ~ N(0, 1) unless ``x``."""
        flat = self.reshape(out, out + ".flat", [self.batch, -1])
        hn, ht = head(flat, _numel(out_shape) // self.batch, CLASSES, self.rng)
        self.nodes += hn
        self.tensors += ht
        if x is None:
            x = f32(self.rng.standard_normal((self.batch, F0)))
        labels = self.rng.integers(0, CLASSES, self.batch)
        return case(id, self.nodes, self.tensors, x, labels, constants=self.consts, **opts)


# ---- every op x shapes x operand kinds ---------------------------------------------------

SHAPES = {
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


def _broadcast(op, name):
    ka, sa, kb, sb, batch = SHAPES[name]
    m = Model(batch, rng_for("binary", op, name))
    ra, rb = RANGES[op]
    a = m.operand(ka, "a", sa, ra)
    b = m.operand(kb, "b", sb, rb)
    out_shape = list(np.broadcast_shapes(tuple(sa), tuple(sb)))
    m.nodes.append(node(op, [a, b], ["y"]))
    act_names = tuple(n for n, k in ((a, ka), (b, kb)) if k == "act")
    return m.case(f"binary/{op}_{name}", "y", out_shape, tag=op, acts=("y",) + act_names,
                  dacts=("y",) + act_names)


# ---- Pow: integer exponents (negative bases), 0.5, zeros in the base ----------------------

def _has_negative_base(res, want):
    assert (want["acts"]["x"] < 0).any()


def _pow_constant_exponent(exponent, base):
    """Pow(x, c) for a scalar constant c: x < 0 is in the test only for integral c."""
    m = Model(4, rng_for("pow_const", exponent))
    x = m.operand("act", "x", [4, 33], {"sym": SYM, "away": AWAY, "pos": POS}[base])
    e = m.const("e", [exponent], [])
    m.nodes.append(node("Pow", [x, e], ["y"]))
    return m.case(f"binary/pow_exponent_{exponent}_{base}", "y", [4, 33], tag="Pow",
                  acts=("x", "y"), dacts=("x", "y"),
                  checks=() if base == "pos" else (_has_negative_base,))


def _pow_int64_exponent_per_column():
    """Pow(x [N, 3], int64 constant [1, 2, 3]) with negative bases (exponents as exported)."""
    m = Model(5, rng_for("pow_int64"))
    x = m.operand("act", "x", [5, 3], AWAY)
    e = m.const("e", [1, 2, 3], [3], "int64")
    m.nodes.append(node("Pow", [x, e], ["y"]))
    return m.case("binary/pow_int64_exponent_per_column", "y", [5, 3], tag="Pow",
                  acts=("x", "y"), dacts=("x", "y"))


def _pow_constant_base():
    """Pow(2, x): the gradient of the exponent, ln(2) * 2^x."""
    m = Model(3, rng_for("pow_base"))
    x = m.operand("act", "x", [3, 7], SYM)
    m.nodes.append(node("Pow", [m.const("two", [2.0], []), x], ["y"]))
    return m.case("binary/pow_constant_base", "y", [3, 7], tag="Pow", acts=("y",),
                  dacts=("x", "y"))


def _zero_where_base_zero(res, want):
    assert np.all(res["dacts"]["e"][:, ::2] == 0)


def _pow_zero_base():
    """Zeros in the base with exponents > 1: d/db is 0 there (torch), not 0 * ln(0) = NaN."""
    m = Model(4, rng_for("pow_zero"))
    a = values(m.rng, POS, (4, 6))
    a[:, ::2] = 0.0
    m.tensors.append(("a", a, "param"))
    e = m.operand("act", "e", [4, 6], ("pos", 1.5, 2.5))
    m.nodes.append(node("Pow", ["a", e], ["y"]))
    return m.case("binary/pow_zero_base", "y", [4, 6], tag="Pow", acts=("y",),
                  dacts=("e", "y"), checks=(_zero_where_base_zero,))


# ---- graph-level: the same tensor twice in one node, x / 255 ------------------------------

def _same_tensor_twice():
    """Mul(h, h) and Add(w, w): both gradient contributions of one node are summed."""
    m = Model(4, rng_for("twice"))
    h = m.operand("act", "h", [4, 7], SYM)
    m.tensors.append(("w", values(m.rng, SYM, (7,)), "param"))
    m.nodes += [node("Mul", [h, h], ["sq"]), node("Add", ["w", "w"], ["ww"]),
                node("Add", ["sq", "ww"], ["y"])]
    return m.case("binary/same_tensor_twice", "y", [4, 7], tag="Mul",
                  acts=("sq", "ww", "y"), dacts=("h", "sq", "ww", "y"))


def _input_over_255():
    """Div(input, 255): the graph input scaled by a constant (no gradient to either)."""
    batch = 3
    rng = rng_for("x255")
    nodes = [node("Div", ["input", "k"], ["xs"]), node("Flatten", ["xs"], ["flat"], axis=1)]
    hn, ht = head("flat", 16, CLASSES, rng)
    consts = {"k": {"dtype": "float32", "shape": [], "values": [255.0]}}
    x = f32(rng.integers(0, 256, (batch, 1, 4, 4)))
    labels = rng.integers(0, CLASSES, batch)
    return case("binary/input_over_255", nodes + hn, ht, x, labels, constants=consts,
                tag="Div", acts=("xs",))


def _broadcast_residual():
    """Mul by a [C, 1, 1] parameter, Div and Pow by a rank-0 constant, Sub and Add of the
    Conv output again (a residual) after a 1x1 Conv."""
    rng = rng_for("binary_broadcast_residual")
    c, hw = 3, 7
    return chain(rng, "binary/broadcast_residual", c, hw, [
        node("Mul", ["pre", "scale"], ["s"]), node("Div", ["s", "two"], ["d"]),
        node("Pow", ["d", "two"], ["p"]), node("Sub", ["p", "pre"], ["q"]),
        node("Add", ["q", "pre"], ["body_out"])], c * hw * hw,
        extra=[("scale", f32(rng.standard_normal((c, 1, 1))), "param")],
        constants={"two": floats(2.0, shape=[])}, tag="Add", acts=("pre", "p", "body_out"),
        dacts=("pre", "s", "d"))


# ---- PRelu (the slope broadcast to x), Max / Min / Sum / Mean of two inputs ----------------

PRELU = {  # id: (shape of x, shape of the slope, batch)
    "per_channel_c11": ([2, 3, 4, 5], [3, 1, 1], 2),
    "one_slope": ([2, 3, 4, 5], [1], 2),
    "last_dim": ([33, 7], [7], 33),
}


def _prelu(name):
    sx, sa, batch = PRELU[name]
    m = Model(batch, rng_for("prelu", name))
    x = m.operand("act", "x", sx, SYM)
    m.tensors.append(("slope", f32(m.rng.uniform(-0.5, 0.5, sa)), "param"))
    m.nodes.append(node("PRelu", [x, "slope"], ["y"]))
    return m.case(f"binary/PRelu_{name}", "y", sx, tag="PRelu", acts=("x", "y"),
                  dacts=("x", "y"))


VARIADIC_SHAPES = ["act4d_param3d", "act_act_both_ways", "const3d_act4d", "act33_vec7_param",
                   "scalar_param_split"]


def _variadic(op, name):
    ka, sa, kb, sb, batch = SHAPES[name]
    m = Model(batch, rng_for("variadic", op, name))
    a, b = m.operand(ka, "a", sa, SYM), m.operand(kb, "b", sb, SYM)
    m.nodes.append(node(op, [a, b], ["y"]))
    acts = tuple(n for n, k in ((a, ka), (b, kb)) if k == "act")
    return m.case(f"binary/{op}_{name}", "y", list(np.broadcast_shapes(tuple(sa), tuple(sb))),
                  tag=op, acts=("y",) + acts, dacts=("y",) + acts)


def _ties_to_first(op):
    """Max / Min of an integer-valued activation [4, 7] (integer input and weights) and an
    integer parameter [7]: many exact ties, whose whole gradient goes to the first input
    (the documented rule; torch.maximum would give each half): the parameter's gradient is
    the sum of dy where it strictly wins."""
    m = Model(4, rng_for("ties", op))
    m.tensors += [("a.w", f32(m.rng.integers(-1, 2, (F0, 7))), "param"),
                  ("a.c", f32(m.rng.integers(-1, 2, 7)), "param"),
                  ("b", f32(m.rng.integers(-1, 2, 7)), "param")]
    m.nodes.append(node("Gemm", ["input", "a.w", "a.c"], ["a.g"]))
    a = m.reshape("a.g", "a", [4, 7])
    m.nodes.append(node(op, [a, "b"], ["y"]))
    x = f32(m.rng.integers(-1, 2, (4, F0)))

    def check(res, want):
        av, bv, dy = want["acts"]["a"], res["P"]["b"], want["dacts"]["y"]
        wins = bv > av if op == "Max" else bv < av
        assert (av == bv).sum() >= 4  # ties are there
        np.testing.assert_allclose(want["grads"]["b"], np.where(wins, dy, 0).sum(0))
    return m.case(f"binary/{op}_ties_to_first", "y", [4, 7], x=x, tag=op, acts=("a", "y"),
                  dacts=("a", "y"), checks=(check,))


VARIADIC_N = {  # id: ([(kind, shape), ...] of the inputs; a repeated name is one tensor, batch)
    "three_act_param_const": ([("act", [2, 3, 4, 5]), ("param", [3, 1, 5]), ("const", [1])], 2),
    "four_mixed": ([("act", [2, 1, 4, 1]), ("param", [4, 1]), ("act", [2, 3, 1, 5]),
                    ("param", [5])], 2),
    "same_act_thrice": ([("act", [4, 7]), ("same", None), ("same", None)], 4),
}


def _variadic_n(op, name):
    """Max / Min / Sum / Mean of 3 or 4 inputs (a chain of two-input steps on the GPU)."""
    specs, batch = VARIADIC_N[name]
    m = Model(batch, rng_for("variadic_n", op, name))
    names = [m.operand(k, f"v{i}", s, SYM) if k != "same" else "v0"
             for i, (k, s) in enumerate(specs)]
    m.nodes.append(node(op, names, ["y"]))
    out = list(np.broadcast_shapes(*[tuple(s or specs[0][1]) for _, s in specs]))
    acts = tuple(sorted({n for n, (k, _) in zip(names, specs) if k in ("act", "same")}))
    return m.case(f"binary/{op}_{name}", "y", out, tag=op, acts=("y",) + acts,
                  dacts=("y",) + acts)


def _ties_to_first_of_three(op):
    """Max / Min of an integer activation [4, 7] and integer parameters [7] and [1, 7]: the
    gradient of each position goes to the FIRST input holding the extreme."""
    m = Model(4, rng_for("ties3", op))
    m.tensors += [("a.w", f32(m.rng.integers(-1, 2, (F0, 7))), "param"),
                  ("a.c", f32(m.rng.integers(-1, 2, 7)), "param"),
                  ("b", f32(m.rng.integers(-1, 2, 7)), "param"),
                  ("c", f32(m.rng.integers(-1, 2, (1, 7))), "param")]
    m.nodes.append(node("Gemm", ["input", "a.w", "a.c"], ["a.g"]))
    a = m.reshape("a.g", "a", [4, 7])
    m.nodes.append(node(op, [a, "b", "c"], ["y"]))
    x = f32(m.rng.integers(-1, 2, (4, F0)))

    def check(res, want):
        av, bv, cv, dy = want["acts"]["a"], res["P"]["b"], res["P"]["c"], want["dacts"]["y"]
        beats = (lambda u, v: u > v) if op == "Max" else (lambda u, v: u < v)
        b_wins = beats(bv, av) & ~beats(cv, bv)
        c_wins = beats(cv, av) & beats(cv, bv)
        # ties of the first input with each later one, and between the later two
        assert (av == bv).sum() >= 2 and (av == cv).sum() >= 2
        assert (b_wins & (bv == cv)).sum() >= 1
        np.testing.assert_allclose(want["grads"]["b"], np.where(b_wins, dy, 0).sum(0))
        np.testing.assert_allclose(want["grads"]["c"], np.where(c_wins, dy, 0).sum(0)[None])
    return m.case(f"binary/{op}_ties_to_first_of_three", "y", [4, 7], x=x, tag=op,
                  acts=("a", "y"), dacts=("a", "y"), checks=(check,))


BROADCAST = [_broadcast(op, name) for name in SHAPES for op in OPS]
CASES = BROADCAST + \
    [_pow_constant_exponent(e, b) for e, b in [(2.0, "sym"), (3.0, "sym"), (-1.0, "away"),
                                               (-2.0, "away"), (0.0, "sym"), (1.0, "sym"),
                                               (0.5, "pos"), (1.5, "pos"), (-0.5, "pos")]] + \
    [_pow_int64_exponent_per_column(), _pow_constant_base(), _pow_zero_base(),
     _same_tensor_twice(), _input_over_255(), _broadcast_residual()] + \
    [_prelu(name) for name in PRELU] + \
    [_variadic(op, name) for op in ("Max", "Min", "Sum", "Mean") for name in VARIADIC_SHAPES] + \
    [_ties_to_first(op) for op in ("Max", "Min")] + \
    [_variadic_n(op, name) for op in ("Max", "Min", "Sum", "Mean") for name in VARIADIC_N] + \
    [_ties_to_first_of_three(op) for op in ("Max", "Min")]

"""Unary elementwise ops, forward and backward (shaders/unary.wgsl): LeakyRelu, Sigmoid, Tanh,
Gelu, Erf, Exp, Log, Sqrt, Neg, Abs, Reciprocal, Softplus, Softsign, Elu, Selu, Celu, Mish,
HardSigmoid, HardSwish, Clip.

Forward: y = f(x) elementwise, float32, any shape (ONNX operator definitions, attribute
defaults of the ONNX spec: LeakyRelu alpha 0.01, Elu alpha 1.0, Celu alpha 1.0, Selu alpha
1.6733 gamma 1.0507 (float32; gamma in the uniform's beta), HardSigmoid alpha 0.2 beta 0.5,
Gelu approximate "none" (erf form) or "tanh" (opset 20)). Backward: dx = dy * f'(x), the
formulas of PyTorch's autograd (tools/autograd/derivatives.yaml), from the saved input, or from
the saved output for Sigmoid, Tanh, Exp, Sqrt and Reciprocal when no in-place ReLU overwrote it.

Clip: min / max are attributes before opset 11 and optional inputs from opset 11; a bound that
is a constant of the model description is baked into the uniform, any other (a weight, an
activation) is read by the kernel from its buffer and gets torch.clamp's gradient
(``clamp_backward_min_max``: dy summed where x was clipped to it). dx = dy where min <= x <= max.
"""

import math

from ..backends import shaders
from ..backends.base import groups_1d
from .gemm import channel_sum
from ..errors import GraphError
from . import card

TYPES = ("LeakyRelu", "Sigmoid", "Tanh", "Gelu", "Erf", "Exp", "Log", "Sqrt", "Neg", "Abs",
         "Reciprocal", "Softplus", "Softsign", "Elu", "HardSigmoid", "HardSwish", "Clip", "Selu",
         "Celu", "Mish")
ATTRS = {**{op: {} for op in TYPES},
         "LeakyRelu": {"alpha": 0.01}, "Elu": {"alpha": 1.0}, "Celu": {"alpha": 1.0},
         "Selu": {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
         "HardSigmoid": {"alpha": 0.2, "beta": 0.5}, "Gelu": {"approximate": "none"}}

# op codes of shaders/unary.wgsl (Params.op); Gelu is Gelu (erf form) or GeluTanh (tanh form)
CODES = {"LeakyRelu": 0, "Sigmoid": 1, "Tanh": 2, "Gelu": 3, "GeluTanh": 4, "Erf": 5, "Exp": 6,
         "Log": 7, "Sqrt": 8, "Neg": 9, "Abs": 10, "Reciprocal": 11, "Softplus": 12, "Elu": 13,
         "HardSigmoid": 14, "HardSwish": 15, "Clip": 16, "Softsign": 17, "Selu": 18, "Celu": 19,
         "Mish": 20}
shaders.define("unary_ops", {f"UNARY_{op.upper()}": code for op, code in CODES.items()},
               "ops/unary.py CODES: the values of unary.wgsl's Params.op")

# backward reads the saved output instead of recomputing f(x)
_FROM_OUTPUT = ("Sigmoid", "Tanh", "Exp", "Sqrt", "Reciprocal")

FLT_MAX = 3.4028234663852886e38


def _code(node) -> int:
    """The shader op code; raises GraphError for an unknown Gelu ``approximate``."""
    op = node["op_type"]
    if op == "Gelu":
        approx = card.read(node, ATTRS)["approximate"]
        if isinstance(approx, bytes):
            approx = approx.decode()
        if approx not in ("none", "tanh"):
            raise GraphError(f"node {node['name']} (Gelu): approximate={approx!r} is not "
                             "'none' or 'tanh'")
        return CODES["Gelu" if approx == "none" else "GeluTanh"]
    return CODES[op]


def _alpha_beta(node):
    """(alpha, beta) attributes with the card's ONNX defaults (0 where the op has none); Selu's
    gamma is the beta. GraphError for Celu's alpha 0 (x / alpha)."""
    a, spec = card.read(node, ATTRS), ATTRS[node["op_type"]]
    keys = ("alpha", "gamma") if node["op_type"] == "Selu" else ("alpha", "beta")
    if node["op_type"] == "Celu" and float(a["alpha"]) == 0.0:
        raise GraphError(f"node {node['name']} (Celu): alpha 0 divides by zero")
    return tuple(float(a[k]) if k in spec else 0.0 for k in keys)


def infer(node, ins, consts):
    """Output shape = input shape. Clip's min / max must hold one value each (ONNX: scalars)."""
    _code(node)
    _alpha_beta(node)
    if node["op_type"] == "Clip":
        for k in (1, 2):
            if len(ins) > k and ins[k] is not None and math.prod(ins[k]) != 1:
                raise GraphError(f"node {node['name']} (Clip): {('min', 'max')[k - 1]} has shape "
                                 f"{ins[k]}, not a scalar")
    return [list(ins[0])]


def clip_constants(node, consts) -> tuple | None:
    """(lo, hi) of a Clip whose given bounds are all constants of the description (an absent
    bound: -FLT_MAX / FLT_MAX), else None."""
    a = node.get("attrs", {})
    lo, hi = float(a.get("min", -FLT_MAX)), float(a.get("max", FLT_MAX))
    for k in (1, 2):
        name = node["inputs"][k] if len(node["inputs"]) > k else ""
        if not name:
            continue
        c = consts.get(name)
        if c is None or not c.get("values"):
            return None
        v = float(c["values"][0])
        lo, hi = (v, hi) if k == 1 else (lo, v)
    return lo, hi


def _fused(b, node) -> bool:
    """Whether the BatchNormalization before this Clip runs it (``fusion.clips_after``)."""
    return node["op_type"] == "Clip" and any(
        c is node for c, _, _ in b.plan.clip_fused.values())


def _grad_fused(b, node) -> bool:
    """Whether the Gemm after this Gelu runs its backward from the slope its training forward
    keeps (``fusion.gelu_grads``)."""
    return node["op_type"] == "Gelu" and any(
        g is node for g, _ in b.plan.gelu_grad_fused.values())


def _clip_bounds(b, node, ins):
    """(lo, hi, flags, lo_tensor, hi_tensor): constant bounds as floats; a non-constant bound
    as its tensor (flags bit 1 min, bit 2 max); bits 3 / 4 say min / max is given at all."""
    a = node.get("attrs", {})
    lo, hi = float(a.get("min", -FLT_MAX)), float(a.get("max", FLT_MAX))
    flags, tensors = 0, [None, None]
    if "min" in a:
        flags |= 8
    if "max" in a:
        flags |= 16
    consts = b.plan.graph.constants
    for k in (1, 2):
        name = node["inputs"][k] if len(node["inputs"]) > k else ""
        if not name:
            continue
        flags |= 8 << (k - 1)
        c = consts.get(name)
        if c is not None and c.get("values"):
            v = float(c["values"][0])
            lo, hi = (v, hi) if k == 1 else (lo, v)
        else:
            flags |= 2 << (k - 1)
            tensors[k - 1] = ins[k]
    return lo, hi, flags, tensors[0], tensors[1]


def _params(node, n, flags=0, aux=0, lo=-FLT_MAX, hi=FLT_MAX) -> dict:
    alpha, beta = _alpha_beta(node)
    return dict(n=n, op=_code(node), flags=flags, aux=aux, alpha=alpha, beta=beta, lo=lo, hi=hi)


def _output_intact(b, node, out) -> bool:
    """False when an in-place Relu overwrites this node's output buffer (through views too)."""
    for name, t in b.plan.acts.items():
        if t.buf is out.buf and name != node["outputs"][0]:
            prod = b.plan.graph.producer.get(name)
            if prod is not None and prod["op_type"] == "Relu":
                return False
    return True


async def forward(b, node, ins, outs, train):
    """y = f(x): one dispatch over the ``numel`` elements (any shape, float32); nothing for a
    Clip its BatchNormalization applies. A Gelu whose backward the Gemm after it takes
    (``fusion.gelu_grads``) also leaves, when training, its slope GELU'(x) in x's buffer
    (gelu_slope.wgsl): x is read by this Gelu alone, and that Gemm's dA kernel
    multiplies by the slope; the evaluation forward leaves x intact (probes read it)."""
    if _fused(b, node):
        return
    n = outs[0].numel
    if train and _grad_fused(b, node):
        await b.kernel("gelu_slope", "gelu_forward_slope", b.elementwise_groups(n),
                       params=dict(n=n), slope=ins[0], out=outs[0])
        return
    lo_t = hi_t = None
    if node["op_type"] == "Clip":
        lo, hi, flags, lo_t, hi_t = _clip_bounds(b, node, ins)
        params = _params(node, n, flags, 0, lo, hi)
    else:
        params = _params(node, n)
    await b.kernel("unary", "unary_forward", b.elementwise_groups(n), params=params,
                   constants={"OP": params["op"]}, x=ins[0], lo_t=lo_t, hi_t=hi_t, out=outs[0])


async def backward(b, node, ins, outs, gins, gouts):
    """gins[0] = dy * f'(x); for Clip also the gradients of tensor bounds (torch.clamp).
    Nothing for a Clip whose BatchNormalization's backward reads its output gradient, nor for
    a Gelu whose consumer's (a Gemm's) input gradient kernel applies its slope."""
    if _fused(b, node) or _grad_fused(b, node):
        return
    n = outs[0].numel
    op = node["op_type"]
    lo, hi, flags, lo_t, hi_t = (-FLT_MAX, FLT_MAX, 0, None, None)
    if op == "Clip":
        lo, hi, flags, lo_t, hi_t = _clip_bounds(b, node, ins)
    if gins[0] is not None:
        use_y = op in _FROM_OUTPUT and _output_intact(b, node, outs[0])
        await b.kernel("unary", "unary_backward", b.elementwise_groups(n),
                       params=_params(node, n, flags | int(use_y), 0, lo, hi),
                       constants={"OP": _code(node)}, x=ins[0],
                       y=outs[0] if use_y else None, dy=gouts[0], lo_t=lo_t, hi_t=hi_t,
                       out=gins[0])
    if op != "Clip":
        return
    for k in (1, 2):
        if len(gins) > k and gins[k] is not None:
            part = b.scratch(max(n, 1))
            await b.kernel("unary", "clip_bound_grad", groups_1d(n),
                           params=_params(node, n, flags, k - 1, lo, hi), x=ins[0],
                           dy=gouts[0], lo_t=lo_t, hi_t=hi_t, out=part)
            await channel_sum(b, part, gins[k], outer=1, channels=1, inner=n)

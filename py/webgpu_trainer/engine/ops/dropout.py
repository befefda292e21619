"""Inverted Dropout (shaders/dropout.wgsl, masks from Philox: shaders/lib/philox.wgsl); training
only, identity (a copy) in eval mode. One thread per four elements."""

from ..backends.base import groups_1d

TYPES = ("Dropout",)
ATTRS = {"Dropout": {"ratio": 0.5, "training_mode": 0}}
TAKES_RELU_GRAD = True  # a preceding in-place Relu's backward is masked into the dx kernel


def infer(node, ins, consts):
    """Output and (unmaterialised) mask have the input's shape."""
    return [list(ins[0]), list(ins[0])]


def _ratio(b, node) -> float:
    ratio = node["attrs"].get("ratio", 0.5)  # opset < 12 attribute
    if len(node["inputs"]) > 1 and node["inputs"][1]:
        ratio = float(b.constant(node["inputs"][1], default=0.5))
    return ratio


async def _apply(b, params, x, y, m=None):
    """One dispatch of dropout.wgsl: ``apply4`` (16-byte loads and stores) on GPU adapters
    when n is a multiple of 4 (``Builder.DROPOUT_VEC4``), else ``apply``; the same floats."""
    n = params["n"]
    groups = groups_1d((n + 3) // 4)
    if b.tiled and n % 4 == 0 and getattr(b, "DROPOUT_VEC4", True):
        await b.kernel("dropout", "apply4", groups, params=params, st=b.step, x4=x, y4=y, m4=m)
    else:
        await b.kernel("dropout", "apply", groups, params=params, st=b.step, x=x, y=y, m=m)


async def forward(b, node, ins, outs, train):
    n = ins[0].numel
    ratio = _ratio(b, node) if train else 0.0
    scale = 1.0 / (1.0 - ratio) if ratio < 1.0 else 0.0
    params = dict(n=n, salt=b.salt(node), ratio=ratio, scale=scale, relu=0)
    await _apply(b, params, ins[0], outs[0])


async def backward(b, node, ins, outs, gins, gouts):
    if gins[0] is None:
        return
    n = ins[0].numel
    ratio = _ratio(b, node)
    scale = 1.0 / (1.0 - ratio) if ratio < 1.0 else 0.0
    relu = int("backward" in b.fused(node))  # dx = 0 where x <= 0: a ReLU before, fused
    params = dict(n=n, salt=b.salt(node), ratio=ratio, scale=scale, relu=relu)
    await _apply(b, params, gouts[0], gins[0], ins[0] if relu else None)

"""LogSoftmax on any axis and the NLL loss with batch metrics (shaders/loss.wgsl)."""

from ..backends.base import groups_1d, pack_params

TYPES = ("LogSoftmax",)


def infer(node, ins, consts):
    """Output shape = input shape."""
    return [list(ins[0])]


def _view(shape, axis):
    axis %= len(shape)
    outer = 1
    for d in shape[:axis]:
        outer *= d
    inner = 1
    for d in shape[axis + 1:]:
        inner *= d
    return outer, shape[axis], inner


async def forward(b, node, ins, outs, train):
    """y = log_softmax(x, axis); ONNX's default axis is -1 from opset 13 (1 before)."""
    outer, c, inner = _view(ins[0].shape, node["attrs"].get("axis", -1))
    await b.kernel("loss", "log_softmax_forward", pack_params(outer, c, inner),
                   [b.step, ins[0], b.dummy, outs[0], b.dummy_u32, b.sink],
                   groups_1d(outer * inner))


async def backward(b, node, ins, outs, gins, gouts):
    """dx = dy - exp(y) * sum(dy) along the axis."""
    if gins[0] is None:
        return
    outer, c, inner = _view(ins[0].shape, node["attrs"].get("axis", -1))
    await b.kernel("loss", "log_softmax_backward", pack_params(outer, c, inner),
                   [b.step, outs[0], gouts[0], gins[0], b.dummy_u32, b.sink],
                   groups_1d(outer * inner))


async def nll(b, logp, labels, dlogp, metrics):
    """NLLLoss(mean) of log-probabilities [B, C]: writes dlogp and metrics[slot] = (loss, acc)."""
    batch, classes = logp.shape
    await b.kernel("loss", "nll", pack_params(batch, classes, 1),
                   [b.step, logp, b.dummy, dlogp, labels, metrics], (1, 1, 1))

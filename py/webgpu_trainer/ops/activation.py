"""ReLU forward and backward, in place (shaders/elementwise.wgsl)."""

from ..backends.base import groups_1d, pack_params


async def forward(b, node, ins, outs, train):
    """y = max(x, 0) on the aliased buffer: the plan gives ``outs[0]`` the buffer of ``ins[0]``."""
    n = outs[0].numel
    if outs[0].buf is not ins[0].buf:
        raise AssertionError(f"{node['name']}: ReLU runs in place")
    await b.kernel("elementwise", "relu_forward", pack_params(n), [outs[0], b.dummy],
                   groups_1d(n))


async def backward(b, node, ins, outs, gins, gouts):
    """dx = dy * (y > 0), in place on the gradient buffer (``gins[0]`` aliases ``gouts[0]``)."""
    if gins[0] is None:
        return
    n = outs[0].numel
    await b.kernel("elementwise", "relu_backward", pack_params(n), [gouts[0], outs[0]],
                   groups_1d(n))

"""ReLU forward and backward (shaders/elementwise.wgsl): in place when the plan aliased the
output to the input (the input has no other consumer), out of place otherwise."""

TYPES = ("Relu",)
ATTRS = {"Relu": {}}


def infer(node, ins, consts):
    """Output shape = input shape."""
    return [list(ins[0])]


async def forward(b, node, ins, outs, train):
    """y = max(x, 0); nothing to do when the producing Conv applied it (``b.fused``)."""
    if ins[0].buf is outs[0].buf and "forward" in b.fused(node):
        return
    n = outs[0].numel
    if outs[0].buf is ins[0].buf:
        await b.kernel("elementwise", "relu_forward", b.elementwise_groups(n),
                       params={"n": n, "mask": 0}, a=outs[0])
    else:
        await b.kernel("elementwise", "relu_forward_to", b.elementwise_groups(n),
                       params={"n": n, "mask": 0}, a=outs[0], b=ins[0])


async def backward(b, node, ins, outs, gins, gouts):
    """dx = dy * (y > 0); in place when ``gins[0]`` aliases ``gouts[0]``."""
    if gins[0] is None or "backward" in b.fused(node):
        return  # (or the consumer's backward / the sum of its uses' gradients masked it: plan)
    n = outs[0].numel
    if gins[0].buf is gouts[0].buf:
        await b.kernel("elementwise", "relu_backward", b.elementwise_groups(n),
                       params={"n": n, "mask": 0}, a=gouts[0], b=outs[0])
    else:
        await b.kernel("elementwise", "relu_backward_to", b.elementwise_groups(n),
                       params={"n": n, "mask": 0}, a=gins[0], b=gouts[0], c=outs[0])

"""BatchNormalization (1-D and 2-D) forward and backward (shaders/batchnorm.wgsl).

Training mode (the default for training, whatever the ONNX ``training_mode``) normalises with
batch statistics and updates running_mean / running_var in place as PyTorch does; eval mode uses
the running statistics. gamma, beta and the running statistics are addressed as element offsets
into the flat parameter buffer P (their gradients into G).
"""

from ..backends.base import groups_1d, pack_params


def _params(b, node, x, ins):
    shape = x.shape
    c = shape[1]
    inner = 1
    for d in shape[2:]:
        inner *= d
    a = node["attrs"]
    offs = [b.offset_of(t) for t in ins[1:5]]
    return c, pack_params(shape[0], c, inner, *offs, 0, float(a.get("epsilon", 1e-5)),
                          float(a.get("momentum", 0.9)), 0, 0)


async def forward(b, node, ins, outs, train):
    x = ins[0]
    c, params = _params(b, node, x, ins)
    save = b.save(node, 2 * c)
    binds = [x, b.dummy, b.P, save, outs[0], b.sink]
    if train:
        await b.kernel("batchnorm", "stats_train", params, binds, (c, 1, 1))
    else:
        await b.kernel("batchnorm", "stats_eval", params, binds, groups_1d(c))
    await b.kernel("batchnorm", "normalize", params, binds, groups_1d(x.numel))


async def backward(b, node, ins, outs, gins, gouts):
    x = ins[0]
    c, params = _params(b, node, x, ins)
    save = b.save(node, 2 * c)
    binds = [x, gouts[0], b.P, save, gins[0] or b.sink, b.G]
    await b.kernel("batchnorm", "backward_stats", params, binds, (c, 1, 1))
    if gins[0] is not None:
        await b.kernel("batchnorm", "backward_input", params, binds, groups_1d(x.numel))

"""BatchNormalization (1-D and 2-D) forward and backward (shaders/batchnorm.wgsl).

Training mode (the default for training, whatever the ONNX ``training_mode``) normalises with
batch statistics and updates running_mean / running_var in place as PyTorch does; eval mode uses
the running statistics. gamma, beta and the running statistics are addressed as element offsets
into the flat parameter buffer P (their gradients into G).
"""

from ..backends.base import groups_1d, groups_per_channel
from . import card

TYPES = ("BatchNormalization",)
ATTRS = {"BatchNormalization": {"epsilon": 1e-5, "momentum": 0.9, "training_mode": 0}}
TAKES_RELU_GRAD = True  # a preceding in-place Relu's backward is masked into the dx kernel
QUADS = True  # CPU adapters: normalize4 / backward_input4 where 4 divides the inner size (A/B)
FUSES_RELU_FORWARD = True  # a following in-place Relu is applied by normalize / forward_fused
FUSES_CLIP = True  # the Clip that alone reads the output runs here both ways (fusion.clips_after)


def normalize(node, opset, shapes) -> list:
    """Drops the pre-opset-7 ``spatial`` / ``is_test``; before opset 14 ``training_mode`` is
    whether the node has the running-statistics outputs. Never a problem."""
    attrs = node["attrs"]
    attrs.pop("spatial", None)
    attrs.pop("is_test", None)
    if opset < 14:
        attrs["training_mode"] = int(bool([o for o in node["outputs"][1:] if o]))
    return []


def infer(node, ins, consts):
    """Y: the input's shape; running_mean / running_var outputs (training mode): [C]."""
    return [list(ins[0]), [ins[0][1]], [ins[0][1]]]


def init(node, graph):
    """PyTorch's default init (nn.BatchNorm reset_parameters / reset_running_stats): scale 1,
    bias 0, running_mean 0, running_var 1."""
    return [(name, "fill", value) for name, value in zip(node["inputs"][1:5], (1.0, 0.0, 0.0, 1.0))
            if name in graph.tensors]


# The CPU adapters' blocked sums (shaders/lib/bn_blocks.wgsl): at most about this many
# blocks a channel (each at least ``b.BN_BLOCK`` elements), so that the finish, one thread a
# channel, adds at most ~2 * MAX_PARTS partial sums.
MAX_PARTS = 1024


def blocks(outer: int, inner: int, size: int) -> tuple:
    """(bw, bg, bpp, parts): a channel's outer x inner elements in blocks of about
    max(``size``, outer * inner / MAX_PARTS) elements, each ``bg`` whole planes (inner <
    that) or a ``bw``-wide piece of one plane (``bpp`` equal pieces a plane).

    >>> blocks(64, 676, 64)    # SeedNet's BatchNorm2d at batch 64: 26 x 26 planes
    (62, 1, 11, 704)
    >>> blocks(4, 1, 64)       # BatchNorm1d at batch 4: one block of 4 planes
    (1, 64, 1, 1)
    """
    size = max(size, -(-outer * inner // MAX_PARTS))
    if inner >= size:
        bpp = -(-inner // size)
        bw, bg = -(-inner // bpp), 1
    else:
        bw, bg, bpp = inner, size // inner, 1
    return bw, bg, bpp, -(-outer // bg) * bpp


def _params(b, node, x, ins, mask=0, want_dx=0, relu=0):
    """(channels, parts, uniform fields) for this layer; ``mask``: backward_input zeroes dx
    where x <= 0 (a ReLU's backward fused, fusion.relu_grads); ``relu``: the forward
    writes max(y, 0) (a following in-place ReLU fused, ``b.fused``). The block sums
    (``_blocked``): ``blocks``; else ``parts`` workgroups a channel (``b.reduce_parts``)."""
    shape = x.shape
    c = shape[1]
    inner = 1
    for d in shape[2:]:
        inner *= d
    if _blocked(b, shape[0] * inner):
        bw, bg, bpp, parts = blocks(shape[0], inner, b.BN_BLOCK)
    else:
        bw, bg, bpp, parts = 0, 0, 0, b.reduce_parts(shape[0] * inner)
    a = card.read(node, ATTRS)
    offs = [b.offset_of(t) for t in ins[1:5]]
    return c, parts, dict(outer=shape[0], C=c, inner=inner, gamma=offs[0], beta=offs[1],
                          rmean=offs[2], rvar=offs[3], parts=parts,
                          eps=float(a["epsilon"]), momentum=float(a["momentum"]), mask=mask,
                          want_dx=want_dx, relu=relu, bw=bw, bg=bg, bpp=bpp,
                          **_clip(b, node))


def _clip(b, node) -> dict:
    """The uniform's clip fields: the fused Clip's bounds (``fusion.clips_after``), if any."""
    fused = b.plan.clip_fused.get(node["name"])
    if fused is None:
        return dict(clip=0, lo=0.0, hi=0.0)
    return dict(clip=1, lo=fused[1], hi=fused[2])


def _blocked(b, elements: int) -> bool:
    """The barrier-free block sums (CPU adapters, at most ``b.BN_BLOCKED_MAX`` elements a
    channel) rather than the workgroup kernels."""
    return not b.tiled and elements <= b.BN_BLOCKED_MAX


def _one_pass(b) -> bool:
    """The batch statistics by stats_parts -> stats_finish (GPU adapters, BN_STATS_PARTS)."""
    return b.tiled and b.BN_STATS_PARTS


def _part(b, node, c, parts, blocked):
    """The partial sums' buffer: per layer for the workgroup kernels ([2, C, parts]: sum_x's
    sums, then sum_sq's squares and deviations; [C, parts, 2]: the backward's dy sums;
    [C, parts, 4]: stats_parts'); for the block sums (up to ~2 * MAX_PARTS a channel) the
    plan's shared scratch, which the next dispatch reads."""
    if not blocked:  # x4: stats_parts' (GPU adapters)
        return b.save(node, (4 if _one_pass(b) else 2) * c * parts, "parts")
    return b.temp(2 * c * parts)


async def forward(b, node, ins, outs, train):
    x = ins[0]
    c, parts, params = _params(b, node, x, ins, relu=int("forward" in b.fused(node)))
    save = b.save(node, 2 * c)
    blocked = _blocked(b, x.numel // c)
    binds = dict(params=params, x=x, P=b.P, save=save, out=outs[0],
                 part=_part(b, node, c, parts, blocked), aux=_clip_out(b, node))
    if train and parts == 1 and b.tiled:  # GPUs, small channels: one dispatch
        await b.kernel("batchnorm", "forward_fused", groups_per_channel(c), **binds)
        return
    if train and blocked:  # CPU adapters: no barriers
        await b.kernel("batchnorm", "block_stats", groups_1d(c * parts), **binds)
        await b.kernel("batchnorm", "block_finish", groups_1d(c), **binds)
    elif train and _one_pass(b):  # GPUs: one pass over x
        await b.kernel("batchnorm", "stats_parts", groups_per_channel(c, parts), **binds)
        await b.kernel("batchnorm", "stats_finish", groups_1d(c), **binds)
    elif train:
        await b.kernel("batchnorm", "sum_x", groups_per_channel(c, parts), **binds)
        await b.kernel("batchnorm", "mean_finish", groups_1d(c), **binds)
        await b.kernel("batchnorm", "sum_sq", groups_per_channel(c, parts), **binds)
        await b.kernel("batchnorm", "var_finish", groups_1d(c), **binds)
    else:
        await b.kernel("batchnorm", "stats_eval", groups_1d(c), **binds)
    await b.kernel("batchnorm", *_elementwise(b, "normalize", x), **binds)


async def backward(b, node, ins, outs, gins, gouts):
    x = ins[0]
    c, parts, params = _params(b, node, x, ins, int("backward" in b.fused(node)),
                               int(gins[0] is not None))
    save = b.save(node, 2 * c)
    blocked = _blocked(b, x.numel // c)
    dy, aux = gouts[0], None
    if node["name"] in b.plan.clip_fused:  # the Clip's output gradient, masked by y
        dy, aux = b.plan.clip_grad(node), outs[0]
    binds = dict(params=params, x=x, dy=dy, P=b.P, save=save, G=b.G,
                 part=_part(b, node, c, parts, blocked), out=gins[0], aux=aux)
    if parts == 1 and b.tiled:  # GPUs, small channels: one dispatch
        await b.kernel("batchnorm", "backward_fused", groups_per_channel(c), **binds)
        return
    if not blocked:
        await b.kernel("batchnorm", "sum_dy", groups_per_channel(c, parts), **binds)
        await b.kernel("batchnorm", "dy_finish", groups_1d(c), **binds)
    else:  # CPU adapters: no barriers
        await b.kernel("batchnorm", "block_dy", groups_1d(c * parts), **binds)
        await b.kernel("batchnorm", "dy_block_finish", groups_1d(c), **binds)
    if gins[0] is not None:
        await b.kernel("batchnorm", *_elementwise(b, "backward_input", x), **binds)


def _clip_out(b, node):
    """The fused Clip's output (``fusion.clips_after``), or None."""
    fused = b.plan.clip_fused.get(node["name"])
    return None if fused is None else b.plan.acts[fused[0]["outputs"][0]]


def _elementwise(b, entry, x):
    """(entry, workgroups) of normalize / backward_input: on CPU adapters a thread per 4
    neighbouring elements of a channel (``normalize4``, ``backward_input4``; lib/bn_blocks) when
    4 divides the inner size, else the grid-stride kernel."""
    inner = x.numel // (x.shape[0] * x.shape[1])
    if not b.tiled and QUADS and inner % 4 == 0:
        return entry + "4", groups_1d(x.numel // 4)
    return entry, b.elementwise_groups(x.numel)

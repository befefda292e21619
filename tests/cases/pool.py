"""MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool (ops/pool.py, shaders/pool.wgsl):
input -> Conv 1x1 -> pool -> Flatten -> Gemm -> LogSoftmax, so the pool's input gradient flows
into the Conv; kernels, strides, asymmetric pads, dilations, ceil_mode, count_include_pad,
auto_pad, ties (the gradient to the first maximum)."""

import numpy as np

from cases import case, window1d
from cases.blocks import chain
from conftest import f32, head, make_graph, node, rng_for
from webgpu_trainer.cpu import pool as cpool

# id: (C, H, W, (kh, kw), pads [t, l, b, r], strides, dilations, ceil_mode)
MAX = {
    "k2_s2": (3, 8, 8, (2, 2), [0, 0, 0, 0], [2, 2], [1, 1], 0),
    "k3_s1_pad1_overlap": (2, 7, 7, (3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 0),
    "k3_s2_overlap": (2, 9, 7, (3, 3), [0, 0, 0, 0], [2, 2], [1, 1], 0),
    "k2_s2_ceil": (2, 7, 7, (2, 2), [0, 0, 0, 0], [2, 2], [1, 1], 1),
    "k3_s2_ceil_pad": (3, 8, 9, (3, 3), [1, 1, 1, 1], [2, 2], [1, 1], 1),
    "ceil_drops_last": (2, 5, 5, (2, 2), [1, 1, 1, 1], [2, 2], [1, 1], 1),
    "asym_pads": (3, 7, 9, (3, 2), [1, 0, 0, 1], [2, 1], [1, 1], 0),
    "asym_pads_ceil": (2, 6, 7, (3, 3), [0, 1, 2, 0], [2, 2], [1, 1], 1),
    "dil2": (2, 9, 9, (3, 3), [2, 2, 2, 2], [1, 1], [2, 2], 0),
    "dil2_s2_ceil_asym": (2, 8, 9, (2, 3), [1, 0, 0, 1], [2, 2], [2, 1], 1),
    "stride_gt_kernel": (2, 7, 7, (2, 2), [0, 0, 0, 0], [3, 3], [1, 1], 0),
    "width33": (1, 1, 33, (1, 3), [0, 1, 0, 1], [1, 2], [1, 1], 0),
    "c7_k2_s1": (7, 5, 6, (2, 2), [0, 0, 0, 0], [1, 1], [1, 1], 1),
    "one_pixel": (3, 1, 1, (1, 1), [0, 0, 0, 0], [1, 1], [1, 1], 0),
    "one_row_pad": (2, 1, 7, (3, 3), [1, 1, 1, 1], [1, 2], [1, 1], 0),
}

# id: (C, H, W, (kh, kw), pads, strides, ceil_mode, count_include_pad)
AVG = {
    "k2_s2": (3, 8, 8, (2, 2), [0, 0, 0, 0], [2, 2], 0, 0),
    "k3_s1_pad_excl": (2, 7, 7, (3, 3), [1, 1, 1, 1], [1, 1], 0, 0),
    "k3_s1_pad_incl": (2, 7, 7, (3, 3), [1, 1, 1, 1], [1, 1], 0, 1),
    "k3_s2_ceil_incl": (2, 8, 7, (3, 3), [1, 1, 1, 1], [2, 2], 1, 1),
    "k3_s2_ceil_excl": (2, 8, 7, (3, 3), [1, 1, 1, 1], [2, 2], 1, 0),
    "ceil_drops_last_incl": (2, 5, 5, (2, 2), [1, 1, 1, 1], [2, 2], 1, 1),
    "k2_s2_ceil_nopad_incl": (2, 7, 9, (2, 2), [0, 0, 0, 0], [2, 2], 1, 1),
    "asym_incl": (3, 7, 9, (2, 3), [0, 1, 1, 0], [1, 2], 0, 1),
    "asym_ceil_excl": (2, 9, 6, (3, 2), [1, 0, 0, 1], [2, 2], 1, 0),
    "asym_ceil_incl": (2, 6, 7, (3, 3), [0, 1, 2, 0], [2, 2], 1, 1),
    "width33": (1, 1, 33, (1, 3), [0, 1, 0, 1], [1, 1], 0, 0),
    "c7_k3_s3": (7, 7, 7, (3, 3), [0, 0, 0, 0], [3, 3], 1, 0),
    "one_pixel_pad_incl": (3, 1, 1, (3, 3), [1, 1, 1, 1], [1, 1], 0, 1),
}

GLOBAL = {"c3_7x7": (3, 7, 7), "c2_1x33": (2, 1, 33), "c33_2x3": (33, 2, 3),
          "c1_1x1": (1, 1, 1)}


def out_hw(pool_node, c, h, w, batch):
    from webgpu_trainer.engine.graph import Graph
    graph = make_graph([dict(pool_node, inputs=["input"])], [], [("input", ["N", c, h, w])],
                       [("pool_out", ["N"])])[0]
    return Graph(graph).shapes(batch)["pool_out"][2:]


def pool_case(id, tag, rng, c, h, w, pool_node, x=None, relu=False, identity=False, batch=2,
              train=True, **opts):
    """input -> Conv 1x1 (-> Relu) -> pool -> Flatten -> Gemm -> LogSoftmax; the input has
    distinct values unless ``x`` (an array, or a function of ``rng`` drawn after the model)
    (no ties in any window, up to float32 rounding of the Conv);
    ``identity``: the Conv is the identity, so ties in the input survive it."""
    classes = 5
    ohw = out_hw(pool_node, c, h, w, batch)
    if identity:
        pre_w, pre_b = f32(np.eye(c).reshape(c, c, 1, 1)), f32(np.zeros(c))
    else:
        pre_w = f32(rng.standard_normal((c, c, 1, 1)) / np.sqrt(c) + np.eye(c).reshape(c, c, 1, 1))
        pre_b = f32(rng.standard_normal(c) * 0.1)
    nodes = [node("Conv", ["input", "pre.w", "pre.b"], ["pre_out"], kernel_shape=[1, 1],
                  pads=[0, 0, 0, 0], strides=[1, 1], dilations=[1, 1], group=1)]
    src = "pre_out"
    if relu:
        nodes.append(node("Relu", ["pre_out"], ["relu_out"]))
        src = "relu_out"
    pool_node = dict(pool_node, inputs=[src])
    nodes += [pool_node, node("Flatten", ["pool_out"], ["flat"], axis=1)]
    hn, ht = head("flat", c * ohw[0] * ohw[1], classes, rng)
    tensors = [("pre.w", pre_w, "param"), ("pre.b", pre_b, "param")] + ht
    if callable(x):  # drawn after the model
        x = x(rng)
    if x is None:
        x = f32(rng.permutation(batch * c * h * w).reshape(batch, c, h, w)
                / (batch * c * h * w) * 4 - 2)
    labels = rng.integers(0, classes, batch)
    # an in-place ReLU shares its gradient buffer with pre_out: compare d pre_out only
    if train:
        opts.setdefault("acts", ("relu_out" if relu else "pre_out", "pool_out"))
        opts.setdefault("dacts", ("pre_out", "pool_out"))
    return case(f"pool/{id}", nodes + hn, tensors, x, labels, tag=tag, train=train, **opts)


def _maxpool(name):
    c, h, w, k, pads, strides, dil, ceil = MAX[name]
    pn = node("MaxPool", ["?"], ["pool_out"], kernel_shape=list(k), pads=pads, strides=strides,
              dilations=dil, ceil_mode=ceil, auto_pad="NOTSET", storage_order=0)
    return pool_case(f"max_{name}", "MaxPool", rng_for("maxpool", name), c, h, w, pn)


def _averagepool(name):
    c, h, w, k, pads, strides, ceil, incl = AVG[name]
    pn = node("AveragePool", ["?"], ["pool_out"], kernel_shape=list(k), pads=pads,
              strides=strides, ceil_mode=ceil, count_include_pad=incl, auto_pad="NOTSET")
    return pool_case(f"avg_{name}", "AveragePool", rng_for("avgpool", name), c, h, w, pn)


def _out_shape(shape):
    def check(res, want):
        assert list(res["acts"]["pool_out"].shape) == shape
    return check


def _global(op, name):
    c, h, w = GLOBAL[name]
    return pool_case(f"{op}_{name}", op, rng_for(op, name), c, h, w,
                     node(op, ["?"], ["pool_out"]), checks=(_out_shape([2, c, 1, 1]),))


def _auto_pad(mode, op):
    """auto_pad becomes explicit pads (odd total: the extra row at the end / beginning)."""
    extra = {"count_include_pad": 0} if op == "AveragePool" else {"dilations": [1, 1]}
    pn = node(op, ["?"], ["pool_out"], kernel_shape=[2, 3], strides=[2, 2], auto_pad=mode,
              **extra)
    want = [4, 3] if mode != "VALID" else [3, 2]
    return pool_case(f"auto_pad_{mode}_{op}", op, rng_for("auto_pad", mode, op), 2, 7, 6, pn,
                     checks=(_out_shape([2, 2] + want),))


def windows_with_tied_max(x, pn, positive=False):
    """How many windows of ``pn`` over ``x`` hold their maximum (> 0 if ``positive``) more than
    once."""
    a = pn["attrs"]
    y, _ = cpool.maxpool2d(x, a["kernel_shape"], a["strides"], a["pads"], a["dilations"],
                           a["ceil_mode"])
    ties = 0
    pt, pl = a["pads"][:2]
    for idx in np.ndindex(*y.shape):
        n, c, oh, ow = idx
        r0, c0 = oh * a["strides"][0] - pt, ow * a["strides"][1] - pl
        win = x[n, c, max(r0, 0):r0 + a["kernel_shape"][0], max(c0, 0):c0 + a["kernel_shape"][1]]
        ties += int((win == y[idx]).sum() > 1 and (y[idx] > 0 or not positive))
    return ties


def _maxpool_ties(relu):
    """Ties everywhere (small integers through an identity Conv, ReLU zeros): the gradient of
    each window goes to its FIRST maximum in window order on the device exactly as in the numpy
    engine (checked against PyTorch in tests/test_ops_pool.py)."""
    rng = rng_for("maxpool_ties", relu)
    c, h, w = 3, 7, 8
    x = f32(rng.integers(-2, 3, (2, c, h, w)))
    pn = node("MaxPool", ["?"], ["pool_out"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
              strides=[1, 2], dilations=[1, 1], ceil_mode=1)
    src = "relu_out" if relu else "pre_out"

    def ties(res, want):
        # the windows really hold ties (also between positive values, whose gradient survives
        # the ReLU), and the gradient reaches the same elements
        assert windows_with_tied_max(want["acts"][src], pn, positive=True) > 20
        np.testing.assert_array_equal(res["dacts"]["pre_out"] != 0,
                                      want["dacts"]["pre_out"] != 0)

    return pool_case(f"max_ties_first_max{'_relu' if relu else ''}", "MaxPool", rng, c, h, w,
                     pn, x=x, relu=relu, identity=True, checks=(ties,))


def _maxpool_eval():
    """The eval program (no argmax saved) gives the same values."""
    rng = rng_for("maxpool_eval")
    c, h, w = 2, 7, 7
    pn = node("MaxPool", ["?"], ["pool_out"], kernel_shape=[3, 3], pads=[1, 0, 0, 1],
              strides=[2, 2], dilations=[1, 1], ceil_mode=1)
    return pool_case("max_eval_forward", "MaxPool", rng, c, h, w, pn,
                     x=lambda rng: f32(rng.standard_normal((3, c, h, w))), batch=3,
                     train=False, acts=("pool_out",))


def _chains():
    """Composites of the browser's first parity list."""
    c, hw = 3, 7
    rng = rng_for("maxpool_ceil_avgpool_pad")
    one = chain(rng, "pool/chain_maxpool_ceil_avgpool_pad", c, hw, [
        node("MaxPool", ["pre"], ["m"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1],
             ceil_mode=1),
        node("AveragePool", ["m"], ["body_out"], kernel_shape=[2, 2], strides=[1, 1],
             pads=[1, 1, 0, 0], count_include_pad=1)], c * 4 * 4, tag="MaxPool",
        acts=("m", "body_out"), dacts=("pre", "m"))
    rng = rng_for("global_pools")
    two = chain(rng, "pool/chain_global_pools", c, hw, [
        node("GlobalAveragePool", ["pre"], ["ga"]), node("GlobalMaxPool", ["pre"], ["gm"]),
        node("Add", ["ga", "gm"], ["body_out"])], c, tag="GlobalMaxPool",
        acts=("ga", "gm", "body_out"), dacts=("pre", "ga", "gm"))
    return [one, two]


CASES = [_maxpool(name) for name in MAX] + [_averagepool(name) for name in AVG] + \
    [_global(op, name) for name in GLOBAL for op in ("GlobalAveragePool", "GlobalMaxPool")] + \
    [_auto_pad(mode, op) for mode, op in [("SAME_UPPER", "MaxPool"),
                                           ("SAME_LOWER", "AveragePool"), ("VALID", "MaxPool")]] + \
    [_maxpool_ties(True), _maxpool_ties(False), _maxpool_eval()] + _chains() + \
    window1d.POOL  # 1-D: cases/window1d.py

"""Relu (ops/activation.py): in place on a Conv output (fused into the Conv) and on the graph
input (no gradient to write)."""

from cases import case
from conftest import f32, head, node, rng_for


def _half_zeroed(res, want):
    """The case exercises both sides of the ReLU."""
    assert 0.2 < (want["acts"]["relu_out"] == 0).mean() < 0.8


def _after_conv():
    """Conv -> Relu (in place) -> Flatten -> Gemm: forward and the masked gradient."""
    batch, c, k, h, w, classes = 2, 3, 4, 5, 5, 4
    rng = rng_for("relu")
    nodes = [node("Conv", ["input", "cw", "cb"], ["conv_out"], kernel_shape=[3, 3],
                  pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1),
             node("Relu", ["conv_out"], ["relu_out"]),
             node("Flatten", ["relu_out"], ["flat"], axis=1)]
    hn, ht = head("flat", k * h * w, classes, rng)
    tensors = [("cw", f32(rng.standard_normal((k, c, 3, 3)) / 5), "param"),
               ("cb", f32(rng.standard_normal(k) * 0.1), "param")] + ht
    x = f32(rng.standard_normal((batch, c, h, w)))
    labels = rng.integers(0, classes, batch)
    return case("activation/relu_after_conv", nodes + hn, tensors, x, labels, tag="Relu",
                acts=("relu_out",), dacts=("conv_out",), checks=(_half_zeroed,))


def _on_graph_input():
    batch, features, classes = 2, 6, 3
    rng = rng_for("relu_input")
    nodes = [node("Relu", ["input"], ["r"])]
    hn, ht = head("r", features, classes, rng)
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)
    return case("activation/relu_on_graph_input", nodes + hn, ht, x, labels, tag="Relu",
                acts=("r",))


CASES = [_after_conv(), _on_graph_input()]

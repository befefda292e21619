"""What the plan (engine/plan.py) does between the ops: views, in-place ReLU, gradients summed
over several uses of a tensor (shared weights, residual connections), and the ReLU fusions
(``_fusion_cases``: Gemm / MatMul + Add(bias) / BatchNormalization / residual Add + ReLU
forward, a ReLU's backward in Dropout's and in the sum of its output's gradients)."""

import numpy as np

from cases import case
from conftest import GRAD_RTOL, assert_close, f32, head, node, rng_for
from webgpu_trainer.cpu.softmax import log_softmax, log_softmax_backward, nll


def _identity_and_relu_before_log_softmax():
    """Gemm -> Identity (a view) -> Gemm -> Relu (in place on the logits) -> LogSoftmax."""
    batch, features, hidden, classes = 4, 5, 7, 6
    rng = rng_for("identity")
    nodes = [node("Gemm", ["input", "w1", "b1"], ["h"], transB=1),
             node("Identity", ["h"], ["hi"]),
             node("Gemm", ["hi", "w2", "b2"], ["logits"], transB=1),
             node("Relu", ["logits"], ["rl"]),
             node("LogSoftmax", ["rl"], ["output"], axis=1)]
    tensors = [("w1", f32(rng.standard_normal((hidden, features))), "param"),
               ("b1", f32(rng.standard_normal(hidden)), "param"),
               ("w2", f32(rng.standard_normal((classes, hidden))), "param"),
               ("b2", f32(rng.standard_normal(classes)), "param")]
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)
    return case("plan/identity_and_relu_before_log_softmax", nodes, tensors, x, labels,
                tag="Relu", acts=("hi", "rl"), dacts=("hi", "logits"))


def _shared_weight():
    batch, f = 4, 6
    rng = rng_for("tied")
    nodes = [node("Gemm", ["input", "w"], ["h"], transB=1),
             node("Gemm", ["h", "w"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("w", f32(rng.standard_normal((f, f)) / 2), "param")]
    x = f32(rng.standard_normal((batch, f)))
    labels = rng.integers(0, f, batch)

    def by_hand(res, want):
        """dW of W used twice (h = x W^T, logits = h W^T), derived by hand."""
        w = np.float64(tensors[0][1])
        h = np.float64(x) @ w.T
        logp = log_softmax(h @ w.T)
        _, d, _ = nll(logp, labels)
        dl = log_softmax_backward(logp, d)
        dw = dl.T @ h + (dl @ w).T @ x   # both uses of w
        assert_close(res["grads"]["w"], dw, GRAD_RTOL, "gradient of a shared weight")

    return case("plan/shared_weight_gradient_accumulates", nodes, tensors, x, labels,
                tag="Gemm", acts=("h",), dacts=("h",), checks=(by_hand,))


def _in_place_relu_behind_a_view():
    """Tanh -> t; Flatten(t) -> Relu; Add(relu, Flatten(t)): the ReLU must not overwrite t,
    which the Add (through another view) and Tanh's backward still read."""
    batch, f = 4, 6
    rng = rng_for("relu_view")
    nodes = [node("Gemm", ["input", "w", "b"], ["h"], transB=1),
             node("Tanh", ["h"], ["t"]),
             node("Flatten", ["t"], ["ft"], axis=1),
             node("Relu", ["ft"], ["r"]),
             node("Identity", ["t"], ["it"]),
             node("Add", ["r", "it"], ["s"]),
             node("Gemm", ["s", "w2", "b2"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    tensors = [("w", f32(rng.standard_normal((f, f))), "param"),
               ("b", f32(rng.standard_normal(f) * 0.1), "param"),
               ("w2", f32(rng.standard_normal((5, f))), "param"),
               ("b2", f32(rng.standard_normal(5) * 0.1), "param")]
    x = f32(rng.standard_normal((batch, f)))
    labels = rng.integers(0, 5, batch)
    return case("plan/in_place_relu_behind_a_view", nodes, tensors, x, labels, tag="Relu",
                acts=("t", "s"), dacts=("h",))


def _residual_block():
    """x -> Gemm h -> Relu r -> Gemm g -> Add(h, g) -> Relu -> Gemm -> LogSoftmax: h has two
    uses, so the plan sums its gradient over the Relu and the Add."""
    batch, features, hidden, classes = 4, 5, 7, 5
    rng = rng_for("residual")
    nodes = [node("Gemm", ["input", "w1", "b1"], ["h"], transB=1),
             node("Relu", ["h"], ["r"]),
             node("Gemm", ["r", "w2", "b2"], ["g"], transB=1),
             node("Add", ["h", "g"], ["s"]),
             node("Relu", ["s"], ["rs"])]
    hn, ht = head("rs", hidden, classes, rng)
    tensors = [("w1", f32(rng.standard_normal((hidden, features)) / 2), "param"),
               ("b1", f32(rng.standard_normal(hidden) * 0.1), "param"),
               ("w2", f32(rng.standard_normal((hidden, hidden)) / 2), "param"),
               ("b2", f32(rng.standard_normal(hidden) * 0.1), "param")] + ht
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)
    # s is overwritten by the in-place Relu; rs = max(s, 0) checks it
    return case("plan/residual_block", nodes + hn, tensors, x, labels, tag="Add",
                acts=("h", "g", "rs"), dacts=("h", "r", "g", "s"))


def _tied_projection():
    """W used twice, then a projection: the gradient accumulation of the browser's first
    parity list."""
    rng = rng_for("tied_projection")
    f, classes, batch = 6, 5, 4
    nodes = [node("Gemm", ["input", "w"], ["h"], transB=1),
             node("Gemm", ["h", "w"], ["logits"], transB=1),
             node("Gemm", ["logits", "p", "pb"], ["z"], transB=1),
             node("LogSoftmax", ["z"], ["output"], axis=-1)]
    tensors = [("w", f32(rng.standard_normal((f, f)) / 2), "param"),
               ("p", f32(rng.standard_normal((classes, f))), "param"),
               ("pb", f32(rng.standard_normal(classes) * 0.1), "param")]
    x = f32(rng.standard_normal((batch, f)))
    return case("plan/tied_weight_accumulation", nodes, tensors, x, np.arange(batch) % classes,
                tag="Gemm", acts=("h", "logits"), dacts=("h", "logits"), selfcheck=True)


def _gemm_relu_dropout(features):
    """Gemm(+bias) -> Relu -> Dropout -> head (SeedNet's fc1 block): the Gemm applies the ReLU
    (``features`` 256: split-K, reduce_splits applies it), Dropout's backward masks by it."""
    batch, hidden, classes = 4, 8, 5
    rng = rng_for("gemm_relu_dropout", features)
    nodes = [node("Gemm", ["input", "w1", "b1"], ["h"], transB=1),
             node("Relu", ["h"], ["r"]),
             node("Dropout", ["r", "ratio"], ["d"])]
    hn, ht = head("d", hidden, classes, rng)
    tensors = [("w1", f32(rng.standard_normal((hidden, features)) / np.sqrt(features)),
                "param"), ("b1", f32(rng.standard_normal(hidden) * 0.3), "param")] + ht
    x = f32(rng.standard_normal((batch, features)))
    return case(f"plan/fused_gemm_relu_dropout_k{features}", nodes + hn, tensors, x,
                rng.integers(0, classes, batch), tag="Relu",
                constants={"ratio": {"dtype": "float32", "shape": [], "values": [0.25]}},
                acts=("r", "d"), dacts=("h", "d"))


def _matmul_add_relu():
    """MatMul -> Add(bias) -> Relu -> head: the Add applies the ReLU."""
    batch, features, hidden, classes = 4, 6, 7, 5
    rng = rng_for("matmul_add_relu")
    nodes = [node("MatMul", ["input", "w1"], ["m"]),
             node("Add", ["m", "b1"], ["s"]),
             node("Relu", ["s"], ["r"])]
    hn, ht = head("r", hidden, classes, rng)
    tensors = [("w1", f32(rng.standard_normal((features, hidden)) / 2), "param"),
               ("b1", f32(rng.standard_normal(hidden) * 0.5), "param")] + ht
    x = f32(rng.standard_normal((batch, features)))
    return case("plan/fused_matmul_add_relu", nodes + hn, tensors, x,
                rng.integers(0, classes, batch), tag="Relu", acts=("m", "r"),
                dacts=("m", "s"))


def _residual_relu_three_uses():
    """Gemm -> Relu r used three times (two Gemms and the residual Add), Add + Relu: the
    residual Add applies its ReLU, and the sum of r's three gradients masks by r > 0 (the
    accumulate step) in place of r's ReLU backward (r's gradient buffer is h's: the masked
    one after the step)."""
    batch, features, hidden, classes = 4, 5, 6, 5
    rng = rng_for("residual_three")
    w = lambda *s: f32(rng.standard_normal(s) / 2)  # noqa: E731
    nodes = [node("Gemm", ["input", "w1", "b1"], ["h"], transB=1),
             node("Relu", ["h"], ["r"]),
             node("Gemm", ["r", "w2"], ["g2"], transB=1),
             node("Gemm", ["r", "w3"], ["g3"], transB=1),
             node("Add", ["g2", "g3"], ["s1"]),
             node("Add", ["s1", "r"], ["s2"]),
             node("Relu", ["s2"], ["r2"])]
    hn, ht = head("r2", hidden, classes, rng)
    tensors = [("w1", w(hidden, features), "param"), ("b1", w(hidden), "param"),
               ("w2", w(hidden, hidden), "param"), ("w3", w(hidden, hidden), "param")] + ht
    x = f32(rng.standard_normal((batch, features)))
    return case("plan/fused_residual_relu_three_uses", nodes + hn, tensors, x,
                rng.integers(0, classes, batch), tag="Relu", acts=("r", "s1", "r2"),
                dacts=("h", "s1", "s2"))


def _conv_bn_relu_residual(train):
    """Conv -> BatchNormalization -> Relu r (used by the next Conv and the residual Add) ->
    Conv -> Add(., r) -> Relu (ResNet's block): BatchNorm and the Add apply their ReLUs, the
    sum of r's two gradients masks by r > 0; in eval mode the running statistics' path."""
    from cases.batchnorm import bn_node, bn_tensors
    batch, c, h, w, classes = 3, 3, 5, 4, 4
    rng = rng_for("conv_bn_relu_residual", train)
    conv = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1],
                group=1)
    nodes = [node("Conv", ["input", "c1.w"], ["c1"], **conv),
             bn_node("c1", "b1"),
             node("Relu", ["b1"], ["r"]),
             node("Conv", ["r", "c2.w", "c2.b"], ["c2"], **conv),
             node("Add", ["c2", "r"], ["s"]),
             node("Relu", ["s"], ["rs"]),
             node("Flatten", ["rs"], ["flat"], axis=1)]
    hn, ht = head("flat", c * h * w, classes, rng)
    tensors = [("c1.w", f32(rng.standard_normal((c, c, 3, 3)) / 4), "param"),
               *bn_tensors(rng, c), ("c2.w", f32(rng.standard_normal((c, c, 3, 3)) / 4), "param"),
               ("c2.b", f32(rng.standard_normal(c) * 0.2), "param")] + ht
    x = f32(rng.standard_normal((batch, c, h, w)))
    mode = "train" if train else "eval"
    return case(f"plan/fused_conv_bn_relu_residual_{mode}", nodes + hn, tensors, x,
                rng.integers(0, classes, batch), tag="Relu", train=train, acts=("r", "rs"),
                dacts=("c1", "b1", "c2", "s") if train else ())


def _conv_relu_pools():
    """Conv -> Relu -> MaxPool -> Conv -> Relu -> GlobalAveragePool -> head: the Convs apply
    their ReLUs, the pools' backwards mask by them."""
    batch, c, h, w, classes = 3, 2, 6, 6, 4
    rng = rng_for("conv_relu_pools")
    conv = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1],
                group=1)
    nodes = [node("Conv", ["input", "c1.w", "c1.b"], ["c1"], **conv),
             node("Relu", ["c1"], ["r1"]),
             node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             node("Conv", ["p1", "c2.w", "c2.b"], ["c2"], **conv),
             node("Relu", ["c2"], ["r2"]),
             node("GlobalAveragePool", ["r2"], ["g"]),
             node("Flatten", ["g"], ["flat"], axis=1)]
    hn, ht = head("flat", 3, classes, rng)
    tensors = [("c1.w", f32(rng.standard_normal((3, c, 3, 3)) / 3), "param"),
               ("c1.b", f32(rng.standard_normal(3) * 0.2), "param"),
               ("c2.w", f32(rng.standard_normal((3, 3, 3, 3)) / 3), "param"),
               ("c2.b", f32(rng.standard_normal(3) * 0.2), "param")] + ht
    x = f32(rng.standard_normal((batch, c, h, w)))
    return case("plan/fused_conv_relu_pools", nodes + hn, tensors, x,
                rng.integers(0, classes, batch), tag="Relu", acts=("r1", "p1", "r2"),
                dacts=("c1", "p1", "c2"))


def _output_read_by_another_node(loss, end):
    """The graph output (what the loss reads) is also read by another node, whose result is
    the graph's second output (an exported model returning logits and probabilities): the
    loss's gradient of the output must survive that node's backward (its output gets no
    gradient, so it contributes nothing). ``end``: the op making the first output (None: the
    Gemm's logits), ``loss``: the loss spec."""
    batch, features, hidden, classes = 4, 5, 6, 5
    rng = rng_for("output_read_by_another_node", loss, end)
    nodes = [node("Gemm", ["input", "w1", "b1"], ["h"], transB=1),
             node("Tanh", ["h"], ["t"]),
             node("Gemm", ["t", "w2", "b2"], ["logits"], transB=1)]
    out = "logits"
    if end:
        nodes.append(node(end, ["logits"], ["output"], axis=1))
        out = "output"
    nodes.append(node("Softmax", [out], ["probs"], axis=1) if end is None
                 else node("Exp", [out], ["probs"]))
    tensors = [("w1", f32(rng.standard_normal((hidden, features)) / 2), "param"),
               ("b1", f32(rng.standard_normal(hidden) * 0.1), "param"),
               ("w2", f32(rng.standard_normal((classes, hidden))), "param"),
               ("b2", f32(rng.standard_normal(classes) * 0.1), "param")]
    x = f32(rng.standard_normal((batch, features)))
    c = case(f"plan/output_read_by_another_node_{loss}", nodes, tensors, x,
             rng.integers(0, classes, batch), output=out, tag="Gemm", loss=loss,
             acts=("h", "probs"), dacts=(out, "h"))
    c.graph["outputs"].append({**c.graph["outputs"][0], "name": "probs"})
    return c


CASES = [_identity_and_relu_before_log_softmax(), _shared_weight(),
         _in_place_relu_behind_a_view(), _residual_block(), _tied_projection(),
         _gemm_relu_dropout(8), _gemm_relu_dropout(256), _matmul_add_relu(),
         _residual_relu_three_uses(), _conv_bn_relu_residual(True),
         _conv_bn_relu_residual(False), _conv_relu_pools(),
         _output_read_by_another_node("cross_entropy", None),
         _output_read_by_another_node("nll", "LogSoftmax"),
         _output_read_by_another_node("mse", None)]

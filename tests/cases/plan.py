"""What the plan (engine/plan.py) does between the ops: views, in-place ReLU, gradients summed
over several uses of a tensor (shared weights, residual connections)."""

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


CASES = [_identity_and_relu_before_log_softmax(), _shared_weight(),
         _in_place_relu_behind_a_view(), _residual_block(), _tied_projection()]

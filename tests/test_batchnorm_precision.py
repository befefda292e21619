"""BatchNorm's per-channel sums over a large N*H*W on the native device: the bias gradient
of BatchNorm -> ReLU -> GlobalAveragePool (the ResNet block's end), N*H*W = 1,048,576 per
channel. With one part per channel (CPU adapters) each thread added 1,024 elements per lane in
one sequence; the sums are blocked (two-level) now (shaders/batchnorm.wgsl).

Measured on lavapipe (relative error of dB, the worse channel): against the float64 sum of the
device's own dy 2.9e-6 before, 2.5e-8 after; against the float64 numpy engine 3.0e-6 before,
1.1e-7 after. The old sums were within the 1e-5 first asked for, so the test asks 1e-6 of
both, which the old sums fail. (The CPU adapters' barrier-free block sums, lib/bn_blocks.wgsl,
take channels of at most Builder.BN_BLOCKED_MAX elements; forced here, 1,024 blocks of 1,024 a
channel and folds of 64, they measured the same 2.5e-8 and 1.1e-7.)"""

import numpy as np
import pytest

from cases import case
from conftest import f32, node, rng_for
from harness import check_case
from webgpu_trainer.cpu.engine import params_from_blob

pytestmark = pytest.mark.every_backend

BATCH, CHANNELS, SIDE, CLASSES = 64, 2, 128, 3   # N*H*W = 1,048,576 per channel
RTOL = 1e-6


def _bn_relu_gap():
    """input -> BatchNorm -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> LogSoftmax, every
    label 0 and only class 0's row of the Gemm non-zero: d loss / d pooled has one sign for
    every sample, so the bias gradient is a sum of 524k same-signed terms (no cancellation:
    its relative error is the summation's)."""
    rng = rng_for("bn_precision")
    x = f32(rng.standard_normal((BATCH, CHANNELS, SIDE, SIDE)) * 1.5 + 0.3)
    w = np.zeros((CLASSES, CHANNELS), np.float32)
    w[0] = 1.0 + rng.random(CHANNELS)
    tensors = [("bn.gamma", f32(1 + 0.3 * rng.standard_normal(CHANNELS)), "param"),
               ("bn.beta", f32(0.3 * rng.standard_normal(CHANNELS)), "param"),
               ("bn.mean", np.zeros(CHANNELS, np.float32), "buffer"),
               ("bn.var", np.ones(CHANNELS, np.float32), "buffer"),
               ("fc.w", f32(w), "param"), ("fc.b", np.zeros(CLASSES, np.float32), "param")]
    nodes = [node("BatchNormalization", ["input", "bn.gamma", "bn.beta", "bn.mean", "bn.var"],
                  ["bn_out"]),
             node("Relu", ["bn_out"], ["relu_out"]),
             node("GlobalAveragePool", ["relu_out"], ["pool"]),
             node("Flatten", ["pool"], ["flat"], axis=1),
             node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    return case("batchnorm/relu_gap_precision", nodes, tensors, x, np.zeros(BATCH, np.int64),
                tag="BatchNormalization", acts=("relu_out",), dacts=())


def test_bias_gradient_after_relu_gap(device):
    """dB against the float64 numpy engine and against the float64 sum of the dy the device
    summed (its own masked gradient of the BatchNorm's output); dGamma against the engine."""
    c = _bn_relu_gap()
    res, want = check_case(device, c)
    assert params_from_blob(c.graph, c.blob)["fc.w"][1:].max() == 0
    got = res["grads"]["bn.beta"].astype(np.float64)
    own = res["dacts"]["bn_out"].astype(np.float64).sum(axis=(0, 2, 3))
    for name, ref in (("bn.beta vs engine", want["grads"]["bn.beta"]),
                      ("bn.beta vs its own dy", own),
                      ("bn.gamma vs engine", want["grads"]["bn.gamma"])):
        value = res["grads"]["bn.gamma"].astype(np.float64) if "gamma" in name else got
        assert np.all(ref < 0), name  # one sign: no cancellation
        err = (np.abs(value - ref) / np.abs(ref)).max()
        assert err <= RTOL, f"{name}: relative error {err:.3g} > {RTOL} ({value} vs {ref})"

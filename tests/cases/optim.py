"""Optimizer steps (engine/train/optim.py, shaders/optim.wgsl) for the browser: an MLP trained
5 steps by each optimizer; the browser's numbers must match the native engine's
(tests/test_parity.py); and SGD with momentum on ``matmul/chain_attention``'s attention run as
FusedAttention (the GPU self-check's steps of shaders/attention.wgsl: SGD, as Adam's steps
barely move when a kernel scales a gradient wrong, dividing out its scale).
The native optimizers are checked against torch.optim trajectories in tests/test_optim.py, so
these cases have no float64 reference (harness.check_case refuses them)."""

import numpy as np

from cases import case
from cases.matmul import attention
from conftest import f32, head, node, rng_for

OPTIMIZERS = [
    {"name": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3},
    {"name": "sgd", "lr": 0.05, "momentum": 0.5, "dampening": 0.1},
    {"name": "adam", "lr": 0.01, "clip_grad_norm": 0.5},
    {"name": "adamw", "lr": 0.01, "amsgrad": True},
    {"name": "adagrad", "lr": 0.1, "lr_decay": 0.01},
    {"name": "rmsprop", "lr": 0.01, "centered": True, "momentum": 0.9},
    {"name": "adadelta", "lr": 1.0, "weight_decay": 1e-2},
]


def _mlp(k, opt, steps=5):
    rng = rng_for("optim", k)
    f, hdim, classes, batch = 7, 33, 5, 4
    x = rng.standard_normal((batch, f))
    nodes = [node("Gemm", ["input", "w1", "b1"], ["h"], transB=1), node("Relu", ["h"], ["r"])]
    hn, ht = head("r", hdim, classes, rng)
    tensors = [("w1", f32(rng.standard_normal((hdim, f)) / np.sqrt(f)), "param"),
               ("b1", f32(rng.standard_normal(hdim) * 0.1), "param")] + ht
    return case(f"optim/{k}_{opt['name']}", nodes + hn, tensors, x,
                np.arange(batch) % classes, optimizer=opt, steps=steps, seed=3, selfcheck=True)


CASES = [_mlp(k, opt) for k, opt in enumerate(OPTIMIZERS)] + [
    attention(f"optim/{len(OPTIMIZERS)}_sgd_attention", rng_for("optim", "attention"),
              optimizer={"name": "sgd", "lr": 0.1, "momentum": 0.9}, steps=3, seed=3,
              selfcheck=True)]

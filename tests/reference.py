"""Float64 references for the engine's tests: the numpy engine (``webgpu_trainer.cpu``) in float64.

``chain_step`` runs bundle nodes (a chain or any DAG whose first input is "input") forward,
through the plan's loss (NLLLoss(mean) after a LogSoftmax, else CrossEntropyLoss), and backward.
The per-op functions are re-exported for the torch cross-check (tests/test_ops.py).
"""

import numpy as np

from webgpu_trainer.cpu.batchnorm import batchnorm_backward, batchnorm_eval, batchnorm_train
from webgpu_trainer.cpu.conv import conv2d, conv2d_backward
from webgpu_trainer.cpu.engine import Engine
from webgpu_trainer.cpu.gemm import gemm, gemm_backward
from webgpu_trainer.cpu.softmax import log_softmax, log_softmax_backward, nll

__all__ = ["batchnorm_backward", "batchnorm_eval", "batchnorm_train", "conv2d",
           "conv2d_backward", "gemm", "gemm_backward", "log_softmax", "log_softmax_backward",
           "nll", "chain_step", "graph_step"]


def _f64(a):
    return np.asarray(a, np.float64)


def relu(x):
    return np.maximum(_f64(x), 0.0)


def relu_backward(x, dy):
    return np.where(_f64(x) > 0, _f64(dy), 0.0)


def graph_step(graph, params, x, labels, train=True, keep=None, trainable=None):
    """The float64 numpy engine's step on a bundle dict (see ``Engine.step``)."""
    eng = Engine(graph, params, np.float64, trainable=trainable)
    return eng.step(_f64(x), labels, train=train, keep=keep)


def chain_step(nodes, params, x, labels, train=True, keep=None, constants=None):
    """Forward + loss + backward of ``nodes`` (input tensor "input", output = the last node's
    first output). ``params``: {name: array} for every weight input, all trainable except
    BatchNormalization running statistics; ``keep``: {Dropout node name: (bool mask, ratio)}.
    Returns the dict of ``Engine.step``."""
    stats = {n["inputs"][k] for n in nodes if n["op_type"] == "BatchNormalization"
             for k in (3, 4)}
    tensors = [{"name": k, "shape": list(np.shape(v)), "dtype": "float32", "offset": 0,
                "nbytes": 0, "role": "buffer" if k in stats else "param"}
               for k, v in params.items()]
    graph = {"inputs": [{"name": "input", "shape": list(np.shape(x))}],
             "outputs": [{"name": nodes[-1]["outputs"][0]}], "tensors": tensors,
             "constants": constants or {}, "nodes": nodes}
    masks = {k: v[0] for k, v in (keep or {}).items()}
    return graph_step(graph, params, x, labels, train, masks,
                      trainable=set(params) - stats)

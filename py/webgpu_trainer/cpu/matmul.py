"""MatMul: Y = numpy.matmul(A, B) (ONNX MatMul); gradients as PyTorch's matmul backward:
dA = dY @ B^T, dB = A^T @ dY, 1-D operands promoted ([K] -> [1, K] for A, [K, 1] for B) and
each gradient summed over the batch dims its operand was broadcast along."""

import numpy as np

from .gemm import unbroadcast

TYPES = ("MatMul",)


def matmul_backward(a, b, dy):
    """(dA, dB) of Y = a @ b (numpy.matmul), shaped like ``a`` and ``b``."""
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    y_shape = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]) + (a2.shape[-2], b2.shape[-1])
    dy2 = np.reshape(dy, y_shape)
    da = unbroadcast(dy2 @ np.swapaxes(b2, -1, -2), a2.shape).reshape(a.shape)
    db = unbroadcast(np.swapaxes(a2, -1, -2) @ dy2, b2.shape).reshape(b.shape)
    return da, db


def forward(node, ins, ctx):
    return [np.matmul(ins[0], ins[1])], None


def backward(node, ins, outs, cache, douts, ctx):
    return list(matmul_backward(ins[0], ins[1], douts[0]))

"""Philox-4x32-10 in numpy: the generator of shaders/lib/philox.wgsl, bit for bit.

The engine's one source of randomness (Salmon et al., SC 2011; Random123's
``philox4x32_R(10, ctr, key)``): the parameter init (``init_values``) and the dropout masks
(``dropout_keep``) of the numpy engine draw exactly the values the WGSL kernels draw, so a CPU
and a GPU run of the same seed start from the same weights and drop the same units. The counter
layout and the float mappings are those of shaders/lib/philox.wgsl:

    key = (seed, 0); element i is word i % 4 of block i / 4
    init:    ctr = (i / 4, tensor index + 1, 0, 0); value = ((x >> 8) - 2^23) * (bound * 2^-23)
    dropout: ctr = (i / 4, node index + 1, step, 1); keep = (x >> 8) * 2^-24 >= ratio

Every float operation is one float32 rounding (the int -> float conversions are exact), so the
results do not depend on FMA contraction or evaluation order.

>>> [hex(int(w)) for w in philox4x32(0, 0, 0, 0, 0, 0)]   # Random123 kat_vectors, line 1
['0x6627e8d5', '0xe169c58d', '0xbc57ac4c', '0x9b00dbd8']
"""

import numpy as np

M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF
INIT, DROPOUT = 0, 1  # the counter's last word: what is drawn


def philox4x32(c0, c1, c2, c3, k0: int, k1: int, rounds: int = 10):
    """The four output words (uint32 arrays, broadcast) of counters ``(c0, c1, c2, c3)`` (uint32
    arrays or ints) under the key ``(k0, k1)`` (ints)."""
    c0, c1, c2, c3 = np.broadcast_arrays(*(np.asarray(c, np.uint64) & MASK
                                           for c in (c0, c1, c2, c3)))
    k0, k1 = int(k0) & MASK, int(k1) & MASK
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & np.uint64(MASK),
                          (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & np.uint64(MASK))
    return tuple(c.astype(np.uint32) for c in (c0, c1, c2, c3))


def words(seed: int, n: int, stream: int, step: int, what: int) -> np.ndarray:
    """``n`` random uint32: element i = word i % 4 of Philox(key (seed, 0), counter
    (i // 4, stream, step, what))."""
    blocks = np.arange((n + 3) // 4, dtype=np.uint64)
    out = np.stack(philox4x32(blocks, stream, step, what, seed, 0), axis=1)
    return out.reshape(-1)[:n]


def init_values(seed: int, stream: int, n: int, scale) -> np.ndarray:
    """float32 [n] uniform in [-bound, bound) for ``scale`` = float32(bound * 2^-23), as
    ``uniform_fill`` of shaders/init.wgsl."""
    x = words(seed, n, stream, 0, INIT)
    k = (x >> np.uint32(8)).astype(np.int32) - np.int32(1 << 23)
    return k.astype(np.float32) * np.float32(scale)


def dropout_keep(seed: int, step: int, salt: int, shape, ratio: float) -> np.ndarray:
    """The keep mask (bool, ``shape``) of dropout node ``salt`` (its index + 1) at optimizer step
    ``step``, as ``apply`` of shaders/dropout.wgsl."""
    n = int(np.prod(shape))
    u = (words(seed, n, salt, step, DROPOUT) >> np.uint32(8)).astype(np.float32) \
        * np.float32(2.0 ** -24)
    return (u >= np.float32(ratio)).reshape(shape)

"""Data augmentation of a training batch on numpy: shaders/augment.wgsl, bit for bit.

torchvision's ``RandomCrop(size, padding=pad)`` then ``RandomHorizontalFlip(p=0.5)`` per image,
drawn from the run's Philox stream (cpu/philox.py): image b of optimizer step t reads the block
``ctr = (b, 0, t, AUGMENT)``, key (seed, 0); word 0 gives the crop's row offset, word 1 its
column offset (``mulhi(word, 2 pad + 1)`` = ``word * (2 pad + 1) >> 32``, in [0, 2 pad]), word 2
the flip (its top bit). A padded pixel of channel c is ``fill[c]``, the table's entry of pixel
value 0 in that channel: torchvision pads the raw image with 0 before normalising.
"""

import numpy as np

from . import philox

AUGMENT = 2  # the counter's last word: what is drawn (philox.INIT, philox.DROPOUT)


def draws(seed: int, step: int, batch: int, pad: int, flip: bool):
    """``(dy, dx, flipped)``: int64 [batch] crop offsets in [0, 2 pad] and bool [batch] of the
    images of optimizer step ``step``."""
    w0, w1, w2, _ = philox.philox4x32(np.arange(batch), 0, step, AUGMENT, seed, 0)
    span = np.uint64(2 * pad + 1)
    dy = ((w0.astype(np.uint64) * span) >> np.uint64(32)).astype(np.int64)
    dx = ((w1.astype(np.uint64) * span) >> np.uint64(32)).astype(np.int64)
    return dy, dx, (w2 >> np.uint32(31)).astype(bool) & bool(flip)


def apply(x: np.ndarray, seed: int, step: int, pad: int, flip: bool, fill) -> np.ndarray:
    """The augmented copy of the batch ``x`` [batch, C, H, W] (any float dtype, kept);
    ``fill`` [C] the padding of each channel."""
    n, c, h, w = x.shape
    dy, dx, flipped = draws(seed, step, n, pad, flip)
    padded = np.empty((n, c, h + 2 * pad, w + 2 * pad), x.dtype)
    padded[...] = np.asarray(fill, x.dtype).reshape(1, c, 1, 1)
    padded[:, :, pad:pad + h, pad:pad + w] = x
    out = np.empty_like(x)
    for b in range(n):
        crop = padded[b, :, dy[b]:dy[b] + h, dx[b]:dx[b] + w]
        out[b] = crop[:, :, ::-1] if flipped[b] else crop
    return out

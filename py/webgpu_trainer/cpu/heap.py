"""Keep freed memory for the next training step (glibc only; elsewhere a no-op).

A numpy training step allocates and frees the same few-megabyte arrays every step (im2col
matrices, activations, their gradients). With glibc's defaults an array above the dynamic mmap
threshold is a fresh ``mmap`` and a freed top of the heap above the trim threshold goes back to
the kernel, so the next step's arrays page-fault again on first touch: SeedNet at batch 64 spent
about a third of its step there (54 -> 34 ms/step on one core). ``retain_freed`` raises both
thresholds so that freed arrays are reused from the heap (what PyTorch's caching allocators do);
the process keeps the step's peak memory mapped between steps (up to ``limit`` bytes of it
free).
"""

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
LIMIT = 1 << 30  # 1 GiB

_done = None


def retain_freed(limit: int = LIMIT) -> bool:
    """Set glibc's trim and mmap thresholds to ``limit`` bytes, once per process; True when
    glibc accepted them, False where the C library is not glibc (musl, macOS, Windows) or
    refused."""
    global _done
    if _done is None:
        _done = False
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name)
            libc.gnu_get_libc_version  # noqa: B018 (AttributeError: not glibc)
            _done = bool(libc.mallopt(M_MMAP_THRESHOLD, int(limit))) and \
                bool(libc.mallopt(M_TRIM_THRESHOLD, int(limit)))
        except (OSError, AttributeError, TypeError):
            pass
    return _done

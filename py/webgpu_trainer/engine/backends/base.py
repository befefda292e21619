"""What every backend shares: WebGPU's byte rules, in one place (uniforms: shaders.pack).

A backend (``wgpu_native.Device``, ``webgpu_js.Device``) implements ``device.Device``.
"""


ALIGN = 256  # bytes; WebGPU's minStorageBufferOffsetAlignment is at most 256 on every adapter
WORKGROUP = 64  # threads per workgroup of the 1-D kernels (a multiple of every SIMD width)
MAX_GROUPS = 65535  # maxComputeWorkgroupsPerDimension


class ShaderError(RuntimeError):
    """A WGSL shader failed to compile or a pipeline failed to build; names shader and entry."""


class View:
    """A byte range of a buffer: ``offset`` must be a multiple of ``ALIGN`` for binding."""

    __slots__ = ("buffer", "offset", "nbytes")

    def __init__(self, buffer, offset: int, nbytes: int):
        if offset % ALIGN:
            raise ValueError(f"view offset {offset} is not a multiple of {ALIGN} bytes")
        self.buffer, self.offset, self.nbytes = buffer, offset, nbytes


def round_up(n: int, multiple: int = 4) -> int:
    """``n`` rounded up to a multiple of ``multiple`` (WebGPU sizes are multiples of 4 bytes)."""
    return (n + multiple - 1) // multiple * multiple


def span_copies(spans: list) -> tuple:
    """``([(buf, offset, at, size)], total)``: the copy of each ``(buf, offset, nbytes)`` of
    ``spans`` into a ``read_spans`` staging buffer of ``total`` bytes (at least 4), one after
    the other at byte ``at``, ``size`` = nbytes rounded up to whole words (copies move 4-byte
    words). ValueError naming the span, its buffer and the bytes past its end when a copy
    would overrun the buffer (checked here, before any copy is recorded: WebGPU reports that
    only asynchronously, at a later submit in the browser), or when an offset is not a
    multiple of 4 (copyBufferToBuffer's rule)."""
    copies, at = [], 0
    for i, (buf, offset, n) in enumerate(spans):
        size = getattr(buf, "size", None)
        label = getattr(buf, "label", "") or "?"
        if n < 0:
            raise ValueError(f"read_spans: span {i} of buffer {label!r}: {n} bytes (a "
                             "length is at least 0)")
        if offset % 4 or offset < 0:
            raise ValueError(f"read_spans: span {i} of buffer {label!r}: byte offset {offset}"
                             f" (an offset is a multiple of 4, at least 0)")
        if size is not None and offset + round_up(n) > int(size):
            raise ValueError(f"read_spans: span {i} overruns buffer {label!r} ({int(size)} "
                             f"bytes): {round_up(n)} bytes from byte offset {offset} end "
                             f"{offset + round_up(n) - int(size)} bytes past it")
        copies.append((buf, offset, at, round_up(n)))
        at += round_up(n)
    return copies, max(4, at)


def split_spans(data: bytes, spans: list) -> list:
    """Each span's ``nbytes`` from ``data``, the staging buffer laid out by ``span_copies``."""
    return [data[at:at + n] for (_, _, at, _), (_, _, n) in zip(span_copies(spans)[0], spans)]


def groups_1d(n_threads: int, per_group: int = WORKGROUP) -> tuple:
    """Workgroup counts ``(x, y, 1)`` covering ``n_threads`` 1-D threads of ``per_group`` each.

    Past 65535 groups the grid folds into y; kernels rebuild the flat index as
    ``gid.x + gid.y * num_workgroups.x * WG``.
    """
    groups = max(1, (n_threads + per_group - 1) // per_group)
    if groups <= MAX_GROUPS:
        return (groups, 1, 1)
    y = (groups + MAX_GROUPS - 1) // MAX_GROUPS
    return ((groups + y - 1) // y, y, 1)


def groups_per_channel(channels: int, parts: int = 1) -> tuple:
    """Workgroup counts ``(x, parts, z)`` for one workgroup per (channel, part): past 65535
    channels the channels fold into z; kernels rebuild the channel as ``wid.x + wid.z *
    num_workgroups.x`` (``channel_of`` in shaders/lib/index.wgsl) and skip ``c >= C``.

    >>> groups_per_channel(70000, 3)
    (35000, 3, 2)
    """
    if parts > MAX_GROUPS:
        raise ValueError(f"{parts} parts per channel: more than {MAX_GROUPS} workgroups along y")
    channels = max(1, channels)
    if channels <= MAX_GROUPS:
        return (channels, parts, 1)
    z = (channels + MAX_GROUPS - 1) // MAX_GROUPS
    return ((channels + z - 1) // z, parts, z)

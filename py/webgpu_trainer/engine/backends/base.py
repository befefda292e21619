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


def span_sizes(spans: list) -> list:
    """Bytes each ``(buf, offset, nbytes)`` of ``spans`` takes in a ``read_spans`` staging
    buffer, one after the other: nbytes rounded up to whole words (copies move 4-byte words)."""
    return [round_up(n) for _, _, n in spans]


def split_spans(data: bytes, spans: list) -> list:
    """Each span's ``nbytes`` from ``data``, the staging buffer laid out by ``span_sizes``."""
    out, at = [], 0
    for (_, _, n), size in zip(spans, span_sizes(spans)):
        out.append(data[at:at + n])
        at += size
    return out


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

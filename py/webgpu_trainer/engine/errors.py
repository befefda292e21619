"""Errors of the engine, shared by graph.py and the op families (no imports: no cycles)."""


class GraphError(ValueError):
    """The model cannot be planned: names the node, its op and the problem."""


class OffsetLimitError(ValueError):
    """A tensor too large for the kernels' 32-bit counts and offsets (a batch too large for
    the engine on any GPU): ``tensor`` (its name), ``nbytes``, ``batch``, ``count`` (the
    number that did not fit in 32 bits). The message names the batch, the tensor and its
    bytes, not the shader's field."""

    U32_MAX = (1 << 32) - 1

    def __init__(self, tensor: str, nbytes: int, batch, count: int):
        at = f"batch {batch:,}" if isinstance(batch, int) else "this batch"
        super().__init__(
            f"{at} is too large for 32-bit buffer offsets: tensor {tensor!r} needs "
            f"{nbytes:,} bytes and a kernel over it counts {count:,} values, more than the "
            f"{self.U32_MAX:,} a 32-bit offset holds; use a smaller batch")
        self.tensor, self.nbytes, self.batch, self.count = tensor, nbytes, batch, count

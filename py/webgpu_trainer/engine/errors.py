"""Errors of the engine, shared by graph.py and the op families (no imports: no cycles), and
``UserError``: the mark of an error whose message is written for the person training (the
page shows it as it is, ``user_message``)."""


class UserError(Exception):
    """A mixin: an error whose message is for the user, in their words (the model, the batch,
    the setting, the limit): ``user_message`` shows it without the exception's type. Every
    other exception reaching the user is a bug, shown with its type for the report."""


def user_message(exc: BaseException) -> str:
    """What the user is shown for ``exc``: its message alone for a ``UserError`` (before:
    "LimitError: the model does not fit ..."), else "TypeName: message" (an unexpected
    exception, a bug: the type helps whoever reads the report)."""
    if isinstance(exc, UserError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class GraphError(UserError, ValueError):
    """The model cannot be planned: names the node, its op and the problem."""


class OffsetLimitError(UserError, ValueError):
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

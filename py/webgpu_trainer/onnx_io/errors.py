"""The import's one error, :class:`OnnxImportError` (every problem at once), and the constant
folder's "leave this node" signal."""
from __future__ import annotations

__all__ = ["OnnxImportError"]


class OnnxImportError(ValueError):
    """An ONNX file that cannot become a bundle. ``str(e)`` names the file and lists every
    problem, one per line after the first, then the hints; ``e.problems`` is that list
    (strings), ``e.hints`` what may help (e.g. the ops the engine trains), not counted."""

    def __init__(self, message: str, problems: list[str] | None = None,
                 hints: list[str] | None = None):
        super().__init__(message)
        self.problems = list(problems) if problems else [message]
        self.hints = list(hints or [])


class _NotFoldable(Exception):
    """The folder leaves this node in the graph (a reason, not an error)."""


def _error(path: str, problems: list[str], hints: list[str] | None = None) -> OnnxImportError:
    problems = list(dict.fromkeys(problems))  # each once, in order
    tail = "".join(f"\n({h})" for h in hints or [])
    if len(problems) == 1:
        return OnnxImportError(f"{path}: {problems[0]}{tail}", problems, hints)
    lines = "\n".join(f"- {p}" for p in problems)
    return OnnxImportError(f"{path}: cannot be imported ({len(problems)} problems):\n{lines}"
                           f"{tail}", problems, hints)

"""The import's one error, :class:`OnnxImportError` (every problem at once), and the constant
folder's "leave this node" signal."""
from __future__ import annotations

__all__ = ["OnnxImportError"]


class OnnxImportError(ValueError):
    """An ONNX file that cannot become a bundle. ``str(e)`` names the file and lists every
    problem, one per line after the first; ``e.problems`` is that list (strings)."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = list(problems) if problems else [message]


class _NotFoldable(Exception):
    """The folder leaves this node in the graph (a reason, not an error)."""


def _error(path: str, problems: list[str]) -> OnnxImportError:
    problems = list(dict.fromkeys(problems))  # each once, in order
    if len(problems) == 1:
        return OnnxImportError(f"{path}: {problems[0]}", problems)
    lines = "\n".join(f"- {p}" for p in problems)
    return OnnxImportError(f"{path}: cannot be imported ({len(problems)} problems):\n{lines}",
                           problems)

"""What the server's route modules share: ``ApiError`` (an error answered as JSON), the names
they accept (``NAME_RE``) and the errors of a model that cannot be imported or planned."""

import re

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")  # model and shard names


class ApiError(Exception):
    """An error answered as JSON ``{"error": message, "problems": [line, ...]}`` with
    ``status``; ``problems`` (optional) lists every problem found, one per line."""

    def __init__(self, status: int, message: str, problems: list | None = None,
                 hints: list | None = None):
        super().__init__(message)
        self.status, self.message, self.problems, self.hints = status, message, problems, hints


def import_error(shown: str, exc, path: str) -> ApiError:
    """The 400 of a model that cannot be imported, naming it ``shown`` (never the server path
    ``path``): one problem in the message, or their count with the list in ``problems``."""
    found = [str(p).replace(path, shown) for p in problems(exc)]
    found = [p[len(shown) + 2:] if p.startswith(f"{shown}: ") else p for p in found]
    if len(found) == 1:
        message = f"{shown} cannot be imported: {found[0]}"
    else:
        message = f"{shown} cannot be imported ({len(found)} problems): " + "; ".join(found)
    return ApiError(400, message, found, getattr(exc, "hints", None))


def problems(exc) -> list:
    """The problems of an import or planning error: ``OnnxImportError.problems`` when present,
    else the lines of its text."""
    found = getattr(exc, "problems", None)
    if found:
        return [str(p) for p in found]
    lines = [ln.strip(" -*\u2022") for ln in str(exc).splitlines()]
    return [ln for ln in lines if ln]

"""Request bodies read with limits, for every route that takes one: ``body_chunks`` (a size cap
and an idle timeout, streamed; the dataset uploads write it to a file), ``read_body`` (that, in
memory) and ``read_json`` (that, then JSON no deeper than ``MAX_DEPTH``).

Every refusal is an ``ApiError`` naming the problem and never echoing the body: 413 over the
cap, 408 for a stalled client, 400 for a body that is not JSON or nests too deeply.
"""

from __future__ import annotations

import asyncio
import json

from .errors import ApiError

BODY_IDLE_TIMEOUT_S = 20.0  # a client that stops sending its body for this long gets 408
JSON_LIMIT = 64 << 10       # a JSON body: a run configuration or a metrics batch is a few KB
MAX_DEPTH = 32              # arrays / objects inside each other (a config needs 3)
MAX_DIGITS = 4300           # Python's limit for converting a number's digits (sys.int_info)


async def body_chunks(request, limit: int, what: str = "request body",
                      limit_name: str = "the limit"):
    """The body's chunks (an async iterator), at most ``limit`` bytes in all (413 beyond, by
    Content-Length before the first chunk or while streaming), each within
    ``BODY_IDLE_TIMEOUT_S`` (408 for a stalled client); ``limit_name`` names the limit in
    the 413's text. The one body reader: ``read_body`` and the dataset uploads use it."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise ApiError(400, "bad Content-Length")
        if int(declared) > limit:
            raise ApiError(413, f"{what} is {int(declared):,} bytes; {limit_name} is "
                                f"{limit:,}")
    size = 0
    stream = request.stream().__aiter__()
    while True:
        try:
            chunk = await asyncio.wait_for(stream.__anext__(), BODY_IDLE_TIMEOUT_S)
        except StopAsyncIteration:
            break
        except asyncio.TimeoutError:
            raise ApiError(408, f"{what}: the client stopped sending") from None
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"{what} is larger than {limit_name} of {limit:,} bytes")
        yield chunk


async def read_body(request, limit: int, what: str = "request body") -> bytes:
    """The body, at most ``limit`` bytes (``body_chunks``: 413 beyond, 408 for a stalled
    client)."""
    return b"".join([chunk async for chunk in body_chunks(request, limit, what)])


def parse_json(raw: bytes | str, what: str = "the body"):
    """``raw`` as JSON; ApiError 400 naming the problem (its line and column) when it is not
    JSON, nests arrays / objects deeper than ``MAX_DEPTH`` or holds a number of more than
    ``MAX_DIGITS`` digits. Nothing of ``raw`` is echoed."""
    try:
        data = json.loads(raw)
    except RecursionError:
        raise ApiError(400, f"{what} nests arrays or objects more than {MAX_DEPTH} levels "
                            "deep") from None
    except (ValueError, UnicodeDecodeError) as exc:
        if "digits" in str(exc) and "limit" in str(exc):
            raise ApiError(400, f"{what} holds a number of more than {MAX_DIGITS:,} "
                                "digits") from None
        raise ApiError(400, f"{what} is not valid JSON: {_short(exc)}") from None
    if _depth(data, MAX_DEPTH + 1) > MAX_DEPTH:
        raise ApiError(400, f"{what} nests arrays or objects more than {MAX_DEPTH} levels "
                            "deep")
    return data


async def read_json(request, what: str = "the body", limit: int = JSON_LIMIT):
    """The request's body (at most ``limit`` bytes, ``read_body``) parsed by ``parse_json``."""
    return parse_json(await read_body(request, limit, what), what)


def _depth(value, stop: int) -> int:
    """How deep arrays / objects nest in ``value`` (0 for a scalar), counted up to ``stop``."""
    if stop <= 0 or not isinstance(value, (list, dict)):
        return 0
    items = value.values() if isinstance(value, dict) else value
    return 1 + max((_depth(v, stop - 1) for v in items), default=0)


def _short(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:200] + "..."

"""Per-client limits for the classroom routes: token-bucket rate limits with bounded memory,
and request bodies read with a size cap and an idle timeout.

The buckets live in the process: with several server processes each one limits on its own (a
client gets at most N times the rate), which is the point of a per-client limit anyway.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

from ..server import ApiError

BODY_IDLE_TIMEOUT_S = 20.0  # a client that stops sending its body for this long gets 408


class RateLimiter:
    """Token buckets by key: ``rate`` tokens per second up to ``burst``; at most ``max_keys``
    buckets are kept (least recently used dropped: memory stays bounded however many clients
    come and go).

    >>> rl = RateLimiter(rate=1.0, burst=2)
    >>> [rl.allow("a", now=0.0) for _ in range(3)]
    [True, True, False]
    """

    def __init__(self, rate: float, burst: float, max_keys: int = 10000):
        self.rate, self.burst, self.max_keys = rate, burst, max_keys
        self.buckets: OrderedDict = OrderedDict()

    def allow(self, key: str, cost: float = 1.0, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        tokens, last = self.buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        ok = tokens >= cost
        self.buckets[key] = (tokens - cost if ok else tokens, now)
        while len(self.buckets) > self.max_keys:
            self.buckets.popitem(last=False)
        return ok

    def retry_after(self, key: str, cost: float = 1.0) -> int:
        tokens, _ = self.buckets.get(key, (0.0, 0.0))
        return max(1, int((cost - tokens) / self.rate + 0.999))

    def check(self, key: str, what: str, cost: float = 1.0) -> None:
        """ApiError 429 (with a Retry-After hint in the message) when ``key`` is over."""
        if not self.allow(key, cost):
            wait = self.retry_after(key, cost)
            raise ApiError(429, f"too many requests ({what}); retry in {wait} s")


async def read_body(request, limit: int, what: str = "request body") -> bytes:
    """The body, at most ``limit`` bytes (413 beyond, by Content-Length or while streaming),
    each chunk within ``BODY_IDLE_TIMEOUT_S`` (408 for a stalled client)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise ApiError(400, "bad Content-Length")
        if int(declared) > limit:
            raise ApiError(413, f"{what} is {int(declared):,} bytes; the limit is {limit:,}")
    chunks, size = [], 0
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
            raise ApiError(413, f"{what} is larger than the limit of {limit:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)

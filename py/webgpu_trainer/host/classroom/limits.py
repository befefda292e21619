"""Per-client limits for the classroom routes: token-bucket rate limits with bounded memory
(request bodies are read with a size cap and an idle timeout by ``host/bodies.py``).

The buckets live in the process: with several server processes each one limits on its own (a
client gets at most N times the rate), which is the point of a per-client limit anyway.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from ..server import ApiError


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

    def would_allow(self, key: str, cost: float = 1.0, now: float | None = None) -> bool:
        """Whether ``allow`` would say yes now (nothing is taken)."""
        now = time.monotonic() if now is None else now
        tokens, last = self.buckets.get(key, (self.burst, now))
        return min(self.burst, tokens + (now - last) * self.rate) >= cost

    def retry_after(self, key: str, cost: float = 1.0) -> int:
        tokens, _ = self.buckets.get(key, (0.0, 0.0))
        return max(1, int((cost - tokens) / self.rate + 0.999))

    def check(self, key: str, what: str, cost: float = 1.0) -> None:
        """ApiError 429 (with a Retry-After hint in the message) when ``key`` is over."""
        if not self.allow(key, cost):
            wait = self.retry_after(key, cost)
            raise ApiError(429, f"too many requests ({what}); retry in {wait} s")

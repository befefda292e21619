"""In-process change notification for the teacher's live stream: the student routes ``bump``
a session's version after each write they committed, and the stream ``wait``s for a version
other than the one it read, with a timeout (its slow poll of the database, which is how it
sees writes that another server process made to a shared PostgreSQL).
"""

from __future__ import annotations

import asyncio


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class Changes:
    """A version counter per session and the streams waiting for it to move. Waiters are
    futures of their own event loop, so one ``Changes`` serves any loop.

    >>> ch = Changes(); ch.bump("s1"); ch.version("s1"), ch.version("s2")
    (1, 0)
    """

    def __init__(self):
        self.versions: dict = {}
        self._waiters: set = set()

    def version(self, sid: str) -> int:
        """Session ``sid``'s version: how many writes this process made to it."""
        return self.versions.get(sid, 0)

    def bump(self, sid: str) -> None:
        """Session ``sid`` changed (call after the write committed): wake every waiter."""
        self.versions[sid] = self.version(sid) + 1
        waiters, self._waiters = self._waiters, set()
        for fut in waiters:
            fut.get_loop().call_soon_threadsafe(_wake, fut)

    async def wait(self, sid: str, seen: int, timeout: float) -> bool:
        """Until ``sid``'s version differs from ``seen`` (True; at once when it already does)
        or ``timeout`` seconds passed (False)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while self.version(sid) == seen:
            left = end - loop.time()
            if left <= 0:
                return False
            fut = loop.create_future()
            self._waiters.add(fut)
            try:
                await asyncio.wait_for(fut, left)
            except asyncio.TimeoutError:
                return self.version(sid) != seen
            finally:
                self._waiters.discard(fut)
        return True

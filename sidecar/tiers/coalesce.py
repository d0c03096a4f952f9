"""Read coalescing: concurrent batched reads share one backend round trip (also used for
writes that may go together, such as the Redis HoldingStore's write-and-release).

Callers that arrive in the same event-loop iteration, or while a read is in flight,
are answered by one `fetch` of all their keys (in arrival order, at most `max_keys`
per fetch unless a single caller brings more). At most one fetch runs at a time;
callers queued behind it form the next one, so every caller's read starts after
its call did. Each caller gets exactly its own values, in its order, plus the
fetch's shared result (e.g. an epoch read in the same round trip).

Deadlines: a caller never waits longer than `deadline_s` from its own call; past it
it gets TierTimeout, whatever the fetch is doing. A fetch is given the time left to
its latest waiter (callers whose deadlines passed are dropped before it starts).
A fetch's exception goes to every waiter of that fetch; a cancelled caller is
simply skipped; the fetch task itself being cancelled fails its waiters with
TierUnavailable. No backend knowledge lives here: `fetch` does the I/O.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

from sidecar.errors import TierTimeout, TierUnavailable

K = TypeVar("K")
V = TypeVar("V")
S = TypeVar("S")

Fetch = Callable[[list[K], float], Awaitable[tuple[Sequence[V], S]]]
"""fetch(keys, timeout_s) -> (one value per key in order, shared result)."""


class _Waiter(Generic[K, V, S]):
    __slots__ = ("deadline", "future", "keys")

    def __init__(
        self, keys: Sequence[K], future: asyncio.Future[tuple[list[V], S]], deadline: float
    ) -> None:
        self.keys = keys
        self.future = future
        self.deadline = deadline


def _expire(future: asyncio.Future[Any], message: str) -> None:
    if not future.done():
        future.set_exception(TierTimeout(message))


class ReadCoalescer(Generic[K, V, S]):
    """Gathers concurrent `get` calls into single `fetch` calls (see the module docstring)."""

    def __init__(
        self, fetch: Fetch[K, V, S], *, deadline_s: float, max_keys: int = 1024, what: str = "read"
    ) -> None:
        if deadline_s <= 0:
            raise ValueError("deadline_s must be positive")
        if max_keys < 1:
            raise ValueError("max_keys must be at least 1")
        self._fetch = fetch
        self._deadline_s = deadline_s
        self._max_keys = max_keys
        self._timeout_message = f"{what}: no answer within {deadline_s * 1000:.0f} ms"
        self._queue: deque[_Waiter[K, V, S]] = deque()
        self._flusher: asyncio.Task[None] | None = None
        self.fetches = 0
        """Fetches started (for tests and telemetry)."""

    async def get(self, keys: Sequence[K]) -> tuple[list[V], S]:
        """This caller's values (one per key, in order) and the shared result of its fetch."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[list[V], S]] = loop.create_future()
        deadline = loop.time() + self._deadline_s
        self._queue.append(_Waiter(keys, future, deadline))
        if self._flusher is None:
            self._flusher = loop.create_task(self._flush_all())
        timer = loop.call_at(deadline, _expire, future, self._timeout_message)
        try:
            return await future
        finally:
            timer.cancel()

    def _take(self, now: float) -> list[_Waiter[K, V, S]]:
        """Queued callers still waiting, up to max_keys keys (at least one caller)."""
        batch: list[_Waiter[K, V, S]] = []
        n = 0
        queue = self._queue
        while queue:
            w = queue[0]
            if w.future.done():  # cancelled or already timed out
                queue.popleft()
                continue
            if w.deadline <= now:
                queue.popleft()
                _expire(w.future, self._timeout_message)
                continue
            if batch and n + len(w.keys) > self._max_keys:
                break
            queue.popleft()
            batch.append(w)
            n += len(w.keys)
        return batch

    async def _flush_all(self) -> None:
        loop = asyncio.get_running_loop()
        batch: list[_Waiter[K, V, S]] = []
        try:
            while True:
                batch = self._take(loop.time())
                if not batch:
                    return
                await self._flush(batch, loop)
                batch = []
        except asyncio.CancelledError:
            failure = TierUnavailable("read cancelled (shutting down)")
            for w in (*batch, *self._queue):
                if not w.future.done():
                    w.future.set_exception(failure)
            self._queue.clear()
            raise
        finally:
            self._flusher = None

    async def _flush(self, batch: list[_Waiter[K, V, S]], loop: asyncio.AbstractEventLoop) -> None:
        keys: list[K] = []
        latest = 0.0
        for w in batch:
            keys.extend(w.keys)
            if w.deadline > latest:
                latest = w.deadline
        self.fetches += 1
        try:
            values, shared = await self._fetch(keys, max(latest - loop.time(), 0.001))
            if len(values) != len(keys):
                raise TierUnavailable(f"fetch answered {len(values)} values for {len(keys)} keys")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every waiter of this fetch gets the same failure
            for w in batch:
                if not w.future.done():
                    w.future.set_exception(exc)
            return
        pos = 0
        for w in batch:
            n = len(w.keys)
            if not w.future.done():
                w.future.set_result((list(values[pos : pos + n]), shared))
            pos += n

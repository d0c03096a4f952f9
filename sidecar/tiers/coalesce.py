"""Read coalescing: concurrent batched reads share one backend round trip (also used for
writes that may go together, such as the Redis HoldingStore's write-and-release).

A caller that finds no fetch in flight and nobody queued fetches its own keys at
once, in its own task: a lone request pays one round trip and nothing more (no task
to start, no hand-over of the answer; at concurrency 1 through the gateway that was
~40 us per warm-tier call). Callers that arrive while a fetch is in flight are
answered by one `fetch` of all their keys (in arrival order, at most `max_keys` per
fetch unless a single caller brings more). At most one fetch runs at a time; callers
queued behind it form the next one, so every caller's read starts after its call
did. Each caller gets exactly its own values, in its order, plus the fetch's shared
result (e.g. an epoch read in the same round trip).

Deadlines: a caller never waits longer than `deadline_s` from its own call; past it
it gets TierTimeout, whatever the fetch is doing (a fetch of its own is given the
whole deadline and is cut off, should it ignore it, a millisecond after; a `bounded`
fetch, one that waits only under a wall-clock deadline of the `timeout_s` it is given
and raises TierTimeout past it, is not wrapped in a second one). A shared
fetch is given the time left to its latest waiter (callers whose deadlines passed
are dropped before it starts). A fetch's exception goes to every waiter of that
fetch; a cancelled caller is simply skipped (a caller fetching alone takes only its
own fetch with it); the fetch task itself being cancelled fails its waiters with
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


_GRACE_S = 0.001
"""How long past the deadline a lone fetch that ignores its own is let run (the
fetch's deadline acts first, so its failure is what the caller sees)."""


def _expire(future: asyncio.Future[Any], message: str) -> None:
    if not future.done():
        future.set_exception(TierTimeout(message))


class ReadCoalescer(Generic[K, V, S]):
    """Gathers concurrent `get` calls into single `fetch` calls (see the module docstring)."""

    def __init__(
        self,
        fetch: Fetch[K, V, S],
        *,
        deadline_s: float,
        max_keys: int = 1024,
        what: str = "read",
        bounded: bool = False,
    ) -> None:
        """`bounded`: `fetch` bounds itself by the wall-clock `timeout_s` it is given
        (TierTimeout past it), so a lone caller's fetch needs no safety net here (see
        the module docstring); a timer costs ~10 us, and a Redis call had two nested."""
        if deadline_s <= 0:
            raise ValueError("deadline_s must be positive")
        if max_keys < 1:
            raise ValueError("max_keys must be at least 1")
        self._fetch = fetch
        self._bounded = bounded
        self._deadline_s = deadline_s
        self._max_keys = max_keys
        self._timeout_message = f"{what}: no answer within {deadline_s * 1000:.0f} ms"
        self._queue: deque[_Waiter[K, V, S]] = deque()
        self._flusher: asyncio.Task[None] | None = None
        self._alone = False
        """A caller is fetching its own keys (the queue waits for it to finish)."""
        self.fetches = 0
        """Fetches started (for tests and telemetry)."""

    async def get(self, keys: Sequence[K]) -> tuple[list[V], S]:
        """This caller's values (one per key, in order) and the shared result of its fetch."""
        if self._flusher is None and not self._alone and not self._queue:
            return await self._fetch_alone(keys)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[list[V], S]] = loop.create_future()
        deadline = loop.time() + self._deadline_s
        self._queue.append(_Waiter(keys, future, deadline))
        if self._flusher is None and not self._alone:
            self._flusher = loop.create_task(self._flush_all())
        timer = loop.call_at(deadline, _expire, future, self._timeout_message)
        try:
            return await future
        finally:
            timer.cancel()

    async def _fetch_alone(self, keys: Sequence[K]) -> tuple[list[V], S]:
        """One caller's fetch in its own task; whoever queued meanwhile is served next."""
        self._alone = True
        self.fetches += 1
        try:
            if self._bounded:
                values, shared = await self._fetch(list(keys), self._deadline_s)
            else:
                async with asyncio.timeout(self._deadline_s + _GRACE_S):
                    values, shared = await self._fetch(list(keys), self._deadline_s)
        except TimeoutError:
            raise TierTimeout(self._timeout_message) from None
        finally:
            self._alone = False
            if self._queue and self._flusher is None:
                self._flusher = asyncio.get_running_loop().create_task(self._flush_all())
        if len(values) != len(keys):
            raise TierUnavailable(f"fetch answered {len(values)} values for {len(keys)} keys")
        return list(values), shared

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

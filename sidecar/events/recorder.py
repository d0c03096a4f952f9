"""The hot tier's BlockEvents on the event loop: changes of one loop turn, one batch.

Each change is recorded (a list append); the first of a turn schedules a flush for
the end of the turn, which hands the turn's events to the publisher as one batch.
Nothing here blocks: the publisher queues the batch or drops it. A timer on the loop
turns demoted blocks whose warm-tier ttl passed into removals (the loop's clock).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sidecar.events.builder import Event, EventBuilder
from sidecar.kv.layout import BlockKey, KvLayout


@dataclass
class PublisherStats:
    """A publisher's counters (`infercache_kv_event_publisher_events_total{event}`)."""

    published: int = 0
    """Batches sent."""
    dropped: int = 0
    """Batches dropped: the queue was full (a subscriber sees the gap in the sequence)."""
    send_failures: int = 0
    """Batches that could not be encoded or sent."""


class Publisher(Protocol):
    """Sends batches of events (publisher.py); never blocks."""

    stats: PublisherStats

    def publish(self, ts: float, events: Sequence[Event]) -> bool:
        """Queue one batch; False when it was dropped (the queue is full or closed)."""
        ...

    def close(self, timeout_s: float = 1.0) -> None:
        """Send what is queued (bounded), then close; blocks (run it on a thread)."""
        ...


class EventRecorder:
    """Implements kv/block_events.py's BlockEvents for a publisher."""

    def __init__(self, publisher: Publisher, clock: Callable[[], float] = time.time) -> None:
        """`clock`: wall-clock seconds, the batches' `ts` (as vLLM's)."""
        self._builder = EventBuilder()
        self._publisher = publisher
        self._clock = clock
        self._scheduled = False
        self._expiry: asyncio.TimerHandle | None = None

    def cleared(self) -> None:
        """Tell subscribers that whatever an earlier publisher of this sidecar reported
        is void (AllBlocksCleared): sent first by every new publisher."""
        self._builder.cleared()
        self._soon()

    def scope(
        self, prefix: bytes, scope: bytes, layout: KvLayout, tenant: str, cache_salt: str
    ) -> None:
        """Name a request scope (what its blocks' events carry)."""
        self._builder.scope(prefix, scope, layout, tenant, cache_salt)

    def version(self, version: str, fingerprint: str, block_size: int) -> None:
        """Name a version's weights and block size."""
        self._builder.version(version, fingerprint, block_size)

    def pool_stored(self, key: BlockKey, version: Hashable) -> None:
        """A block published in the pool."""
        self._builder.pool_stored(key, version)
        self._soon()

    def pool_removed(self, key: BlockKey) -> None:
        """A block the pool forgot."""
        self._builder.pool_removed(key)
        self._soon()

    def warm_stored(self, keys: Sequence[BlockKey], version: str, ttl_ms: int) -> None:
        """Blocks this sidecar demoted, kept by the warm tier `ttl_ms` from now."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (tools, tests of the pure parts): no expiry timer
            self._builder.warm_stored(keys, version, float("inf"))
            self.flush()
            return
        self._builder.warm_stored(keys, version, loop.time() + ttl_ms / 1000)
        self._arm(loop)
        self._soon()

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """A timer for the next expiry, unless one runs for it or earlier."""
        due = self._builder.next_expiry()
        if due is None or due == float("inf"):
            return
        if self._expiry is not None and self._expiry.when() <= due:
            return
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry = loop.call_at(due, self._expire, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._expiry = None
        self._builder.expire(loop.time())
        self._arm(loop)
        if self._builder:
            self.flush()

    def warm_dropped(self, version: str) -> None:
        """A version's warm values were deleted."""
        self._builder.warm_dropped(version)
        self._soon()

    def _soon(self) -> None:
        if self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (tools, tests of the pure parts): at once
            self.flush()
            return
        self._scheduled = True
        loop.call_soon(self.flush)

    def flush(self) -> None:
        """Publish what was recorded, as one batch."""
        self._scheduled = False
        events = self._builder.take()
        if events:
            self._publisher.publish(self._clock(), events)

"""The hot tier's BlockEvents on the event loop: changes of one loop turn, one batch.

Each change is recorded (a list append); the first of a turn schedules a flush for
the end of the turn, which hands the turn's events to the publisher as one batch.
Nothing here blocks: the publisher queues the batch or drops it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol

from sidecar.events.builder import Event, EventBuilder
from sidecar.kv.layout import BlockKey


class Publisher(Protocol):
    """Sends batches of events (publisher.py); never blocks."""

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

    def warm_stored(self, keys: Sequence[BlockKey], version: str) -> None:
        """Blocks this sidecar demoted."""
        self._builder.warm_stored(keys, version)
        self._soon()

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

"""Deadlines of named records (leases, attachments), found in O(log n) and bounded in size.

A heap of (deadline, seq, name) with at most one live entry per name: extending a
deadline pushes nothing (the queued entry surfaces early, the record's true deadline
is read then, and the name is queued again at it), only an earlier deadline pushes a
new entry. Names discarded or superseded by an earlier push leave stale entries; the
heap is rebuilt from the live names once stale entries outnumber them, so its size
stays below 2 x live + COMPACT_SLACK however often records are renewed or removed.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

# Stale entries tolerated beyond the live ones before a rebuild (keeps small tables cheap).
COMPACT_SLACK = 64


class ExpiryQueue:
    """Which names are due; the owner keeps each record's true deadline."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._queued: dict[str, float] = {}
        """The deadline of each name's live heap entry."""
        self._seq = itertools.count()

    def __len__(self) -> int:
        """Heap entries, stale ones included (what the bound is about)."""
        return len(self._heap)

    def schedule(self, name: str, deadline: float) -> None:
        """Make sure `name` surfaces no later than `deadline`."""
        queued = self._queued.get(name)
        if queued is not None and queued <= deadline:
            return  # surfaces earlier; due() re-queues it at its true deadline
        self._queued[name] = deadline
        heapq.heappush(self._heap, (deadline, next(self._seq), name))
        self._compact()

    def discard(self, name: str) -> None:
        """Stop tracking `name` (its entry goes stale)."""
        if self._queued.pop(name, None) is not None:
            self._compact()

    def due(self, now: float, deadline_of: Callable[[str], float | None]) -> list[str]:
        """Names whose true deadline (`deadline_of`, None = gone) is <= now; they are no
        longer tracked. Names surfacing early are queued again at their deadline."""
        out: list[str] = []
        heap, queued = self._heap, self._queued
        requeue: list[tuple[str, float]] = []
        while heap and heap[0][0] <= now:
            deadline, _, name = heapq.heappop(heap)
            if queued.get(name) != deadline:
                continue  # stale: discarded, or queued again earlier
            del queued[name]
            actual = deadline_of(name)
            if actual is None:
                continue
            if actual <= now:
                out.append(name)
            else:
                requeue.append((name, actual))
        for name, deadline in requeue:
            self.schedule(name, deadline)
        return out

    def _compact(self) -> None:
        if len(self._heap) <= 2 * len(self._queued) + COMPACT_SLACK:
            return
        seq = self._seq
        self._heap = [(d, next(seq), name) for name, d in self._queued.items()]
        heapq.heapify(self._heap)

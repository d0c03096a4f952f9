"""Switching the current model version: unpublish, demote, drop, and the background
tasks that do it (one demotion per version, drops of older versions' warm values).

The previous version's blocks leave the hot index at once (a lookup can no longer
find them) and are demoted to the warm tier in the background; anything older leaves
the hot pool and the warm tier. Mutated on the event loop only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

from sidecar.kv.block_events import BlockEvents
from sidecar.kv.integrity import BlockSeals
from sidecar.kv.movement import Demoted, KvStats, WarmMover
from sidecar.kv.slot_index import SlotIndex

log = structlog.get_logger("infercache.kv")


class VersionSwitcher:
    """Demotions and drops of one hot tier's non-current versions."""

    def __init__(
        self,
        index: SlotIndex,
        mover: WarmMover | None,
        block_bytes: list[int],
        stats: KvStats,
        seals: BlockSeals,
        events: BlockEvents | None = None,
    ) -> None:
        self._index = index
        self._events = events
        self._seals = seals
        self._mover = mover
        self._block_bytes = block_bytes
        self._stats = stats
        self._tasks: set[asyncio.Task[None]] = set()
        self._demotions: dict[str, asyncio.Task[None]] = {}

    def switch(self, version: str, old: str | None, fingerprint: str, block_size: int = 0) -> None:
        """`version` (of weights `fingerprint`, blocks of `block_size` tokens) became
        current, `old` was (None: the first version)."""
        if self._events is not None:
            self._events.version(version, fingerprint, block_size)
        index = self._index
        if old is not None:
            # Unpublish the old version now (a lookup can no longer find it); an internal
            # pin keeps each slot's bytes intact until the demotion has copied them.
            demoted = []
            for slot in sorted(index.group_slots(old)):
                index.pin(slot)
                key = index.drop(slot)
                assert key is not None
                demoted.append(Demoted(slot, key, self._block_bytes[slot], self._seals.get(slot)))
            if self._mover is not None:
                self._demotions[old] = self.spawn(self._mover.demote(old, demoted))
            else:
                index.unpin_many(d.slot for d in demoted)
                self._stats.dropped_blocks += len(demoted)
        # Anything older (e.g. a version demoted earlier and still hot) leaves the pool.
        keep = {v for v in (version, old) if v is not None}
        for v, task in list(self._demotions.items()):
            if v not in keep or task.done():
                task.cancel()  # its slots are unpinned by the demotion itself
                del self._demotions[v]
        for group in list(index.groups()):
            if group not in keep:
                for slot in index.group_slots(group):
                    index.drop(slot)
                    self._stats.dropped_blocks += 1
        if self._mover is not None:
            self.spawn(self._mover.drop_versions(keep))
        log.info("kv_version_switched", fingerprint=fingerprint, version=version, previous=old)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run in the background, kept referenced until done."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @property
    def demoting(self) -> bool:
        """Whether a demotion may still free slots."""
        return any(not t.done() for t in self._demotions.values())

    async def wait_demotions(self, timeout_s: float) -> None:
        """Wait (at most timeout_s) for running demotions: their slots come free."""
        pending = [t for t in self._demotions.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)

    async def settled(self) -> None:
        """Wait for background demotions and drops (tests and shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def tasks(self) -> list[asyncio.Task[None]]:
        """The background tasks (shutdown cancels them)."""
        return list(self._tasks)

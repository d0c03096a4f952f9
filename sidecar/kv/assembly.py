"""The parts of one hot tier that exist once its pool does, wired together."""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.kv.attachments import Attachments
from sidecar.kv.block_events import BlockEvents
from sidecar.kv.holds import Holds
from sidecar.kv.integrity import BlockSeals
from sidecar.kv.movement import KvStats, WarmMover
from sidecar.kv.pins import LeaseTable
from sidecar.kv.pool import SlotPool
from sidecar.kv.slot_index import SlotIndex
from sidecar.kv.types import KvSettings
from sidecar.kv.versions import VersionSwitcher
from sidecar.kv.warm import KvWarmStore
from sidecar.macs import FleetKeys


@dataclass(frozen=True, slots=True)
class PoolParts:
    """Slot bookkeeping, seals, movement to the warm tier, version switches and pins."""

    index: SlotIndex
    seals: BlockSeals
    block_bytes: list[int]
    """Per slot, the size of the block published there."""
    mover: WarmMover | None
    versions: VersionSwitcher
    holds: Holds


def assemble(
    pool: SlotPool,
    index: SlotIndex,
    warm: KvWarmStore | None,
    settings: KvSettings,
    stats: KvStats,
    leases: LeaseTable,
    attachments: Attachments,
    keys: FleetKeys,
    events: BlockEvents | None = None,
) -> PoolParts:
    """The parts over a new pool and its index (`keys` seal its blocks; `events` hears
    of the warm tier's blocks, the index's observer of the pool's)."""
    block_bytes = [0] * index.num_slots
    seals = BlockSeals(index.num_slots, keys)
    mover = None
    if warm is not None:
        mover = WarmMover(
            index,
            pool,
            warm,
            ttl_ms=settings.warm_ttl_s * 1000,
            stats=stats,
            is_current=lambda v: v == attachments.current,
            block_bytes=block_bytes,
            seals=seals,
            events=events,
        )
    index.observer = events
    versions = VersionSwitcher(index, mover, block_bytes, stats, seals, events)
    holds = Holds(index, leases, attachments, settings, stats)
    return PoolParts(index, seals, block_bytes, mover, versions, holds)

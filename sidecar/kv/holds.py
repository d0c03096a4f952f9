"""Who holds which slots of one pool: leases' pins, and the sweep that reclaims the
pins of lapsed leases and of attachments whose process stopped calling.

Every pin a lease adds is recorded in the lease (one entry per pin), so dropping a
lease, by Release, expiry or its attachment's reclaim, unpins exactly what it pinned.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from sidecar.errors import FailedPrecondition
from sidecar.kv.attachments import Attachments
from sidecar.kv.integrity import BlockSeals
from sidecar.kv.layout import BlockKey
from sidecar.kv.movement import KvStats
from sidecar.kv.pins import LeaseRecord, LeaseTable
from sidecar.kv.pool import SlotPool
from sidecar.kv.slot_index import SlotIndex
from sidecar.kv.types import Attachment, KvSettings, LeaseView

log = structlog.get_logger("infercache.kv")


class Holds:
    """Pins of leases on a slot index, and their reclaim."""

    def __init__(
        self,
        index: SlotIndex,
        leases: LeaseTable,
        attachments: Attachments,
        settings: KvSettings,
        stats: KvStats,
    ) -> None:
        self._index = index
        self._leases = leases
        self._attachments = attachments
        self._settings = settings
        self._stats = stats

    def ttl(self, ttl_ms: int) -> int:
        """The ttl granted for a requested one (0: the default)."""
        if ttl_ms <= 0:
            return self._settings.default_lease_ms
        return min(ttl_ms, self._settings.max_lease_ms)

    def view(self, record: LeaseRecord) -> LeaseView:
        """The lease as clients see it."""
        return LeaseView(record.lease_id, self._leases.wall_ms(record.expires_at), record.ttl_ms)

    def sweep(self) -> None:
        """Reclaim expired attachments (with all their leases), then expired leases."""
        # A process that died without detaching: its leases (pins and allocations) go too.
        for a in self._attachments.expired():
            self.drop_all_of(a.attachment_id)
        for record in self._leases.expired():
            self._index.unpin_many(record.pins)
            self._stats.expired_leases += 1

    def drop(self, record: LeaseRecord) -> int:
        """Forget a lease and unpin what it pinned; the pins dropped."""
        self._leases.remove(record.lease_id)
        self._index.unpin_many(record.pins)
        return len(record.pins)

    def cut(self, record: LeaseRecord, slots: Sequence[int]) -> None:
        """Unpin one pin of each slot from a live lease (a hit cut short)."""
        for slot in slots:
            record.pins.remove(slot)
            self._index.unpin(slot)

    def drop_all_of(self, attachment_id: str) -> int:
        """Drop every lease of an attachment; the pins dropped."""
        return sum(self.drop(r) for r in self._leases.of_attachment(attachment_id))

    def pin_new(self, a: Attachment, slots: list[int], ttl_ms: int) -> LeaseRecord:
        """A new lease of `a` pinning `slots` (ResourceExhausted before any pin when the
        lease table is full)."""
        record = self._leases.create(a.attachment_id, self.ttl(ttl_ms))
        self._index.pin_many(slots)
        record.pins.extend(slots)
        return record

    def after_wait(
        self,
        a: Attachment,
        record: LeaseRecord | None,
        slots: list[int],
        prefix: bytes,
        hashes: Sequence[bytes],
        ttl_ms: int,
    ) -> tuple[LeaseRecord | None, list[int]]:
        """A prefix lookup's lease and slots once its wait for a promotion is over.

        Anything may have happened meanwhile: the lease may have expired (its pins went
        with it, so its slots may have been reused), the attachment may have been
        detached, reclaimed or superseded. A lease is only extended while it is still
        live; a lapsed one is replaced and the chain walked again from its start."""
        self.sweep()
        if self._attachments.find(a.attachment_id) is not a:
            raise FailedPrecondition("the KV attachment was detached or expired during the lookup")
        if record is not None and not self._leases.holds(record):
            record, slots = None, []
        if a.superseded:
            return record, slots
        more = self._index.walk(prefix, hashes, len(slots))
        if more:
            if record is None:
                record = self.pin_new(a, more, ttl_ms)
            else:
                self._index.pin_many(more)
                record.pins.extend(more)
            slots = slots + more
        return record, slots

    async def verified(
        self,
        a: Attachment,
        record: LeaseRecord | None,
        slots: list[int],
        seals: BlockSeals,
        pool: SlotPool,
    ) -> tuple[LeaseRecord | None, list[int]]:
        """A hit's lease and slots cut before its first block whose bytes no longer match
        their seal (that block is dropped, counted and logged); the slots stay pinned by
        the lease while they are measured."""
        index = self._index
        keyed: list[tuple[int, BlockKey]] = []
        for slot in slots:
            key = index.key_of(slot)
            if key is None:  # unpublished meanwhile (a version switch): not handed out
                break
            keyed.append((slot, key))
        tags = await seals.measure(pool, a.version, keyed, a.layout.block_bytes)
        bad = seals.first_altered([s for s, _ in keyed], tags)
        keep = len(keyed) if bad is None else bad
        if bad is not None:
            index.drop(slots[bad])
            self._stats.altered_blocks += 1
            log.warning("kv_block_altered", at="hand-out", slot=slots[bad], version=a.version)
        if keep == len(slots):
            return record, slots
        if record is None or not self._leases.holds(record):  # lapsed during the check
            return None, []
        self.cut(record, slots[keep:])
        if not keep:
            self.drop(record)
            return None, []
        return record, slots[:keep]

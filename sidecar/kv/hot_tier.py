"""The KV hot tier: version binding, prefix lookups, allocation and leases (who is
attached, and which version is current: kv/attachments.py).

Version binding: every block key is the digest of (model fingerprint, adapter,
KV layout, tenant, cache salt) followed by the client's block hash, so an
attachment can only ever find blocks published under its own scope. Attaching
a new fingerprint makes it the current version: attachments of other
fingerprints are superseded (their lookups, allocations and commits fail with
FailedPrecondition), the previous version's blocks leave the hot index at once
and are demoted to the warm tier in the background, and warm values of any
older version are dropped. A lookup that runs into warm blocks of the current
version promotes them within a time bound, else answers "retry later".

All state is mutated on the event loop; only pool creation runs on a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import structlog

from sidecar.errors import FailedPrecondition, InvalidArgument, ResourceExhausted
from sidecar.kv.attachments import Attachments
from sidecar.kv.layout import BlockKey, KvLayout, request_scope
from sidecar.kv.movement import Demoted, KvStats, WarmMover
from sidecar.kv.pins import LeaseRecord, LeaseTable
from sidecar.kv.pool import SlotPool
from sidecar.kv.slot_index import SlotIndex
from sidecar.kv.types import (
    Attachment,
    KvSettings,
    LeaseView,
    PoolInfo,
    PrefixResult,
    check_commit,
    check_hashes,
    check_text,
)
from sidecar.kv.warm import KvWarmStore

log = structlog.get_logger("infercache.kv")

PoolFactory = Callable[[int, int], SlotPool]
"""(num_slots, slot_bytes) -> pool; called once, on a worker thread."""

# Most blocks one lookup tries to promote (the rest come with the next lookup).
MAX_PROMOTE_BLOCKS = 1024
# How long an allocation short of slots waits for a running demotion to free some.
DEMOTION_WAIT_S = 1.0


class KvHotTier:
    """The domain behind KvCacheService."""

    def __init__(
        self,
        settings: KvSettings,
        pool_factory: PoolFactory,
        warm: KvWarmStore | None = None,
        *,
        leases: LeaseTable | None = None,
        pod_fingerprint: str = "",
        allow_foreign: bool = False,
    ) -> None:
        """`pod_fingerprint` and `allow_foreign`: which model fingerprints may attach
        (see Attachments; "" = the pod's weights are unknown, any may)."""
        self.settings = settings
        self.stats = KvStats()
        self._factory = pool_factory
        self._warm = warm
        self.leases = leases if leases is not None else LeaseTable(settings.max_leases)
        self._pool: SlotPool | None = None
        self._index: SlotIndex | None = None
        self._mover: WarmMover | None = None
        self._block_bytes: list[int] = []
        self._pool_lock = asyncio.Lock()
        self.attachments = Attachments(
            settings.max_attachments,
            self.stats,
            pod_fingerprint=pod_fingerprint,
            allow_foreign=allow_foreign,
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self._demotions: dict[str, asyncio.Task[None]] = {}

    @property
    def index(self) -> SlotIndex:
        """The slot index (exists from the first attachment on)."""
        if self._index is None:
            raise FailedPrecondition("no KV pool yet: AttachHotTier first")
        return self._index

    @property
    def pool(self) -> SlotPool:
        """The slot pool (exists from the first attachment on)."""
        if self._pool is None:
            raise FailedPrecondition("no KV pool yet: AttachHotTier first")
        return self._pool

    # -- attachments -------------------------------------------------------------

    async def attach(
        self,
        fingerprint: str,
        adapter: str,
        layout: KvLayout,
        *,
        gpu_uuid: str = "",
        process_name: str = "",
    ) -> tuple[Attachment, PoolInfo]:
        """Register a model process; a new fingerprint switches the current version.

        FailedPrecondition for weights other than the pod's (see Attachments), before
        any pool exists."""
        self.attachments.check_request(fingerprint, adapter, gpu_uuid, process_name)
        pool = await self._ensure_pool(layout)
        if layout.block_bytes > pool.slot_bytes:
            raise FailedPrecondition(
                f"a block of this layout takes {layout.block_bytes} bytes but pool slots hold "
                f"{pool.slot_bytes}; restart the sidecar with a larger INFERCACHE_KV_SLOT_BYTES"
            )
        location = pool.export(gpu_uuid)
        self._sweep()
        attachment = self.attachments.create(
            fingerprint, adapter, layout, process_name, self.leases.holders()
        )
        if attachment.version != self.attachments.current:
            self._switch_version(attachment.version, fingerprint)
        self.attachments.add(attachment)
        log.info(
            "kv_attached",
            attachment=attachment.attachment_id,
            fingerprint=fingerprint,
            adapter=adapter or None,
            process=process_name or None,
            block_bytes=layout.block_bytes,
        )
        return attachment, PoolInfo(pool.pool_id, pool.num_slots, pool.slot_bytes, location)

    async def _ensure_pool(self, layout: KvLayout) -> SlotPool:
        async with self._pool_lock:
            if self._pool is None:
                slot_bytes = self.settings.slot_bytes or layout.block_bytes
                num_slots = self.settings.pool_bytes // slot_bytes
                if num_slots < 1:
                    raise FailedPrecondition(
                        f"INFERCACHE_KV_POOL_BYTES ({self.settings.pool_bytes}) cannot hold one "
                        f"slot of {slot_bytes} bytes"
                    )
                # Importing torch and mapping the pool take seconds: off the event loop.
                pool = await asyncio.to_thread(self._factory, num_slots, slot_bytes)
                self._index = SlotIndex(num_slots)
                self._block_bytes = [0] * num_slots
                if self._warm is not None:
                    self._mover = WarmMover(
                        self._index,
                        pool,
                        self._warm,
                        ttl_ms=self.settings.warm_ttl_s * 1000,
                        stats=self.stats,
                        is_current=lambda v: v == self.attachments.current,
                        block_bytes=self._block_bytes,
                    )
                self._pool = pool
                log.info("kv_pool_created", slots=num_slots, slot_bytes=slot_bytes)
            return self._pool

    def _switch_version(self, version: str, fingerprint: str) -> None:
        old = self.attachments.make_current(version)
        index = self.index
        if old is not None:
            # Unpublish the old version now (a lookup can no longer find it); an internal
            # pin keeps each slot's bytes intact until the demotion has copied them.
            demoted = []
            for slot in sorted(index.group_slots(old)):
                index.pin(slot)
                key = index.drop(slot)
                assert key is not None
                demoted.append(Demoted(slot, key, self._block_bytes[slot]))
            if self._mover is not None:
                self._demotions[old] = self._spawn(self._mover.demote(old, demoted))
            else:
                index.unpin_many(d.slot for d in demoted)
                self.stats.dropped_blocks += len(demoted)
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
                    self.stats.dropped_blocks += 1
        if self._mover is not None:
            self._spawn(self._mover.drop_versions(keep))
        log.info("kv_version_switched", fingerprint=fingerprint, version=version, previous=old)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def detach(self, attachment_id: str) -> int:
        """End an attachment, releasing its leases; returns the slots unpinned."""
        self.attachments.get(attachment_id, live=False)
        released = 0
        for record in self.leases.of_attachment(attachment_id):
            released += self._drop_lease(record)
        self.attachments.remove(attachment_id)
        return released

    # -- leases --------------------------------------------------------------------

    def _ttl(self, ttl_ms: int) -> int:
        if ttl_ms <= 0:
            return self.settings.default_lease_ms
        return min(ttl_ms, self.settings.max_lease_ms)

    def _view(self, record: LeaseRecord) -> LeaseView:
        return LeaseView(record.lease_id, self.leases.unix_ms(record), record.ttl_ms)

    def _sweep(self) -> None:
        if self._index is None:
            return
        for record in self.leases.expired():
            self._index.unpin_many(record.pins)
            self.stats.expired_leases += 1

    def _drop_lease(self, record: LeaseRecord) -> int:
        self.leases.remove(record.lease_id)
        self.index.unpin_many(record.pins)
        return len(record.pins)

    async def release(self, attachment_id: str, lease_id: str) -> int:
        """Unpin every slot of a lease; returns how many pins were dropped."""
        self._sweep()
        self.attachments.get(attachment_id, live=False)
        return self._drop_lease(self.leases.get(lease_id, attachment_id))

    async def renew(self, attachment_id: str, lease_id: str, ttl_ms: int) -> LeaseView:
        """Extend a lease."""
        self._sweep()
        self.attachments.get(attachment_id)
        record = self.leases.get(lease_id, attachment_id)
        self.leases.renew(record, self._ttl(ttl_ms))
        return self._view(record)

    # -- data path -----------------------------------------------------------------

    async def lookup_prefix(
        self,
        attachment_id: str,
        tenant: str,
        cache_salt: str,
        hashes: Sequence[bytes],
        *,
        lease_ttl_ms: int = 0,
        hot_only: bool = False,
    ) -> PrefixResult:
        """The longest cached prefix of a hash chain, pinned under a new lease."""
        self._sweep()
        a = self.attachments.get(attachment_id)
        check_text("tenant", tenant, required=True)
        check_text("cache_salt", cache_salt, required=False)
        if len(hashes) > self.settings.max_chain_blocks:
            raise InvalidArgument(
                "block_hashes",
                f"has {len(hashes)} blocks; the limit is {self.settings.max_chain_blocks}",
            )
        check_hashes("block_hashes", hashes)
        prefix = request_scope(a.scope, tenant, cache_salt)
        index = self.index
        self.stats.lookups += 1
        record: LeaseRecord | None = None
        slots = index.walk(prefix, hashes, 0)
        if slots:
            record = self._pin_new(a, slots, lease_ttl_ms)
        retry_later = False
        promoted = 0
        missing = len(hashes) - len(slots)
        if missing and not hot_only and self._mover is not None and index.available:
            start = len(slots)
            keys = [BlockKey(prefix + h) for h in hashes[start : start + MAX_PROMOTE_BLOCKS]]
            retry_later = await self._mover.promote_within(
                a.version, keys, a.layout.block_bytes, self.settings.promote_timeout_ms / 1000
            )
            # Pinned slots stayed put during the wait; the rest is walked again.
            if not a.superseded:
                more = index.walk(prefix, hashes, start)
                if more:
                    if record is None:
                        record = self._pin_new(a, more, lease_ttl_ms)
                    else:
                        index.pin_many(more)
                        record.pins.extend(more)
                    slots.extend(more)
                    promoted = len(more)
        self.stats.hit_blocks += len(slots)
        return PrefixResult(
            slots,
            self._view(record) if record is not None else None,
            retry_later,
            self.settings.promote_timeout_ms if retry_later else 0,
            promoted,
        )

    def _pin_new(self, a: Attachment, slots: list[int], ttl_ms: int) -> LeaseRecord:
        record = self.leases.create(a.attachment_id, self._ttl(ttl_ms))
        self.index.pin_many(slots)
        record.pins.extend(slots)
        return record

    async def allocate(
        self, attachment_id: str, count: int, *, lease_id: str = "", lease_ttl_ms: int = 0
    ) -> tuple[list[int], LeaseView]:
        """Reserve `count` slots under a lease (all or nothing)."""
        self._sweep()
        a = self.attachments.get(attachment_id)
        index = self.index
        if not 0 < count <= min(index.num_slots, self.settings.max_chain_blocks):
            raise InvalidArgument(
                "count", f"must be in 1..{min(index.num_slots, self.settings.max_chain_blocks)}"
            )
        if count > index.available and self._demotions:
            # Slots being demoted come free within a Redis round trip or two.
            pending = [t for t in self._demotions.values() if not t.done()]
            if pending:
                await asyncio.wait(pending, timeout=DEMOTION_WAIT_S)
            self._sweep()
            a = self.attachments.get(attachment_id)
        record = self.leases.get(lease_id, attachment_id) if lease_id else None
        slots = index.allocate(count)
        if record is None:
            try:
                record = self.leases.create(a.attachment_id, self._ttl(lease_ttl_ms))
            except ResourceExhausted:
                index.unpin_many(slots)
                raise
        else:
            self.leases.renew(record, self._ttl(lease_ttl_ms))
        record.pins.extend(slots)
        record.allocated.update(slots)
        return slots, self._view(record)

    async def commit(
        self,
        attachment_id: str,
        lease_id: str,
        tenant: str,
        cache_salt: str,
        blocks: Sequence[tuple[int, bytes]],
    ) -> list[bool]:
        """Publish allocated slots under their hashes; per block True if already cached."""
        self._sweep()
        a = self.attachments.get(attachment_id)
        record = self.leases.get(lease_id, attachment_id)
        check_text("tenant", tenant, required=True)
        check_text("cache_salt", cache_salt, required=False)
        check_commit(blocks, record.allocated)
        prefix = request_scope(a.scope, tenant, cache_salt)
        index = self.index
        already: list[bool] = []
        for slot, h in blocks:
            if index.publish(slot, BlockKey(prefix + h), a.version):
                self._block_bytes[slot] = a.layout.block_bytes
                record.allocated.discard(slot)
                already.append(False)
            else:
                already.append(True)
        self.stats.committed_blocks += already.count(False)
        return already

    # -- lifecycle -------------------------------------------------------------------

    async def settled(self) -> None:
        """Wait for background demotions and drops (tests and shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Stop background work and release the pool."""
        tasks = [*self._tasks, *(self._mover.promotions() if self._mover is not None else ())]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._warm is not None:
            await self._warm.close()

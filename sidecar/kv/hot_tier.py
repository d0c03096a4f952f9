"""The KV hot tier: version binding, prefix lookups, allocation and leases (who is
attached, and which version is current: kv/attachments.py).

Version binding: every block key is the digest of (model fingerprint, adapter, KV
layout, tenant, cache salt) followed by the client's block hash, so an attachment can
only ever find blocks published under its own scope. Attaching a new fingerprint
makes it the current version: attachments of other fingerprints are superseded
(their lookups, allocations and commits fail with FailedPrecondition), the previous
version's blocks leave the hot index at once and are demoted to the warm tier in the
background, and warm values of any older version are dropped (kv/versions.py). A
lookup that runs into warm blocks of the current version promotes them within a time
bound, else answers "retry later".

Liveness: an attachment not heard from for its ttl is reclaimed with its leases, and
a lease not renewed is dropped with its pins; both are swept before every operation.
Slots carry generations (kv/generations.py) that readers check after copying, so a
read racing a slot's reuse is detected, and seals (kv/integrity.py) taken at commit,
so bytes altered behind the sidecar's back are never handed out (on the sampled hits
INFERCACHE_KV_VERIFY_HITS checks) nor demoted. The pool's and the demotions' blocks
are reported to `events` (kv/block_events.py), e.g. a KV event publisher.

All state is mutated on the event loop; only pool creation runs on a thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import structlog

from sidecar.errors import FailedPrecondition, InvalidArgument, ResourceExhausted
from sidecar.kv.assembly import assemble
from sidecar.kv.attachments import Attachments
from sidecar.kv.block_events import BlockEvents
from sidecar.kv.generations import MemoryGenerations, SlotGenerations
from sidecar.kv.holds import Holds
from sidecar.kv.integrity import BlockSeals
from sidecar.kv.layout import BlockKey, KvLayout
from sidecar.kv.movement import KvStats, WarmMover
from sidecar.kv.pins import LeaseRecord, LeaseTable
from sidecar.kv.pool import SlotPool
from sidecar.kv.slot_index import SlotIndex
from sidecar.kv.types import (
    Attachment,
    AttachmentView,
    KvSettings,
    LeaseView,
    PoolInfo,
    PrefixResult,
    check_commit,
    check_hashes,
)
from sidecar.kv.versions import VersionSwitcher
from sidecar.kv.warm import KvWarmStore
from sidecar.macs import LOCAL, FleetKeys

log = structlog.get_logger("infercache.kv")

PoolFactory = Callable[[int, int], SlotPool]
"""(num_slots, slot_bytes) -> pool; called once, on a worker thread."""
GenerationsFactory = Callable[[int], SlotGenerations]
"""num_slots -> the slots' generations; called once, on a worker thread."""

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
        generations: GenerationsFactory = MemoryGenerations,
        clock: Callable[[], float] = time.monotonic,
        pod_fingerprint: str | Callable[[], str] = "",
        allow_foreign: bool = False,
        doubt: Callable[[str, str], None] | None = None,
        stats: KvStats | None = None,
        keys: FleetKeys | None = None,
        events: BlockEvents | None = None,
    ) -> None:
        """`generations`: where slot generations live (shared with model processes in
        production); `clock`: monotonic seconds for attachment liveness;
        `pod_fingerprint`, `allow_foreign`, `doubt`: which model fingerprints may use the
        tier (see Attachments; "" = the pod's weights are unknown, any may); `stats`:
        counters shared with other tiers (trust domains); `keys`: what seals blocks
        (default: the warm store's, else this process's)."""
        self.settings = settings
        self.stats = stats if stats is not None else KvStats()
        self._keys = keys or (warm.keys if warm is not None else LOCAL)
        self._factory = pool_factory
        self._generations = generations
        self._warm = warm
        self.leases = leases if leases is not None else LeaseTable(settings.max_leases, clock)
        self._pool: SlotPool | None = None
        self._index: SlotIndex | None = None
        self._mover: WarmMover | None = None
        self._versions: VersionSwitcher | None = None
        self._holds: Holds | None = None
        self._seals: BlockSeals | None = None
        self._block_bytes: list[int] = []
        self._pool_lock = asyncio.Lock()
        self._events = events
        self.attachments = Attachments(
            settings.max_attachments,
            self.stats,
            ttl_ms=settings.attachment_ttl_ms,
            clock=clock,
            pod_fingerprint=pod_fingerprint,
            allow_foreign=allow_foreign,
            doubt=doubt,
            events=events,
        )

    @property
    def index(self) -> SlotIndex:
        """The slot index (exists from the first attachment on)."""
        if self._index is None:
            raise FailedPrecondition("no KV pool yet: AttachHotTier first")
        return self._index

    @property
    def holds(self) -> Holds:
        """The leases' pins (exist from the first attachment on)."""
        if self._holds is None:
            raise FailedPrecondition("no KV pool yet: AttachHotTier first")
        return self._holds

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
        tenants: frozenset[str] | None = None,
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
            fingerprint, adapter, layout, process_name, self.leases.holders(), tenants
        )
        if attachment.version != self.attachments.current:
            old = self.attachments.make_current(attachment.version)
            assert self._versions is not None  # made with the pool
            self._versions.switch(attachment.version, old, fingerprint, layout.tokens_per_block)
        self.attachments.add(attachment)
        log.info(
            "kv_attached",
            attachment=attachment.attachment_id,
            fingerprint=fingerprint,
            adapter=adapter or None,
            process=process_name or None,
            block_bytes=layout.block_bytes,
        )
        generations = self.index.generations.export()
        return attachment, PoolInfo(
            pool.pool_id, pool.num_slots, pool.slot_bytes, location, generations
        )

    async def _ensure_pool(self, layout: KvLayout) -> SlotPool:
        async with self._pool_lock:
            if self._pool is None:
                num_slots, slot_bytes = self.settings.pool_shape(layout.block_bytes)
                # Importing torch and mapping the pool take seconds: off the event loop.
                pool = await asyncio.to_thread(self._factory, num_slots, slot_bytes)
                try:
                    generations = await asyncio.to_thread(self._generations, num_slots)
                except BaseException:
                    pool.close()
                    raise
                parts = assemble(
                    pool,
                    SlotIndex(num_slots, generations),
                    self._warm,
                    self.settings,
                    self.stats,
                    self.leases,
                    self.attachments,
                    self._keys,
                    self._events,
                )
                self._index, self._seals, self._holds = parts.index, parts.seals, parts.holds
                self._mover, self._versions = parts.mover, parts.versions
                self._block_bytes = parts.block_bytes
                self._pool = pool
                log.info("kv_pool_created", slots=num_slots, slot_bytes=slot_bytes)
            return self._pool

    async def detach(self, attachment_id: str) -> int:
        """End an attachment, releasing its leases; returns the slots unpinned."""
        self._sweep()
        self.attachments.get(attachment_id, live=False)
        self.attachments.remove(attachment_id)
        return self.holds.drop_all_of(attachment_id)

    async def keep_alive(self, attachment_id: str) -> AttachmentView:
        """The attachment's process is alive: extend it by the attachment ttl.

        FailedPrecondition once it expired, was detached, or was superseded (a process
        holding a superseded attachment must re-attach, not keep the old one alive)."""
        self._sweep()
        a = self.attachments.get(attachment_id)
        return AttachmentView(self.leases.wall_ms(a.expires_at), self.attachments.ttl_ms)

    def _sweep(self) -> None:
        if self._holds is not None:  # before the pool, nothing is attached
            self._holds.sweep()

    # -- leases --------------------------------------------------------------------

    async def release(self, attachment_id: str, lease_id: str) -> int:
        """Unpin every slot of a lease; returns how many pins were dropped."""
        self._sweep()
        self.attachments.get(attachment_id, live=False)
        return self.holds.drop(self.leases.get(lease_id, attachment_id))

    async def renew(self, attachment_id: str, lease_id: str, ttl_ms: int) -> LeaseView:
        """Extend a lease."""
        self._sweep()
        self.attachments.get(attachment_id)
        record = self.leases.get(lease_id, attachment_id)
        self.leases.renew(record, self.holds.ttl(ttl_ms))
        return self.holds.view(record)

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
        if len(hashes) > self.settings.max_chain_blocks:
            raise InvalidArgument(
                "block_hashes",
                f"has {len(hashes)} blocks; the limit is {self.settings.max_chain_blocks}",
            )
        check_hashes("block_hashes", hashes)
        prefix = self.attachments.request_prefix(a, tenant, cache_salt)
        index = self.index
        self.stats.lookups += 1
        record: LeaseRecord | None = None
        slots = index.walk(prefix, hashes, 0)
        if slots:
            record = self.holds.pin_new(a, slots, lease_ttl_ms)
        retry_later = False
        hot = len(slots)
        if hot < len(hashes) and not hot_only and self._mover is not None and index.available:
            keys = [BlockKey(prefix + h) for h in hashes[hot : hot + MAX_PROMOTE_BLOCKS]]
            retry_later = await self._mover.promote_within(
                a.version, keys, a.layout.block_bytes, self.settings.promote_timeout_ms / 1000
            )
            record, slots = self.holds.after_wait(a, record, slots, prefix, hashes, lease_ttl_ms)
        if slots and self._seals is not None and self._seals.sampled(self.settings.verify_hits):
            record, slots = await self.holds.verified(a, record, slots, self._seals, self.pool)
        self.stats.hit_blocks += len(slots)
        return PrefixResult(
            slots,
            self.holds.view(record) if record is not None else None,
            retry_later,
            self.settings.promote_timeout_ms if retry_later else 0,
            max(0, len(slots) - hot),
            [index.generation(s) for s in slots],
        )

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
        versions = self._versions
        if count > index.available and versions is not None and versions.demoting:
            # Slots being demoted come free within a Redis round trip or two.
            await versions.wait_demotions(DEMOTION_WAIT_S)
            self._sweep()
            a = self.attachments.get(attachment_id)
        record = self.leases.get(lease_id, attachment_id) if lease_id else None
        slots = index.allocate(count)
        if record is None:
            try:
                record = self.leases.create(a.attachment_id, self.holds.ttl(lease_ttl_ms))
            except ResourceExhausted:
                index.unpin_many(slots)
                raise
        else:
            self.leases.renew(record, self.holds.ttl(lease_ttl_ms))
        record.pins.extend(slots)
        record.allocated.update(slots)
        return slots, self.holds.view(record)

    def generations(self, slots: Sequence[int]) -> list[int]:
        """The slots' generations now (see kv/generations.py)."""
        generation = self.index.generation
        return [generation(s) for s in slots]

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
        check_commit(blocks, record.allocated)
        prefix = self.attachments.request_prefix(a, tenant, cache_salt)
        keyed = [(slot, BlockKey(prefix + h)) for slot, h in blocks]
        assert self._seals is not None  # made with the pool
        # The seal of what the slots hold now; a later change of their bytes is detected.
        tags = await self._seals.measure(self.pool, a.version, keyed, a.layout.block_bytes)
        # Hashing may have let other calls run: the lease may be gone, the model superseded.
        self._sweep()
        a = self.attachments.get(attachment_id)
        record = self.leases.get(lease_id, attachment_id)
        check_commit(blocks, record.allocated)
        index = self.index
        already: list[bool] = []
        for (slot, key), tag in zip(keyed, tags, strict=True):
            if index.publish(slot, key, a.version):
                self._seals.set(slot, tag)
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
        if self._versions is not None:
            await self._versions.settled()

    async def close(self) -> None:
        """Stop background work and release the pool."""
        tasks: list[asyncio.Task[None] | asyncio.Task[int]] = []
        if self._versions is not None:
            tasks.extend(self._versions.tasks())
        if self._mover is not None:
            tasks.extend(self._mover.promotions())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._index is not None:
            self._index.generations.close()
        if self._warm is not None:
            await self._warm.close()

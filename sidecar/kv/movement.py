"""Moving blocks between the hot pool and the warm tier: demotion and promotion.

Demotion runs in the background after a version change: the demoted slots are
already unpublished and held by an internal pin, so nothing can overwrite them
while their bytes are copied out; each batch is written to the warm tier with
one pipelined SET and then unpinned (back to the free list). Promotion copies
intact warm values of the current version into free (or evicted) slots.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from sidecar.errors import TierUnavailable
from sidecar.kv.block_events import BlockEvents
from sidecar.kv.integrity import BlockSeals
from sidecar.kv.layout import BlockKey
from sidecar.kv.pool import SlotPool
from sidecar.kv.slot_index import SlotIndex
from sidecar.kv.warm import KvWarmStore, open_block, seal_copy
from sidecar.macs import FleetKeys

log = structlog.get_logger("infercache.kv")

# Blocks per pipelined SET / MGET: bounds the bytes in flight (64 x 1 MiB blocks).
BATCH_BLOCKS = 64


@dataclass(slots=True)
class KvStats:
    """Counters of the KV hot tier; mutated only on the event loop."""

    lookups: int = 0
    hit_blocks: int = 0
    promoted_blocks: int = 0
    demoted_blocks: int = 0
    dropped_blocks: int = 0
    dropped_warm_blocks: int = 0
    retry_later: int = 0
    warm_failures: int = 0
    corrupt_warm_values: int = 0
    committed_blocks: int = 0
    expired_leases: int = 0
    expired_attachments: int = 0
    foreign_attachments_refused: int = 0
    altered_blocks: int = 0
    """Blocks whose bytes no longer matched their seal (kv/integrity.py): dropped."""
    tenants_refused: int = 0
    """Requests naming a tenant their attachment was not granted, and attaches refused."""


@dataclass(frozen=True, slots=True)
class Demoted:
    """One block leaving the hot pool: its slot (pinned), key, size and seal."""

    slot: int
    key: BlockKey
    nbytes: int
    seal: bytes | None = None


class WarmMover:
    """Demotes and promotes blocks between one pool and one warm store."""

    def __init__(
        self,
        index: SlotIndex,
        pool: SlotPool,
        warm: KvWarmStore,
        *,
        ttl_ms: int,
        stats: KvStats,
        is_current: Callable[[str], bool],
        block_bytes: list[int],
        seals: BlockSeals,
        events: BlockEvents | None = None,
    ) -> None:
        """`events`: told of the blocks written to and dropped from the warm tier."""
        self._index = index
        self._events = events
        self._seals = seals
        self._pool = pool
        self._warm = warm
        self._ttl_ms = ttl_ms
        self._stats = stats
        self._is_current = is_current
        self._block_bytes = block_bytes
        self._promotions: dict[BlockKey, asyncio.Task[int]] = {}

    def _encode(
        self, version: str, batch: Sequence[Demoted]
    ) -> tuple[list[tuple[BlockKey, bytes | bytearray]], list[Demoted]]:
        """Copy slots out, check each copy against its seal and make the stored values of
        the intact ones (on a worker thread: the slots are pinned); (values, altered)."""
        read, keys = self._pool.read_many, self._warm.keys
        items: list[tuple[BlockKey, bytes | bytearray]] = []
        altered: list[Demoted] = []
        for b in batch:
            # One copy, then its tag: what is checked is what is stored.
            value, tag = seal_copy(b.key, read([b.slot], b.nbytes)[0], keys, version)
            if b.seal is None or not hmac.compare_digest(tag, b.seal):
                altered.append(b)
                continue
            items.append((b.key, value))
        return items, altered

    async def demote(self, version: str, blocks: Sequence[Demoted]) -> None:
        """Copy pinned, unpublished blocks to the warm tier, then unpin them.

        Two stages overlap: while one batch is being written to Redis, the next is
        copied out and checksummed on a worker thread.
        """
        batches = [blocks[i : i + BATCH_BLOCKS] for i in range(0, len(blocks), BATCH_BLOCKS)]
        writing: asyncio.Task[None] | None = None
        written: Sequence[Demoted] = ()
        stored: list[BlockKey] = []
        try:
            await self._warm.note_version(version)
            for batch in batches:
                items, altered = await asyncio.to_thread(self._encode, version, batch)
                if altered:
                    self._stats.altered_blocks += len(altered)
                    log.warning(
                        "kv_block_altered",
                        at="demotion",
                        version=version,
                        blocks=len(altered),
                        slots=[b.slot for b in altered[:8]],
                    )
                if writing is not None:
                    await self._finish(version, writing, written, stored)
                writing = asyncio.create_task(self._warm.put_many(version, items, self._ttl_ms))
                written, stored = batch, [k for k, _ in items]
            if writing is not None:
                await self._finish(version, writing, written, stored)
                writing = None
        except TierUnavailable as exc:
            self._stats.warm_failures += 1
            log.warning("kv_demote_failed", version=version, error=str(exc))
        finally:
            if writing is not None:
                writing.cancel()
                await asyncio.gather(writing, return_exceptions=True)
            self._unpin_rest(blocks)

    async def _finish(
        self,
        version: str,
        writing: asyncio.Task[None],
        batch: Sequence[Demoted],
        stored: Sequence[BlockKey],
    ) -> None:
        """Wait for a batch's write (`stored`: the keys of its intact blocks), then unpin it."""
        try:
            await writing
            self._stats.demoted_blocks += len(stored)
            if self._events is not None:
                self._events.warm_stored(stored, version, self._ttl_ms)
        except TierUnavailable as exc:
            self._stats.warm_failures += 1
            self._stats.dropped_blocks += len(stored)
            log.warning("kv_demote_failed", version=version, blocks=len(batch), error=str(exc))
        finally:
            self._index.unpin_many(b.slot for b in batch)

    def _unpin_rest(self, blocks: Sequence[Demoted]) -> None:
        for b in blocks:
            # Slots of finished batches were unpinned already (and may be reused).
            if self._index.pins(b.slot) > 0 and self._index.key_of(b.slot) is None:
                self._index.unpin(b.slot)

    async def drop_versions(self, keep: set[str]) -> None:
        """Delete warm values of every version not in keep."""
        try:
            for version in await self._warm.versions():
                if version not in keep:
                    n = await self._warm.drop_version(version)
                    self._stats.dropped_warm_blocks += n
                    if self._events is not None:
                        self._events.warm_dropped(version)
                    log.info("kv_version_dropped", version=version, warm_blocks=n)
        except TierUnavailable as exc:
            self._stats.warm_failures += 1
            log.warning("kv_drop_failed", error=str(exc))

    async def promote_within(
        self, version: str, keys: list[BlockKey], nbytes: int, timeout_s: float
    ) -> bool:
        """Promote `keys` (see promote), waiting at most `timeout_s`; True when it did not
        finish in time (it goes on in the background, so the next lookup finds the
        blocks hot). Concurrent lookups of a chain starting with the same key share one."""
        task = self._promotions.get(keys[0])
        if task is None:
            task = asyncio.create_task(self.promote(version, keys, nbytes))
            self._promotions[keys[0]] = task
            first = keys[0]
            task.add_done_callback(lambda _t: self._promotions.pop(first, None))
            task.add_done_callback(self._promotion_done)
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(task)
        except TimeoutError:
            self._stats.retry_later += 1
            return True
        except TierUnavailable:
            return False
        return False

    def _promotion_done(self, task: asyncio.Task[int]) -> None:
        if not task.cancelled() and isinstance(task.exception(), TierUnavailable):
            self._stats.warm_failures += 1
            log.warning("kv_promote_failed", error=str(task.exception()))

    def promotions(self) -> list[asyncio.Task[int]]:
        """The promotions in flight (shutdown cancels them)."""
        return list(self._promotions.values())

    async def promote(self, version: str, keys: Sequence[BlockKey], nbytes: int) -> int:
        """Copy the leading run of warm hits among keys into slots (published, unpinned).

        Two stages overlap: the next batch is fetched from Redis while this one is
        verified and copied into its slots on a worker thread.
        """
        batches = [keys[i : i + BATCH_BLOCKS] for i in range(0, len(keys), BATCH_BLOCKS)]
        promoted = 0
        fetch = asyncio.create_task(self._warm.get_many(version, batches[0])) if batches else None
        try:
            for i, batch in enumerate(batches):
                assert fetch is not None
                values = await fetch
                fetch = None
                if i + 1 < len(batches):
                    fetch = asyncio.create_task(self._warm.get_many(version, batches[i + 1]))
                done, complete = await self._promote_batch(version, batch, values, nbytes)
                promoted += done
                if not complete:
                    break
        finally:
            if fetch is not None:
                fetch.cancel()
                await asyncio.gather(fetch, return_exceptions=True)
        return promoted

    async def _promote_batch(
        self, version: str, keys: Sequence[BlockKey], values: Sequence[bytes | None], nbytes: int
    ) -> tuple[int, bool]:
        """Promote one fetched batch; (blocks promoted, whether the whole batch was usable)."""
        opened = await asyncio.to_thread(
            _verify_run, keys, values, nbytes, self._warm.keys, version
        )
        payloads = [p for p, _ in opened]
        complete = len(payloads) == len(keys)
        if len(payloads) < len(keys) and values[len(payloads)] is not None:
            self._stats.corrupt_warm_values += 1
        # The version may have changed while values were in flight or being verified.
        if not self._is_current(version):
            return 0, False
        index = self._index
        todo = [(k, o) for k, o in zip(keys, opened, strict=False) if index.get(k) is None]
        take = min(len(todo), index.available)
        if take < len(todo):
            complete = False
        todo = todo[:take]
        slots = index.allocate(len(todo)) if todo else []
        try:
            await asyncio.to_thread(self._write_all, slots, [p for _, (p, _) in todo])
        except BaseException:
            index.unpin_many(slots)
            raise
        promoted = 0
        current = self._is_current(version)
        for slot, (key, (_, tag)) in zip(slots, todo, strict=True):
            # Another lookup may have promoted the same key meanwhile: keep one copy.
            if current and index.publish(slot, key, version):
                self._block_bytes[slot] = nbytes
                # Sealed with the tag its warm value verified under (no second pass).
                self._seals.set(slot, tag)
                promoted += 1
            index.unpin(slot)
        self._stats.promoted_blocks += promoted
        return promoted, complete and current

    def _write_all(self, slots: Sequence[int], payloads: Sequence[memoryview]) -> None:
        for slot, payload in zip(slots, payloads, strict=True):
            self._pool.write(slot, payload)


def _verify_run(
    keys: Sequence[BlockKey],
    values: Sequence[bytes | None],
    nbytes: int,
    macs: FleetKeys,
    version: str,
) -> list[tuple[memoryview, bytes]]:
    """(payload, tag) of the leading run of present, authentic values of the right size."""
    out: list[tuple[memoryview, bytes]] = []
    for key, value in zip(keys, values, strict=True):
        if value is None:
            break
        opened = open_block(key, value, macs, version)
        if opened is None or len(opened[0]) != nbytes:
            break
        out.append(opened)
    return out

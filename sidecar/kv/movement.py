"""Moving blocks between the hot pool and the warm tier: demotion and promotion.

Demotion runs in the background after a version change: the demoted slots are
already unpublished and held by an internal pin, so nothing can overwrite them
while their bytes are copied out; each batch is written to the warm tier with
one pipelined SET and then unpinned (back to the free list). Promotion copies
intact warm values of the current version into free (or evicted) slots.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from sidecar.errors import ResourceExhausted, TierUnavailable
from sidecar.kv.layout import BlockKey
from sidecar.kv.pool import SlotPool
from sidecar.kv.slot_index import SlotIndex
from sidecar.kv.warm import KvWarmStore, decode_block, encode_block

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


@dataclass(frozen=True, slots=True)
class Demoted:
    """One block leaving the hot pool: its slot (pinned), key and size."""

    slot: int
    key: BlockKey
    nbytes: int


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
    ) -> None:
        self._index = index
        self._pool = pool
        self._warm = warm
        self._ttl_ms = ttl_ms
        self._stats = stats
        self._is_current = is_current
        self._block_bytes = block_bytes

    async def demote(self, version: str, blocks: Sequence[Demoted]) -> None:
        """Copy pinned, unpublished blocks to the warm tier, then unpin them."""
        try:
            await self._warm.note_version(version)
            for start in range(0, len(blocks), BATCH_BLOCKS):
                batch = blocks[start : start + BATCH_BLOCKS]
                items = [
                    (b.key, encode_block(b.key, self._pool.read_many([b.slot], b.nbytes)[0]))
                    for b in batch
                ]
                try:
                    await self._warm.put_many(version, items, self._ttl_ms)
                    self._stats.demoted_blocks += len(batch)
                except TierUnavailable as exc:
                    self._stats.warm_failures += 1
                    self._stats.dropped_blocks += len(batch)
                    log.warning(
                        "kv_demote_failed", version=version, blocks=len(batch), error=str(exc)
                    )
                finally:
                    self._index.unpin_many(b.slot for b in batch)
        except TierUnavailable as exc:
            self._stats.warm_failures += 1
            log.warning("kv_demote_failed", version=version, error=str(exc))
            self._unpin_rest(blocks)
        except BaseException:
            self._unpin_rest(blocks)
            raise

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
                    log.info("kv_version_dropped", version=version, warm_blocks=n)
        except TierUnavailable as exc:
            self._stats.warm_failures += 1
            log.warning("kv_drop_failed", error=str(exc))

    async def promote(self, version: str, keys: Sequence[BlockKey], nbytes: int) -> int:
        """Copy the leading run of warm hits among keys into slots (published, unpinned)."""
        promoted = 0
        for start in range(0, len(keys), BATCH_BLOCKS):
            batch = keys[start : start + BATCH_BLOCKS]
            values = await self._warm.get_many(version, batch)
            # The version may have changed while the values were in flight.
            if not self._is_current(version):
                return promoted
            for key, value in zip(batch, values, strict=True):
                if value is None:
                    return promoted
                payload = decode_block(key, value)
                if payload is None or len(payload) != nbytes:
                    self._stats.corrupt_warm_values += 1
                    return promoted
                if self._index.get(key) is not None:
                    continue  # promoted meanwhile by another lookup
                try:
                    [slot] = self._index.allocate(1)
                except ResourceExhausted:
                    return promoted
                self._pool.write(slot, payload)
                self._index.publish(slot, key, version)
                self._block_bytes[slot] = nbytes
                self._index.unpin(slot)
                promoted += 1
                self._stats.promoted_blocks += 1
        return promoted

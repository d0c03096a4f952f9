"""Content seals of the hot pool's blocks: an alteration behind the sidecar's back is
detected before the block is handed out or demoted.

The pool is memory other processes map writable (every process of the block's trust
domain: kv/domains.py), so the sidecar cannot keep its bytes from changing; it can
notice. At commit it takes the block's seal: the keyed BLAKE3 tag of (model version,
block key, bytes) under the fleet's `kv-block` key, the very tag the warm tier stores
with a demoted block (kv/warm.py), so a demotion checks and seals in one pass. A
promoted block is sealed with the tag its warm value verified under. Seals live in the
sidecar's memory only.

Checked: always when a block is demoted (the copy that is checked is the copy that is
stored), and on a sampled fraction of prefix hits (INFERCACHE_KV_VERIFY_HITS) before
LookupPrefix answers. An altered block is dropped from the index, counted
(`altered_blocks`) and logged, never handed out or demoted. What a check at hand-out
cannot do: a process of the same trust domain can still change a block after the check
and before the model's copy (docs/security.md says who that is).
"""

from __future__ import annotations

import asyncio
import hmac
import random
from collections.abc import Callable, Sequence

from sidecar.kv.layout import BlockKey
from sidecar.kv.pool import SlotPool
from sidecar.kv.warm import block_tag
from sidecar.macs import FleetKeys

# Blocks totalling more bytes than this are hashed on a worker thread.
INLINE_BYTES = 256 * 1024


class BlockSeals:
    """Per slot, the seal of the block published there (None: none taken)."""

    def __init__(
        self, num_slots: int, keys: FleetKeys, *, sample: Callable[[], float] = random.random
    ) -> None:
        self.keys = keys
        self._mac = keys.signing_key("kv-block")
        self._tags: list[bytes | None] = [None] * num_slots
        self._sample = sample

    def get(self, slot: int) -> bytes | None:
        """The slot's seal."""
        return self._tags[slot]

    def set(self, slot: int, tag: bytes | None) -> None:
        """Seal a slot with a tag taken elsewhere (a promotion's)."""
        self._tags[slot] = tag

    def sampled(self, fraction: float) -> bool:
        """Whether this hit is one of the `fraction` verified."""
        return fraction >= 1.0 or (fraction > 0.0 and self._sample() < fraction)

    def tags(
        self, pool: SlotPool, version: str, blocks: Sequence[tuple[int, BlockKey]], nbytes: int
    ) -> list[bytes]:
        """The tags of the blocks' bytes now (slot, key each; blocking: see measure)."""
        views = pool.read_many([s for s, _ in blocks], nbytes)
        mac = self._mac
        return [block_tag(mac, version, key, v) for (_, key), v in zip(blocks, views, strict=True)]

    async def measure(
        self, pool: SlotPool, version: str, blocks: Sequence[tuple[int, BlockKey]], nbytes: int
    ) -> list[bytes]:
        """tags(), on a worker thread when the blocks are large (the slots must be pinned)."""
        if len(blocks) * nbytes <= INLINE_BYTES:
            return self.tags(pool, version, blocks, nbytes)
        return await asyncio.to_thread(self.tags, pool, version, blocks, nbytes)

    def first_altered(self, slots: Sequence[int], tags: Sequence[bytes]) -> int | None:
        """Position of the first slot whose measured tag (see tags) is not its seal (None:
        all intact)."""
        for i, (slot, tag) in enumerate(zip(slots, tags, strict=True)):
            seal = self._tags[slot]
            if seal is None or not hmac.compare_digest(seal, tag):
                return i
        return None

    def intact(self, slot: int, tag: bytes) -> bool:
        """Whether `tag` (of a copy of the slot's bytes) is the slot's seal."""
        seal = self._tags[slot]
        return seal is not None and hmac.compare_digest(seal, tag)

"""The embedded warm tier: in-process bytes with TTLs, so `infercache serve` works alone."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from sidecar.keys import KeyDigest
from sidecar.tiers.base import WarmItem
from sidecar.tiers.lru import ByteBudgetLru

_OVERHEAD_BYTES = 128


class EmbeddedWarmTier:
    """A WarmTier that never fails; bounded by bytes and entries, LRU beyond that."""

    name = "embedded"

    def __init__(
        self,
        max_bytes: int,
        max_entries: int,
        clock_ms: Callable[[], int] = lambda: time.monotonic_ns() // 1_000_000,
    ) -> None:
        self._lru: ByteBudgetLru[KeyDigest, tuple[bytes, int]] = ByteBudgetLru(
            max_bytes, max_entries
        )
        self._clock_ms = clock_ms

    def __len__(self) -> int:
        return len(self._lru)

    async def get_many(self, digests: Sequence[KeyDigest]) -> list[bytes | None]:
        """Values in order; expired values are dropped on sight."""
        now = self._clock_ms()
        out: list[bytes | None] = []
        for d in digests:
            item = self._lru.get(d)
            if item is not None and item[1] <= now:
                self._lru.pop(d)
                item = None
            out.append(None if item is None else item[0])
        return out

    async def put_many(self, items: Sequence[WarmItem]) -> None:
        """Store each value until its TTL passes or it is evicted."""
        now = self._clock_ms()
        for it in items:
            self._lru.put(it.digest, (it.value, now + it.ttl_ms), len(it.value) + _OVERHEAD_BYTES)

    async def delete_many(self, digests: Sequence[KeyDigest]) -> None:
        """Remove values."""
        for d in digests:
            self._lru.pop(d)

    async def ping(self) -> None:
        """Always answers."""

    async def close(self) -> None:
        """Drop everything."""
        self._lru.clear()

"""The embedded warm tier: in-process bytes with TTLs, so `infercache serve` works alone."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from sidecar.errors import TierUnavailable
from sidecar.keys import KeyDigest
from sidecar.tiers.base import WarmItem
from sidecar.tiers.lru import ByteBudgetLru

_OVERHEAD_BYTES = 128


class EmbeddedWarmTier:
    """A WarmTier in process memory; bounded by bytes and entries, LRU beyond that.

    Fails only for a value larger than its whole budget (the store is refused)."""

    name = "embedded"

    def __init__(
        self,
        max_bytes: int,
        max_entries: int,
        clock_ms: Callable[[], int] = lambda: time.monotonic_ns() // 1_000_000,
        epoch_source: Callable[[], int] = lambda: 0,
    ) -> None:
        self._lru: ByteBudgetLru[KeyDigest, tuple[bytes, int]] = ByteBudgetLru(
            max_bytes, max_entries
        )
        self._clock_ms = clock_ms
        self._epoch_source = epoch_source
        self._scan_keys: list[KeyDigest] | None = None

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def nbytes(self) -> int:
        """Accounted bytes held."""
        return self._lru.nbytes

    async def get_many(self, digests: Sequence[KeyDigest]) -> list[bytes | None]:
        """Values in order; expired values are dropped on sight."""
        return self.read_now(digests)

    def read_now(self, digests: Sequence[KeyDigest]) -> list[bytes | None]:
        """get_many without a suspension point (EmbeddedHolding reads and holds at once)."""
        now = self._clock_ms()
        out: list[bytes | None] = []
        for d in digests:
            item = self._lru.get(d)
            if item is not None and item[1] <= now:
                self._lru.pop(d)
                item = None
            out.append(None if item is None else item[0])
        return out

    async def get_many_with_epoch(
        self, digests: Sequence[KeyDigest]
    ) -> tuple[list[bytes | None], int]:
        """Values plus the embedded control store's epoch."""
        return await self.get_many(digests), self._epoch_source()

    async def put_many(self, items: Sequence[WarmItem]) -> None:
        """Store each value until its TTL passes or it is evicted."""
        self.write_now(items)

    def write_now(self, items: Sequence[WarmItem]) -> None:
        """put_many without a suspension point."""
        now = self._clock_ms()
        for it in items:
            size = len(it.value) + _OVERHEAD_BYTES
            if not self._lru.put(it.digest, (it.value, now + it.ttl_ms), size):
                # Never claim a write that cannot be kept.
                raise TierUnavailable(
                    f"embedded warm tier: a {size}-byte value exceeds its byte budget"
                )

    async def delete_many(self, digests: Sequence[KeyDigest]) -> None:
        """Remove values."""
        for d in digests:
            self._lru.pop(d)

    async def scan_page(self, cursor: int, count: int) -> tuple[int, list[tuple[KeyDigest, bytes]]]:
        """Pages over a snapshot of the keys taken when a pass starts (cursor 0), so a
        pass costs O(entries) however writes reorder the LRU meanwhile."""
        if cursor == 0 or self._scan_keys is None:
            self._scan_keys = self._lru.snapshot_keys()
            cursor = 0
        keys = self._scan_keys[cursor : cursor + count]
        page: list[tuple[KeyDigest, bytes]] = []
        for d in keys:
            item = self._lru.peek(d)
            if item is not None:
                page.append((d, item[0]))
        nxt = cursor + len(keys)
        if nxt >= len(self._scan_keys):
            self._scan_keys = None
            nxt = 0
        return nxt, page

    async def approx_entries(self) -> int:
        """Exact count."""
        return len(self._lru)

    def usage(self) -> tuple[int, int]:
        """Accounted bytes and entries held, now."""
        return self._lru.nbytes, len(self._lru)

    async def ping(self) -> None:
        """Always answers."""

    async def close(self) -> None:
        """Drop everything."""
        self._lru.clear()

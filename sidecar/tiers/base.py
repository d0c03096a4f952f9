"""The warm-tier contract, shared by the Redis and the embedded implementation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sidecar.keys import KeyDigest


@dataclass(frozen=True, slots=True)
class WarmItem:
    """One value to write: encoded entry bytes under a digest, expiring after ttl_ms."""

    digest: KeyDigest
    value: bytes
    ttl_ms: int


class WarmTier(Protocol):
    """Batch-first byte store shared by a fleet (Redis) or private to one process.

    Values are opaque encoded entries; verification happens above this layer.
    Every method raises TierUnavailable (or TierTimeout) when the backend fails
    or exceeds its deadline, and nothing else.
    """

    name: str

    async def get_many(self, digests: Sequence[KeyDigest]) -> list[bytes | None]:
        """Values in request order; None where absent or expired."""
        ...

    async def get_many_with_epoch(
        self, digests: Sequence[KeyDigest]
    ) -> tuple[list[bytes | None], int]:
        """get_many plus the store's current invalidation epoch, read in the same round trip."""
        ...

    async def put_many(self, items: Sequence[WarmItem]) -> None:
        """Write all items, each with its own TTL; all or nothing is not promised."""
        ...

    async def delete_many(self, digests: Sequence[KeyDigest]) -> None:
        """Remove values; absent digests are ignored."""
        ...

    async def scan_page(self, cursor: int, count: int) -> tuple[int, list[tuple[KeyDigest, bytes]]]:
        """About `count` entries from `cursor` as (digest, head bytes); next cursor, 0 = done.

        The head holds at least the entry header and key material when they fit
        in a few KiB (entries.peek tells). Used by sampling and background reclaim.
        """
        ...

    async def approx_entries(self) -> int:
        """About how many entries the tier holds."""
        ...

    def usage(self) -> tuple[int, int] | None:
        """(bytes, entries) held, when known without I/O (an in-process tier); None when
        only a round trip could tell (then approx_entries is sampled in the background)."""
        ...

    async def ping(self) -> None:
        """Return if the backend answers, raise TierUnavailable otherwise."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...

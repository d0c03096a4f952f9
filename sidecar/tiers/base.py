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


@dataclass(frozen=True, slots=True)
class HoldAsk:
    """One lookup's read with its single-flight hold: the key, and the lease that would
    hold it for `ttl_ms` if no value is there."""

    digest: KeyDigest
    lease_id: bytes
    ttl_ms: int


@dataclass(frozen=True, slots=True)
class HeldRead:
    """What a get_or_hold found: values and holds by position, and the store's epoch."""

    values: list[bytes | None]
    held: list[bool]
    """True where the value was absent and the hold was taken by this call."""
    epoch: int


class HoldingStore(Protocol):
    """The warm tier's entries and the control store's holder keys in one store that can
    change both atomically (one Redis, or the embedded pair): a lookup's read and hold
    cost one step instead of three, a store's write and release one instead of two.

    Holds taken or released here are the ones ControlStore.acquire_holder and
    release_holder take and release (same keys, same lease ids). Both methods raise
    TierUnavailable (or TierTimeout) and nothing else.
    """

    async def get_or_hold(self, asks: Sequence[HoldAsk]) -> HeldRead:
        """Read each value and the epoch; where a value is absent, try to take its hold,
        all at one instant (no write can land between an ask's read and its hold)."""
        ...

    async def put_and_release(self, item: WarmItem, lease_id: bytes) -> None:
        """Write `item`, then release its key's hold if `lease_id` still holds it."""
        ...

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

    async def put_many(self, items: Sequence[WarmItem]) -> None:
        """Write all items, each with its own TTL; all or nothing is not promised."""
        ...

    async def delete_many(self, digests: Sequence[KeyDigest]) -> None:
        """Remove values; absent digests are ignored."""
        ...

    async def ping(self) -> None:
        """Return if the backend answers, raise TierUnavailable otherwise."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...

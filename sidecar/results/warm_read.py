"""How a lookup reads the warm tier, chosen once when the cache is built: a plain read
(values and the store's epoch), or, where the warm tier and the holder keys live in one
store (a HoldingStore), the read that also takes the single-flight hold of each key it
finds absent, at the same instant.

Either way the read returns what it found; the holds it tried come back with it (by
position), never through an out-parameter, and a failed read says which holds it may
still have taken (a script that ran on after its caller stopped waiting), for the
cache to give back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple, Protocol

from sidecar.errors import TierTimeout, TierUnavailable
from sidecar.keys import KeyDigest
from sidecar.results.issuer import LeaseIssuer
from sidecar.results.lease_tokens import Lease
from sidecar.tiers.base import HoldAsk, HoldingStore, WarmTier


@dataclass(frozen=True, slots=True)
class HoldTry:
    """A hold tried for a MISS atomically with the read that found no value (a
    HoldingStore's get_or_hold): its lease (drafted: SingleFlight seals its token) and
    whether the hold was taken."""

    lease: Lease
    held: bool


NO_HOLDS: Mapping[int, HoldTry] = MappingProxyType({})
"""No hold tried (a plain read, or every value found)."""


class WarmFetch(NamedTuple):
    """What a warm read found: values by position, the store's epoch, and the holds
    tried for the absent values (by position)."""

    values: list[bytes | None]
    epoch: int
    holds: Mapping[int, HoldTry] = NO_HOLDS


class ReadFailed(Exception):
    """A warm read that failed with `cause`; `at_risk`: holds it may still take although
    nobody will compute under them (give them back)."""

    def __init__(self, cause: TierUnavailable, at_risk: Sequence[Lease] = ()) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.at_risk = at_risk


class WarmRead(Protocol):
    """One way of reading the warm tier for a batch of lookups."""

    async def fetch(self, digests: list[KeyDigest]) -> WarmFetch:
        """Values and epoch (and holds tried); ReadFailed and nothing else on failure."""
        ...


class PlainRead:
    """The warm tier's values and epoch in one round trip; no hold is tried."""

    __slots__ = ("_get",)

    def __init__(self, warm: WarmTier) -> None:
        self._get = warm.get_many_with_epoch

    async def fetch(self, digests: list[KeyDigest]) -> WarmFetch:
        """WarmRead.fetch."""
        try:
            values, epoch = await self._get(digests)
        except TierUnavailable as exc:
            raise ReadFailed(exc) from exc
        return WarmFetch(values, epoch)


class HoldingRead:
    """Values, epoch and the holds of the absent keys in one step of a HoldingStore."""

    __slots__ = ("_get_or_hold", "_issuer", "_ttl_ms")

    def __init__(self, holding: HoldingStore, issuer: LeaseIssuer) -> None:
        self._get_or_hold = holding.get_or_hold
        self._issuer = issuer
        self._ttl_ms = issuer.policy.hold_ttl_ms

    async def fetch(self, digests: list[KeyDigest]) -> WarmFetch:
        """WarmRead.fetch: each key's lease is drafted first (the hold names it)."""
        draft, ttl_ms = self._issuer.draft, self._ttl_ms
        leases = [draft(d) for d in digests]
        try:
            read = await self._get_or_hold([HoldAsk(x.digest, x.lease_id, ttl_ms) for x in leases])
        except TierUnavailable as exc:
            # A script we stopped waiting for may still run and take holds nobody
            # here will compute; any other failure took none.
            raise ReadFailed(exc, leases if isinstance(exc, TierTimeout) else ()) from exc
        values, held = read.values, read.held
        if len(values) != len(leases) or len(held) != len(leases):
            raise ReadFailed(TierUnavailable("read-and-hold answered the wrong count"), leases)
        holds = {j: HoldTry(leases[j], held[j]) for j, v in enumerate(values) if v is None}
        return WarmFetch(values, read.epoch, holds or NO_HOLDS)


def warm_read(warm: WarmTier, holding: HoldingStore | None, issuer: LeaseIssuer) -> WarmRead:
    """The read lookups use: HoldingRead where there is a HoldingStore, else PlainRead."""
    if holding is None:
        return PlainRead(warm)
    return HoldingRead(holding, issuer)

"""The result cache: hot tier, then warm tier, every warm value verified before use.

Lookups never fail because a tier failed: a warm-tier error becomes a MISS with
`degraded=True`. Stores write the warm tier first and the hot tier only after
the warm write succeeded, so a failed store leaves nothing half-written.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import structlog

from sidecar import entries
from sidecar.entries import ComputeCost, Entry, EntryRejected
from sidecar.errors import InvalidArgument, TierUnavailable
from sidecar.keys import CacheKey, KeyDigest
from sidecar.stats import CacheStats
from sidecar.tiers.base import WarmItem, WarmTier
from sidecar.tiers.hot import HotTier

log = structlog.get_logger("infercache.cache")


class Outcome(Enum):
    """What a lookup found."""

    HIT = "hit"
    MISS = "miss"
    BYPASS = "bypass"


class TierName(Enum):
    """Where a hit came from."""

    HOT = "hot"
    WARM = "warm"


class StoreStatus(Enum):
    """What a store did."""

    STORED = "stored"
    WRITE_FAILED = "write_failed"
    BYPASSED = "bypassed"


@dataclass(frozen=True, slots=True)
class LookupQuery:
    """One lookup: the key and the caller's freshness bound (0 = none)."""

    key: CacheKey
    max_age_s: int = 0


@dataclass(frozen=True, slots=True)
class LookupResult:
    """The answer to one lookup."""

    outcome: Outcome
    digest: KeyDigest
    entry: Entry | None = None
    tier: TierName | None = None
    age_ms: int = 0
    degraded: bool = False
    bypass_reason: str = ""


@dataclass(frozen=True, slots=True)
class StoreResult:
    """The answer to one store."""

    status: StoreStatus
    digest: KeyDigest
    ttl_s: int


@dataclass(frozen=True, slots=True)
class TtlPolicy:
    """TTL bounds in seconds: a default, a global maximum and per-tenant maxima."""

    default_s: int = 3600
    max_s: int = 86400
    tenant_max_s: Mapping[str, int] = field(default_factory=dict)

    def effective(self, tenant: str, requested_s: int) -> int:
        """The TTL to apply: the request (or the default) clamped to the tenant's maximum."""
        cap = self.tenant_max_s.get(tenant, self.max_s)
        wanted = requested_s if requested_s > 0 else self.default_s
        return max(1, min(wanted, cap))


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch; shared meaning across pods for entry ages."""
    return time.time_ns() // 1_000_000


class ResultCache:
    """Orchestrates the tiers for result lookups and stores."""

    def __init__(
        self,
        hot: HotTier,
        warm: WarmTier,
        *,
        ttl: TtlPolicy,
        max_payload_bytes: int,
        stats: CacheStats | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.hot = hot
        self.warm = warm
        self.ttl = ttl
        self.max_payload_bytes = max_payload_bytes
        self.stats = stats or CacheStats()
        self._clock_ms = clock_ms
        self._background: set[asyncio.Task[None]] = set()

    async def lookup(self, query: LookupQuery) -> LookupResult:
        """Look one key up."""
        return (await self.lookup_many([query]))[0]

    async def lookup_many(self, queries: Sequence[LookupQuery]) -> list[LookupResult]:
        """Look many keys up with at most one warm-tier round trip."""
        now = self._clock_ms()
        results: list[LookupResult | None] = [None] * len(queries)
        pending: list[int] = []
        for i, q in enumerate(queries):
            entry = self.hot.get(q.key.digest, now)
            # The hot tier is keyed by digest; comparing material also rules out collisions.
            if entry is not None and entry.material == q.key.material:
                results[i] = self._hit_or_stale(q, entry, TierName.HOT, now)
            else:
                pending.append(i)
        if pending:
            await self._lookup_warm(queries, pending, results, now)
        out = [r for r in results if r is not None]
        for r in out:
            self.stats.count_lookup(r.outcome.value, r.tier.value if r.tier else None)
        return out

    async def _lookup_warm(
        self,
        queries: Sequence[LookupQuery],
        pending: list[int],
        results: list[LookupResult | None],
        now: int,
    ) -> None:
        try:
            values = await self.warm.get_many([queries[i].key.digest for i in pending])
        except TierUnavailable as exc:
            self.stats.warm_read_failures += 1
            log.warning("warm_read_failed", tier=self.warm.name, error=str(exc))
            for i in pending:
                results[i] = LookupResult(Outcome.MISS, queries[i].key.digest, degraded=True)
            return
        rejected: list[KeyDigest] = []
        for i, value in zip(pending, values, strict=True):
            q = queries[i]
            if value is None:
                results[i] = LookupResult(Outcome.MISS, q.key.digest)
                continue
            try:
                entry = entries.decode(value, q.key.material)
            except EntryRejected as exc:
                self.stats.count_rejected(exc.reason)
                log.warning("entry_rejected", reason=exc.reason, digest=q.key.digest.hex())
                rejected.append(q.key.digest)
                results[i] = LookupResult(Outcome.MISS, q.key.digest)
                continue
            if entry.expires_at_ms <= now:
                results[i] = LookupResult(Outcome.MISS, q.key.digest)
                continue
            self.hot.put(q.key.digest, entry)
            results[i] = self._hit_or_stale(q, entry, TierName.WARM, now)
        if rejected:
            self._spawn(self._delete_quietly(rejected))

    def _hit_or_stale(self, q: LookupQuery, entry: Entry, tier: TierName, now: int) -> LookupResult:
        age = max(0, now - entry.created_at_ms)
        if q.max_age_s and age > q.max_age_s * 1000:
            return LookupResult(Outcome.MISS, q.key.digest)
        return LookupResult(Outcome.HIT, q.key.digest, entry=entry, tier=tier, age_ms=age)

    async def store(
        self, key: CacheKey, payload: bytes, ttl_s: int = 0, cost: ComputeCost | None = None
    ) -> StoreResult:
        """Write a result to the warm tier, then the hot tier. Oversized payloads are refused."""
        if len(payload) > self.max_payload_bytes:
            raise InvalidArgument(
                "payload",
                f"is {len(payload)} bytes; the limit is {self.max_payload_bytes} "
                "(INFERCACHE_MAX_PAYLOAD_BYTES)",
            )
        effective = self.ttl.effective(key.tenant, ttl_s)
        entry = Entry(
            material=key.material,
            payload=payload,
            created_at_ms=self._clock_ms(),
            ttl_s=effective,
            cost=cost or ComputeCost(),
        )
        try:
            await self.warm.put_many(
                [WarmItem(key.digest, entries.encode(entry), effective * 1000)]
            )
        except TierUnavailable as exc:
            self.stats.warm_write_failures += 1
            log.warning("warm_write_failed", tier=self.warm.name, error=str(exc))
            # A stale hot copy must not outlive a failed overwrite.
            self.hot.discard(key.digest)
            return StoreResult(StoreStatus.WRITE_FAILED, key.digest, effective)
        self.hot.put(key.digest, entry)
        self.stats.stores += 1
        return StoreResult(StoreStatus.STORED, key.digest, effective)

    async def _delete_quietly(self, digests: list[KeyDigest]) -> None:
        try:
            await self.warm.delete_many(digests)
        except TierUnavailable as exc:
            log.warning("rejected_entry_delete_failed", error=str(exc))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def drain(self) -> None:
        """Wait for background deletions (used at shutdown)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

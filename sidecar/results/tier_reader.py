"""Reading the tiers for a batch of lookups: the hot tier, then the warm tier for what
memory cannot answer, every entry verified against its key and the invalidation rules.

The warm read carries the store's epoch: an epoch ahead of the one applied here is
caught up first; one behind it (a store that lost writes) or a store still settling
answers nothing (degraded MISSes) until the rules are re-published. On a HoldingStore
the same read takes the single-flight holds of the keys it finds absent (see
SingleFlight.lease and its HoldTry). Entries that fail verification or are dead are
deleted in the background.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import structlog

from sidecar import entries
from sidecar.entries import Entry, EntryRejected
from sidecar.errors import StoreDistrusted, TierTimeout, TierUnavailable
from sidecar.invalidation.freshness import Freshness
from sidecar.keys import KeyDigest
from sidecar.observability.stats import CacheStats
from sidecar.observability.throttle import LogThrottle
from sidecar.results.lease_tokens import Lease
from sidecar.results.single_flight import HoldTry, SingleFlight
from sidecar.results.types import LookupQuery, LookupResult, Outcome, TierName
from sidecar.tiers.base import HeldRead, HoldAsk, HoldingStore, WarmTier
from sidecar.tiers.hot import HotTier

log = structlog.get_logger("infercache.cache")

Spawn = Callable[[Coroutine[Any, Any, None]], None]


class TierReader:
    """Hot then warm for one ResultCache (see the module docstring)."""

    def __init__(
        self,
        hot: HotTier,
        warm: WarmTier,
        freshness: Freshness,
        stats: CacheStats,
        clock_ms: Callable[[], int],
        spawn: Spawn,
        holding: HoldingStore | None = None,
        max_ttl_s: int = 2**32 - 1,
    ) -> None:
        """`spawn` runs background work the cache drains at shutdown; `max_ttl_s`: the
        fleet's longest TTL (an entry claiming more is refused). Entries are
        authenticated with `freshness.keys`."""
        self.hot = hot
        self.warm = warm
        self.freshness = freshness
        self.rules = freshness.rules
        self.stats = stats
        self.holding = holding
        self._clock_ms = clock_ms
        self._spawn = spawn
        self._keys = freshness.keys
        self._max_ttl_s = max_ttl_s
        self._log_throttle = LogThrottle()

    async def recheck(self, queries: Sequence[LookupQuery]) -> list[LookupResult]:
        """The warm tier alone, without leases: what a caller that just took a key's hold
        reads. A holder writes its result to the warm tier, then releases, and only then
        puts it in its own hot tier: a hot tier may still hold the entry it replaces
        (an old one, or one in another form) when the hold is free already."""
        return await self.find(queries, warm_only=True)

    async def find(
        self,
        queries: Sequence[LookupQuery],
        tried: list[HoldTry | None] | None = None,
        flight: SingleFlight | None = None,
        *,
        warm_only: bool = False,
    ) -> list[LookupResult]:
        """Hot then warm, without leases. With `tried` and `flight` (and a HoldingStore),
        the warm read also takes the holds of the keys it finds absent, under leases
        `flight` prepares, and says so in `tried`, by position. `warm_only`: see
        `recheck`."""
        now = self._clock_ms()
        results: list[LookupResult | None] = [None] * len(queries)
        if warm_only:
            await self._find_warm(queries, list(range(len(queries))), results, now, None, None)
            return [r for r in results if r is not None]
        confirmed = self.freshness.confirmed()
        pending: list[int] = []
        hot_get = self.hot.get
        rules = self.rules
        for i, q in enumerate(queries):
            key = q.key
            entry = hot_get(key.digest, now)
            # The hot tier is keyed by digest; comparing material also rules out collisions.
            if entry is None or entry.material != key.material:
                pending.append(i)
            elif rules.is_dead(key.dims, entry.epoch):
                self.hot.discard(key.digest)
                self.stats.count_dead(key.model_version)
                pending.append(i)
            elif not confirmed:
                # Not known to be current: let the warm read (which carries the
                # store's epoch) decide instead of trusting memory.
                pending.append(i)
            else:
                results[i] = self._hit_or_miss(q, entry, TierName.HOT, now)
        if pending:
            await self._find_warm(queries, pending, results, now, tried, flight)
        return [r for r in results if r is not None]

    async def _find_warm(
        self,
        queries: Sequence[LookupQuery],
        pending: list[int],
        results: list[LookupResult | None],
        now: int,
        tried: list[HoldTry | None] | None,
        flight: SingleFlight | None,
    ) -> None:
        read: HeldRead | None = None
        leases: list[tuple[Lease, bytes]] = []
        try:
            if tried is not None and flight is not None and self.holding is not None:
                leases = [flight.prepare(queries[i].key.digest) for i in pending]
                ttl_ms = flight.policy.hold_ttl_ms
                read = await self.holding.get_or_hold(
                    [HoldAsk(lease.digest, lease.lease_id, ttl_ms) for lease, _ in leases]
                )
                values, store_epoch = read.values, read.epoch
            else:
                values, store_epoch = await self.warm.get_many_with_epoch(
                    [queries[i].key.digest for i in pending]
                )
            if store_epoch > self.rules.epoch:
                await self.freshness.sync_to(store_epoch)
            self.freshness.check_servable()
            if self.freshness.settling or store_epoch < self.rules.epoch:
                # A restarted store may lack rules until the fleet re-publishes them
                # (an epoch below the one applied here: it lost writes). The refresh
                # this pokes re-publishes and re-reads; until then, nothing is a hit.
                self.freshness.poke()
                raise TierUnavailable("control store restarted; waiting for rules to settle")
        except TierUnavailable as exc:
            self.stats.warm_read_failures += 1
            if isinstance(exc, StoreDistrusted) or self.freshness.distrust is not None:
                # The alert: entries_rejected{reason="store_distrusted"}.
                self.stats.count_rejected("", "store_distrusted")
            log.warning("warm_read_failed", tier=self.warm.name, error=str(exc))
            for i in pending:
                results[i] = LookupResult(Outcome.MISS, queries[i].key.digest, degraded=True)
            if read is not None and flight is not None:
                # Holds taken by a read whose answer is not trusted: a degraded MISS
                # holds nothing, so they are given back now instead of at expiry.
                taken = [lease for (lease, _), h in zip(leases, read.held, strict=True) if h]
                flight.give_back(taken)
            elif leases and flight is not None and isinstance(exc, TierTimeout):
                # The script may still run after we stopped waiting for it, and take
                # holds nobody here will compute: give them back (see give_back).
                flight.give_back([lease for lease, _ in leases])
            return
        unwanted: list[KeyDigest] = []
        keys, max_ttl_s = self._keys, self._max_ttl_s
        for j, (i, value) in enumerate(zip(pending, values, strict=True)):
            q = queries[i]
            results[i] = LookupResult(Outcome.MISS, q.key.digest)
            if value is None:
                if read is not None and tried is not None:
                    lease, token = leases[j]
                    tried[i] = HoldTry(lease, token, read.held[j])
                continue
            try:
                entry = entries.decode(value, q.key.material, keys)
                entries.check_bounds(entry, now, store_epoch, max_ttl_s)
            except EntryRejected as exc:
                self.stats.count_rejected(q.key.model_version, exc.reason)
                count = self._log_throttle.hit(exc.reason)
                if count is not None:
                    log.warning(
                        "entry_rejected",
                        reason=exc.reason,
                        detail=str(exc),
                        digest=q.key.digest.hex(),
                        occurrences=count,
                    )
                unwanted.append(q.key.digest)
                continue
            if self.rules.is_dead(q.key.dims, entry.epoch):
                self.stats.count_dead(q.key.model_version)
                unwanted.append(q.key.digest)
                continue
            if entry.expires_at_ms <= now:
                continue
            self.hot.put(q.key.digest, entry)
            results[i] = self._hit_or_miss(q, entry, TierName.WARM, now)
        if unwanted:
            self._spawn(self._delete_quietly(unwanted))

    def _hit_or_miss(self, q: LookupQuery, entry: Entry, tier: TierName, now: int) -> LookupResult:
        age = now - entry.created_at_ms
        if age < 0:
            age = 0
        if q.max_age_s and age > q.max_age_s * 1000:
            return LookupResult(Outcome.MISS, q.key.digest)
        if q.accept is not None and not q.accept(entry):
            return LookupResult(Outcome.MISS, q.key.digest)
        return LookupResult(Outcome.HIT, q.key.digest, entry, tier, age)

    async def _delete_quietly(self, digests: list[KeyDigest]) -> None:
        try:
            await self.warm.delete_many(digests)
        except TierUnavailable as exc:
            log.warning("unwanted_entry_delete_failed", error=str(exc))

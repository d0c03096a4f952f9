"""Reading the tiers for a batch of lookups: the hot tier, then the warm tier for what
memory cannot answer, every entry verified against its key and the invalidation rules.

The warm read carries the store's epoch: an epoch ahead of the one applied here is
caught up first; one behind it (a store that lost writes) or a store still settling
answers nothing (degraded MISSes) until the rules are re-published. Lookups read the
warm tier the way chosen when the cache was built (warm_read.py: on a HoldingStore the
read also takes the holds of the keys it finds absent); a second look (a waiter's, a
new holder's recheck) reads it plainly. The reader never calls single flight: the holds
a read tried, and those to give back, are returned with its results. Entries that fail
verification or are dead are deleted in the background.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, NamedTuple, cast

import structlog

from sidecar import entries
from sidecar.entries import Entry, EntryRejected
from sidecar.errors import StoreDistrusted, TierUnavailable
from sidecar.invalidation.freshness import Freshness
from sidecar.keys import KeyDigest
from sidecar.observability.stats import CacheStats
from sidecar.observability.throttle import LogThrottle
from sidecar.results.lease_tokens import Lease
from sidecar.results.types import LookupQuery, LookupResult, Outcome, TierName
from sidecar.results.warm_read import NO_HOLDS, HoldTry, PlainRead, ReadFailed, WarmRead
from sidecar.tiers.base import WarmTier
from sidecar.tiers.hot import HotTier

log = structlog.get_logger("infercache.cache")

Spawn = Callable[[Coroutine[Any, Any, None]], None]


class Found(NamedTuple):
    """A read's answer: one result per query (no leases yet), the holds the read tried
    for MISSes (by position), and holds to give back (taken by a read whose answer was
    not used)."""

    results: list[LookupResult]
    holds: Mapping[int, HoldTry] = NO_HOLDS
    give_back: Sequence[Lease] = ()


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
        read: WarmRead | None = None,
        max_ttl_s: int = 2**32 - 1,
    ) -> None:
        """`read`: how lookups read the warm tier (None: plainly); `spawn` runs background
        work the cache drains at shutdown; `max_ttl_s`: the fleet's longest TTL (an entry
        claiming more is refused). Entries are authenticated with `freshness.keys`."""
        self.hot = hot
        self.warm = warm
        self.freshness = freshness
        self.rules = freshness.rules
        self.stats = stats
        self._clock_ms = clock_ms
        self._spawn = spawn
        self._plain = PlainRead(warm)
        self._read: WarmRead = read or self._plain
        self._keys = freshness.keys
        self._max_ttl_s = max_ttl_s
        self._log_throttle = LogThrottle()

    async def lookup(self, queries: Sequence[LookupQuery]) -> Found:
        """Hot then warm, read the way lookups read (holds tried where it takes them)."""
        return await self._find(queries, self._read, True)

    async def find(self, queries: Sequence[LookupQuery]) -> list[LookupResult]:
        """Hot then warm, plainly: a waiter's look for the holder's result."""
        return (await self._find(queries, self._plain, True)).results

    async def recheck(self, queries: Sequence[LookupQuery]) -> list[LookupResult]:
        """The warm tier alone, plainly: what a caller that just took a key's hold reads.
        A holder writes its result to the warm tier, then releases, and only then puts
        it in its own hot tier: a hot tier may still hold the entry it replaces (an old
        one, or one in another form) when the hold is free already."""
        return (await self._find(queries, self._plain, False)).results

    def hot_answer(self, q: LookupQuery) -> LookupResult | None:
        """`q` answered from the hot tier alone, as `lookup` would answer it; None when the
        tiers must be read (the batch path then decides: nothing here was left half-done).

        A single lookup's direct path (ResultCache.lookup) and every batch share it.
        """
        return self._from_hot(q, self._clock_ms(), self.freshness.confirmed())

    def _from_hot(self, q: LookupQuery, now: int, confirmed: bool) -> LookupResult | None:
        """The hot tier's answer to `q` at `now`: a HIT, or the MISS the caller's bounds
        make of a live entry; None when memory cannot answer (not held, a collision, a dead
        entry, which is dropped and counted, or rules not `confirmed` current)."""
        key = q.key
        entry = self.hot.get(key.digest, now)
        # The hot tier is keyed by digest; comparing material also rules out collisions.
        if entry is None or entry.material != key.material:
            return None
        if self.rules.is_dead(key.dims, entry.epoch):
            self.hot.discard(key.digest)
            self.stats.count_dead(key.model_version)
            return None
        if not confirmed:
            # Not known to be current: let the warm read (which carries the store's
            # epoch) decide instead of trusting memory.
            return None
        if q.max_age_s or q.accept is not None:
            return _hit_or_miss(q, entry, TierName.HOT, now)
        # _hit_or_miss inlined for the common query (no bound, any form)
        age = now - entry.created_at_ms
        return LookupResult(Outcome.HIT, key.digest, entry, TierName.HOT, age if age > 0 else 0)

    async def _find(self, queries: Sequence[LookupQuery], read: WarmRead, hot: bool) -> Found:
        now = self._clock_ms()
        results: list[LookupResult | None] = [None] * len(queries)
        if not hot:
            pending = list(range(len(queries)))
        else:
            pending = []
            confirmed = self.freshness.confirmed()
            from_hot = self._from_hot
            for i, q in enumerate(queries):
                r = from_hot(q, now, confirmed)
                if r is None:
                    pending.append(i)
                else:
                    results[i] = r
            if not pending:
                return Found(cast(list[LookupResult], results))
        return await self._find_warm(queries, pending, results, now, read)

    async def _find_warm(
        self,
        queries: Sequence[LookupQuery],
        pending: list[int],
        results: list[LookupResult | None],
        now: int,
        read: WarmRead,
    ) -> Found:
        try:
            fetched = await read.fetch([queries[i].key.digest for i in pending])
        except ReadFailed as failed:
            self._degrade(queries, pending, results, failed.cause)
            return Found(cast(list[LookupResult], results), give_back=failed.at_risk)
        store_epoch = fetched.epoch
        try:
            await self._check_epoch(store_epoch)
        except TierUnavailable as exc:
            self._degrade(queries, pending, results, exc)
            # Holds taken by a read whose answer is not trusted: a degraded MISS
            # holds nothing, so they are given back now instead of at expiry.
            taken = [h.lease for h in fetched.holds.values() if h.held]
            return Found(cast(list[LookupResult], results), give_back=taken)
        unwanted: list[KeyDigest] = []
        keys, max_ttl_s, rules = self._keys, self._max_ttl_s, self.rules
        for i, value in zip(pending, fetched.values, strict=True):
            q = queries[i]
            key = q.key
            if value is None:
                results[i] = LookupResult(Outcome.MISS, key.digest)
                continue
            try:
                entry = entries.decode(value, key.material, keys)
                entries.check_bounds(entry, now, store_epoch, max_ttl_s)
            except EntryRejected as exc:
                self._rejected(q, exc)
                results[i] = LookupResult(Outcome.MISS, key.digest)
                unwanted.append(key.digest)
                continue
            if rules.is_dead(key.dims, entry.epoch):
                self.stats.count_dead(key.model_version)
                results[i] = LookupResult(Outcome.MISS, key.digest)
                unwanted.append(key.digest)
                continue
            if entry.expires_at_ms <= now:
                results[i] = LookupResult(Outcome.MISS, key.digest)
                continue
            self.hot.put(key.digest, entry)
            results[i] = _hit_or_miss(q, entry, TierName.WARM, now)
        if unwanted:
            self._spawn(self._delete_quietly(unwanted))
        holds = fetched.holds
        if holds and len(pending) != len(queries):
            holds = {pending[j]: h for j, h in holds.items()}  # by position in `queries`
        return Found(cast(list[LookupResult], results), holds)

    async def _check_epoch(self, store_epoch: int) -> None:
        """Catch up to a newer store epoch; TierUnavailable while answers are not trusted."""
        if store_epoch > self.rules.epoch:
            await self.freshness.sync_to(store_epoch)
        self.freshness.check_servable()
        if self.freshness.settling or store_epoch < self.rules.epoch:
            # A restarted store may lack rules until the fleet re-publishes them
            # (an epoch below the one applied here: it lost writes). The refresh
            # this pokes re-publishes and re-reads; until then, nothing is a hit.
            self.freshness.poke()
            raise TierUnavailable("control store restarted; waiting for rules to settle")

    def _degrade(
        self,
        queries: Sequence[LookupQuery],
        pending: list[int],
        results: list[LookupResult | None],
        exc: TierUnavailable,
    ) -> None:
        """Every pending query a degraded MISS; the failure counted and logged."""
        self.stats.warm_read_failures += 1
        if isinstance(exc, StoreDistrusted) or self.freshness.distrust is not None:
            # The alert: entries_rejected{reason="store_distrusted"}.
            self.stats.count_rejected("", "store_distrusted")
        log.warning("warm_read_failed", tier=self.warm.name, error=str(exc))
        for i in pending:
            results[i] = LookupResult(Outcome.MISS, queries[i].key.digest, degraded=True)

    def _rejected(self, q: LookupQuery, exc: EntryRejected) -> None:
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

    async def _delete_quietly(self, digests: list[KeyDigest]) -> None:
        try:
            await self.warm.delete_many(digests)
        except TierUnavailable as exc:
            log.warning("unwanted_entry_delete_failed", error=str(exc))


def _hit_or_miss(q: LookupQuery, entry: Entry, tier: TierName, now: int) -> LookupResult:
    """HIT unless the caller's max age or its `accept` rules the entry out."""
    age = now - entry.created_at_ms
    if age < 0:
        age = 0
    if (q.max_age_s and age > q.max_age_s * 1000) or (q.accept is not None and not q.accept(entry)):
        return LookupResult(Outcome.MISS, q.key.digest)
    return LookupResult(Outcome.HIT, q.key.digest, entry, tier, age)

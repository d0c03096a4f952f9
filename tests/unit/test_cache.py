"""ResultCache: tier order, promotion, freshness bounds, TTLs, verification and failure policy."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from sidecar import entries
from sidecar.entries import ComputeCost, Entry
from sidecar.errors import InvalidArgument
from sidecar.keys import CacheKey
from sidecar.observability.stats import CacheStats
from sidecar.policy.ttl import TtlPolicy
from sidecar.results.cache import ResultCache
from sidecar.results.observers import LookupLog
from sidecar.results.parts import CacheWatchers
from sidecar.results.types import LookupQuery, LookupResult, Outcome, StoreStatus, TierName
from sidecar.testing import T0_MS, Clock, FlakyWarmTier
from sidecar.tiers.base import WarmItem
from tests.support.caches import HOUR_TTL, MAX_PAYLOAD, unit_cache
from tests.support.keys import cache_key


def make_cache(
    flaky_warm: FlakyWarmTier, clock: Clock, ttl: TtlPolicy | None = None, hot_entries: int = 1000
) -> ResultCache:
    return unit_cache(flaky_warm, clock, ttl=ttl or HOUR_TTL, hot_entries=hot_entries)


@pytest.fixture
def cache(flaky_warm: FlakyWarmTier, clock: Clock) -> ResultCache:
    return make_cache(flaky_warm, clock)


async def lookup(cache: ResultCache, k: CacheKey, max_age_s: int = 0) -> LookupResult:
    return await cache.lookup(LookupQuery(k, max_age_s))


async def store(
    cache: ResultCache, k: CacheKey, payload: bytes = b"answer", ttl_s: int = 0
) -> StoreStatus:
    """Store the way clients must: with the lease from a MISS."""
    miss = await lookup(cache, k)
    assert miss.outcome is Outcome.MISS
    return (await cache.store(k, payload, ttl_s, lease_token=miss.lease)).status


async def test_store_then_lookup_is_a_hot_hit(cache: ResultCache, clock: Clock) -> None:
    """A stored result is served from the hot tier with its payload, cost and age."""
    k = cache_key()
    miss = await lookup(cache, k)
    assert miss.outcome is Outcome.MISS
    stored = await cache.store(k, b"answer", lease_token=miss.lease, cost=ComputeCost(900, 10, 5))
    assert stored.status is StoreStatus.STORED
    clock.advance(2.5)
    hit = await lookup(cache, k)
    assert (hit.outcome, hit.tier, hit.age_ms) == (Outcome.HIT, TierName.HOT, 2500)
    assert hit.entry is not None
    assert hit.entry.payload == b"answer"
    assert hit.entry.cost == ComputeCost(900, 10, 5)
    assert hit.digest == k.digest
    assert cache.stats.total("lookups", outcome="hit", tier="hot") == 1


async def test_observers_see_each_lookup_call_once_with_its_final_results(
    flaky_warm: FlakyWarmTier, clock: Clock
) -> None:
    """Every observer gets one call per lookup_many, after the counters, with the
    queries and the results as answered (a MISS already carrying its lease)."""
    log = LookupLog()
    stats = CacheStats()
    seen_counts: list[int] = []

    class CountsFirst:
        def observe(self, queries: Sequence[LookupQuery], results: Sequence[LookupResult]) -> None:
            seen_counts.append(stats.total("lookups"))

    cache = unit_cache(flaky_warm, clock, watchers=CacheWatchers(stats, (log, CountsFirst())))
    stored, fresh = cache_key("stored"), cache_key("fresh")
    await store(cache, stored)
    batch = [LookupQuery(stored), LookupQuery(fresh)]
    results = await cache.lookup_many(batch)
    assert len(log.calls) == 2  # store()'s own lookup, then the batch
    queries, observed = log.calls[-1]
    assert list(queries) == batch
    assert list(observed) == results
    assert [r.outcome for r in observed] == [Outcome.HIT, Outcome.MISS]
    assert observed[1].lease
    assert log.outcomes() == [Outcome.MISS, Outcome.HIT, Outcome.MISS]
    assert seen_counts == [1, 3]


async def test_hot_hit_does_not_touch_the_warm_tier(
    cache: ResultCache, flaky_warm: FlakyWarmTier
) -> None:
    """A hot hit costs no warm-tier round trip."""
    k = cache_key()
    await store(cache, k)
    reads = flaky_warm.reads
    assert (await lookup(cache, k)).tier is TierName.HOT
    assert flaky_warm.reads == reads


async def test_warm_hit_is_promoted_to_hot(
    cache: ResultCache, flaky_warm: FlakyWarmTier, clock: Clock
) -> None:
    """A result only in the warm tier is a WARM hit, then a HOT hit."""
    k = cache_key()
    await store(cache, k)
    other_pod = make_cache(flaky_warm, clock)  # same warm tier, empty hot tier
    first = await lookup(other_pod, k)
    assert (first.outcome, first.tier) == (Outcome.HIT, TierName.WARM)
    assert first.entry is not None
    assert first.entry.payload == b"answer"
    second = await lookup(other_pod, k)
    assert (second.outcome, second.tier) == (Outcome.HIT, TierName.HOT)
    assert other_pod.stats.total("lookups", outcome="hit", tier="warm") == 1
    assert other_pod.stats.total("lookups", outcome="hit", tier="hot") == 1


async def test_hot_tier_disabled_still_hits_warm(flaky_warm: FlakyWarmTier, clock: Clock) -> None:
    """With hot_max_entries=0 every hit comes from the warm tier."""
    cache = make_cache(flaky_warm, clock, hot_entries=0)
    k = cache_key()
    await store(cache, k)
    for _ in range(2):
        assert (await lookup(cache, k)).tier is TierName.WARM
    assert len(cache.hot) == 0


@pytest.mark.parametrize("tier", [TierName.HOT, TierName.WARM])
async def test_max_age_is_respected(
    flaky_warm: FlakyWarmTier, clock: Clock, tier: TierName
) -> None:
    """An entry older than the caller's max_age_s is a MISS; a younger one is a HIT."""
    cache = make_cache(flaky_warm, clock, hot_entries=1000 if tier is TierName.HOT else 0)
    k = cache_key()
    await store(cache, k)
    clock.advance(10)
    assert (await lookup(cache, k, max_age_s=9)).outcome is Outcome.MISS
    hit = await lookup(cache, k, max_age_s=11)
    assert (hit.outcome, hit.tier) == (Outcome.HIT, tier)
    assert (await lookup(cache, k, max_age_s=0)).outcome is Outcome.HIT


@pytest.mark.parametrize(
    ("tenant", "requested", "expected"),
    [
        ("acme", 0, 3600),  # default
        ("acme", 60, 60),  # as asked
        ("acme", 10**6, 86400),  # global maximum
        ("capped", 0, 600),  # default above the tenant cap
        ("capped", 60, 60),
        ("capped", 7200, 600),  # tenant maximum
        ("generous", 10**6, 86400),  # a tenant cap never lifts the global maximum
    ],
)
def test_ttl_policy_clamps(tenant: str, requested: int, expected: int) -> None:
    """The TTL is the request or the default, clamped by the tenant cap and the global max."""
    policy = TtlPolicy(
        default_s=3600, max_s=86400, tenant_max_s={"capped": 600, "generous": 10 * 86400}
    )
    assert policy.effective(tenant, requested) == expected


async def test_store_applies_the_clamped_ttl(flaky_warm: FlakyWarmTier, clock: Clock) -> None:
    """A store reports the clamped TTL and the entry expires then, in both tiers."""
    cache = make_cache(
        flaky_warm, clock, TtlPolicy(default_s=60, max_s=120, tenant_max_s={"t": 30})
    )
    k = cache_key(tenant="t")
    miss = await lookup(cache, k)
    result = await cache.store(k, b"a", ttl_s=3600, lease_token=miss.lease)
    assert result.ttl_s == 30
    clock.advance(29.9)
    assert (await lookup(cache, k)).outcome is Outcome.HIT
    clock.advance(0.1)
    assert (await lookup(cache, k)).outcome is Outcome.MISS
    assert await flaky_warm.inner.get_many([k.digest]) == [None]
    assert len(cache.hot) == 0


async def test_store_with_failing_warm_tier_stores_nothing(
    cache: ResultCache, flaky_warm: FlakyWarmTier
) -> None:
    """When the warm write fails the store is WRITE_FAILED and nothing lands in the hot tier."""
    k = cache_key()
    miss = await lookup(cache, k)
    flaky_warm.down = True
    result = await cache.store(k, b"answer", lease_token=miss.lease)
    assert result.status is StoreStatus.WRITE_FAILED
    assert len(cache.hot) == 0
    assert cache.stats.warm_write_failures == 1
    assert cache.stats.total("stores", result="stored") == 0
    flaky_warm.down = False
    assert (await lookup(cache, k)).outcome is Outcome.MISS


async def test_failed_overwrite_drops_the_old_hot_copy(
    cache: ResultCache, flaky_warm: FlakyWarmTier, clock: Clock
) -> None:
    """A failed store of a new result must not leave the previous result hot."""
    k = cache_key()
    await store(cache, k, b"v1")
    clock.advance(2)
    refresh = await lookup(cache, k, max_age_s=1)  # too old for this caller: MISS + lease
    assert refresh.outcome is Outcome.MISS
    assert len(cache.hot) == 1
    flaky_warm.down = True
    result = await cache.store(k, b"v2", lease_token=refresh.lease)
    assert result.status is StoreStatus.WRITE_FAILED
    assert len(cache.hot) == 0
    found = await lookup(cache, k)
    assert found.outcome is Outcome.MISS
    assert found.degraded is True


async def test_lookup_with_failing_warm_tier_is_a_degraded_miss(
    cache: ResultCache, flaky_warm: FlakyWarmTier
) -> None:
    """A warm-tier failure turns a lookup into MISS with degraded=True, never an error."""
    flaky_warm.down = True
    results = await cache.lookup_many([LookupQuery(cache_key("a")), LookupQuery(cache_key("b"))])
    assert [(r.outcome, r.degraded) for r in results] == [(Outcome.MISS, True)] * 2
    assert cache.stats.warm_read_failures == 1


async def test_hot_hits_survive_a_warm_tier_outage(
    cache: ResultCache, flaky_warm: FlakyWarmTier
) -> None:
    """With a single-process control store, hot entries keep hitting while the warm tier is down."""
    k = cache_key()
    await store(cache, k)
    flaky_warm.down = True
    hit = await lookup(cache, k)
    assert (hit.outcome, hit.tier, hit.degraded) == (Outcome.HIT, TierName.HOT, False)


async def test_oversized_payload_is_refused_and_nothing_is_stored(
    cache: ResultCache, flaky_warm: FlakyWarmTier
) -> None:
    """A payload over max_payload_bytes is InvalidArgument naming 'payload'; no tier changes."""
    k = cache_key()
    miss = await lookup(cache, k)
    with pytest.raises(InvalidArgument) as err:
        await cache.store(k, b"x" * (MAX_PAYLOAD + 1), lease_token=miss.lease)
    assert err.value.field == "payload"
    assert (len(cache.hot), len(flaky_warm.inner)) == (0, 0)
    ok = await cache.store(k, b"x" * MAX_PAYLOAD, lease_token=miss.lease)
    assert ok.status is StoreStatus.STORED


async def _plant(flaky_warm: FlakyWarmTier, k: CacheKey, value: bytes) -> None:
    await flaky_warm.put_many([WarmItem(k.digest, value, 3_600_000)])


def _valid_value(k: CacheKey, payload: bytes = b"planted", created: int = T0_MS) -> bytes:
    return entries.encode(Entry(k.material, payload, created_at_ms=created, ttl_s=3600))


async def test_corrupted_warm_value_is_a_counted_miss_and_deleted(
    cache: ResultCache, flaky_warm: FlakyWarmTier
) -> None:
    """A warm value failing its tag is a MISS, counted as forged, never served, deleted."""
    k = cache_key()
    damaged = bytearray(_valid_value(k))
    damaged[-40] ^= 0x01  # inside the payload
    await _plant(flaky_warm, k, bytes(damaged))
    result = await lookup(cache, k)
    assert (result.outcome, result.entry, result.degraded) == (Outcome.MISS, None, False)
    assert cache.stats.total("rejected", reason="forged") == 1
    assert len(cache.hot) == 0
    await cache.drain()
    assert await flaky_warm.inner.get_many([k.digest]) == [None]


async def test_foreign_warm_value_is_a_counted_miss_and_deleted(
    cache: ResultCache, flaky_warm: FlakyWarmTier
) -> None:
    """A valid entry of another key found under this key's digest is a MISS counted as foreign."""
    k, other = cache_key("mine"), cache_key("someone else's")
    await _plant(flaky_warm, k, _valid_value(other, b"not yours"))
    result = await lookup(cache, k)
    assert (result.outcome, result.entry) == (Outcome.MISS, None)
    assert cache.stats.total("rejected", reason="foreign") == 1
    await cache.drain()
    assert await flaky_warm.inner.get_many([k.digest]) == [None]


async def test_expired_entry_in_the_warm_tier_is_a_miss(
    cache: ResultCache, flaky_warm: FlakyWarmTier
) -> None:
    """An entry past its own expiry is a MISS even if the warm tier still holds it."""
    k = cache_key()
    stale = entries.encode(Entry(k.material, b"old", created_at_ms=T0_MS - 7_200_000, ttl_s=3600))
    await _plant(flaky_warm, k, stale)
    assert (await lookup(cache, k)).outcome is Outcome.MISS
    assert len(cache.hot) == 0


async def test_hot_entry_of_another_key_is_never_served(
    cache: ResultCache, flaky_warm: FlakyWarmTier
) -> None:
    """A hot entry whose material differs from the key (a digest collision) is not a hit."""
    k, other = cache_key("mine"), cache_key("other")
    cache.hot.put(k.digest, Entry(other.material, b"wrong", created_at_ms=T0_MS, ttl_s=3600))
    result = await lookup(cache, k)
    assert result.outcome is Outcome.MISS
    await _plant(flaky_warm, k, _valid_value(k, b"right"))
    hit = await lookup(cache, k)
    assert hit.entry is not None
    assert hit.entry.payload == b"right"


async def test_lookup_many_keeps_order_across_tiers(
    cache: ResultCache, flaky_warm: FlakyWarmTier
) -> None:
    """Batch results follow request order whatever tier answers each item."""
    hot_k, warm_k, miss_k = cache_key("hot"), cache_key("warm"), cache_key("missing")
    await store(cache, hot_k, b"H")
    await _plant(flaky_warm, warm_k, _valid_value(warm_k, b"W"))
    results = await cache.lookup_many(
        [LookupQuery(miss_k), LookupQuery(warm_k), LookupQuery(hot_k), LookupQuery(miss_k)]
    )
    assert [(r.outcome, r.tier) for r in results] == [
        (Outcome.MISS, None),
        (Outcome.HIT, TierName.WARM),
        (Outcome.HIT, TierName.HOT),
        (Outcome.MISS, None),
    ]
    assert [r.digest for r in results] == [
        miss_k.digest,
        warm_k.digest,
        hot_k.digest,
        miss_k.digest,
    ]
    assert [r.entry.payload if r.entry else None for r in results] == [None, b"W", b"H", None]

"""ResultCache applies the cacheability policy before any tier, lease or write."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from sidecar.errors import InvalidArgument
from sidecar.observability.stats import CacheStats
from sidecar.policy.cacheability import (
    BypassReason,
    Policy,
    PolicyHolder,
    RequestTraits,
    TenantPolicy,
)
from sidecar.results.cache import ResultCache
from sidecar.results.parts import CacheAdmission, CacheWatchers
from sidecar.results.types import LookupQuery, Outcome, StoreStatus
from sidecar.testing import Clock, FlakyWarmTier
from tests.support.caches import MAX_PAYLOAD, unit_cache
from tests.support.keys import cache_key

CLOSED = Policy(
    TenantPolicy(deterministic_only=True, max_entry_bytes=100),
    MappingProxyType({"billing": TenantPolicy(cacheable=False)}),
    "test",
)


@pytest.fixture
def holder() -> PolicyHolder:
    return PolicyHolder(CLOSED)


@pytest.fixture
def cache(flaky_warm: FlakyWarmTier, clock: Clock, holder: PolicyHolder) -> ResultCache:
    stats = CacheStats()
    stats.admit("m1")  # the version this fleet stores: it has its own label
    return unit_cache(
        flaky_warm, clock, watchers=CacheWatchers(stats), admission=CacheAdmission(holder)
    )


async def test_bypass_lookup_touches_no_tier_and_hands_out_no_lease(
    cache: ResultCache, flaky_warm: FlakyWarmTier
) -> None:
    """A bypassed lookup reads no tier, holds no lease and is counted by reason and version."""
    flaky_warm.down = True  # any tier access would show as degraded
    result = await cache.lookup(LookupQuery(cache_key(tenant="billing")))
    assert result.outcome is Outcome.BYPASS
    assert result.bypass is not None
    assert result.bypass.reason is BypassReason.NOT_CACHEABLE
    assert (result.lease, result.lease_holder, result.degraded) == (b"", False, False)
    assert flaky_warm.reads == 0
    assert cache.stats.lookups[("m1", "bypass", "")] == 1
    assert cache.stats.bypasses[("m1", "not_cacheable")] == 1
    assert cache.stats.snapshot()["bypasses.not_cacheable"] == 1


async def test_declared_traits_bypass_and_undeclared_do_not(cache: ResultCache) -> None:
    """The same key is a MISS without traits and BYPASS when the request declares side effects."""
    k = cache_key()
    assert (await cache.lookup(LookupQuery(k))).outcome is Outcome.MISS
    declared = await cache.lookup(LookupQuery(k, traits=RequestTraits(side_effects=True)))
    assert declared.outcome is Outcome.BYPASS
    assert declared.bypass is not None
    assert declared.bypass.reason is BypassReason.SIDE_EFFECTS


async def test_batch_answers_bypass_in_place_and_reads_only_the_rest(
    cache: ResultCache, flaky_warm: FlakyWarmTier
) -> None:
    """In a batch, bypassed keys keep their positions; the others get MISS with leases."""
    queries = [
        LookupQuery(cache_key("a")),
        LookupQuery(cache_key("b", temperature=None)),  # unset = 1.0, no seed
        LookupQuery(cache_key("c", tenant="billing")),
        LookupQuery(cache_key("d", temperature=None, seed=3)),
    ]
    results = await cache.lookup_many(queries)
    assert [r.outcome for r in results] == [
        Outcome.MISS,
        Outcome.BYPASS,
        Outcome.BYPASS,
        Outcome.MISS,
    ]
    assert [r.digest for r in results] == [q.key.digest for q in queries]
    assert [bool(r.lease) for r in results] == [True, False, False, True]
    assert results[1].bypass is not None
    assert results[1].bypass.reason is BypassReason.NON_DETERMINISTIC
    assert flaky_warm.reads == 1


async def test_store_of_a_bypassed_request_writes_nothing(
    cache: ResultCache, flaky_warm: FlakyWarmTier
) -> None:
    """Store is BYPASSED (even without a lease) and no tier receives the entry."""
    k = cache_key(tenant="billing")
    result = await cache.store(k, b"secret invoice")
    assert result.status is StoreStatus.BYPASSED
    assert result.bypass is not None
    assert result.bypass.reason is BypassReason.NOT_CACHEABLE
    assert result.ttl_s == 0
    assert await flaky_warm.inner.get_many([k.digest]) == [None]
    assert len(cache.hot) == 0
    assert cache.stats.total("stores", result="stored") == 0
    assert cache.stats.stores[("m1", "refused", "not_cacheable")] == 1
    assert cache.stats.bypasses[("m1", "not_cacheable")] == 1


async def test_store_declaring_traits_is_bypassed_even_with_a_lease(cache: ResultCache) -> None:
    """A lease from a MISS does not override the policy: traits at Store bypass it."""
    k = cache_key()
    miss = await cache.lookup(LookupQuery(k))
    result = await cache.store(
        k, b"x", lease_token=miss.lease, traits=RequestTraits(private_data=True)
    )
    assert result.status is StoreStatus.BYPASSED
    assert result.bypass is not None
    assert result.bypass.reason is BypassReason.PRIVATE_DATA
    assert (await cache.lookup(LookupQuery(k))).outcome is Outcome.MISS


async def test_store_over_the_tenant_entry_size_is_bypassed(cache: ResultCache) -> None:
    """max_entry_bytes: a larger result is BYPASSED, a result at the limit is stored."""
    k = cache_key()
    miss = await cache.lookup(LookupQuery(k))
    big = await cache.store(k, b"x" * 101, lease_token=miss.lease)
    assert big.status is StoreStatus.BYPASSED
    assert big.bypass is not None
    assert big.bypass.reason is BypassReason.ENTRY_TOO_LARGE
    miss = await cache.lookup(LookupQuery(k))
    assert (await cache.store(k, b"x" * 100, lease_token=miss.lease)).status is StoreStatus.STORED


async def test_global_payload_limit_stays_an_error(cache: ResultCache) -> None:
    """Over INFERCACHE_MAX_PAYLOAD_BYTES is INVALID_ARGUMENT, whatever the policy says."""
    with pytest.raises(InvalidArgument, match="payload"):
        await cache.store(cache_key(tenant="billing"), b"x" * (MAX_PAYLOAD + 1))


async def test_policy_change_after_the_miss_still_bypasses_the_store(
    cache: ResultCache, holder: PolicyHolder
) -> None:
    """A tenant made non-cacheable while computing gets BYPASSED and its lease is released."""
    k = cache_key()
    miss = await cache.lookup(LookupQuery(k))
    assert miss.lease_holder
    holder.current = Policy(TenantPolicy(cacheable=False))
    result = await cache.store(k, b"answer", lease_token=miss.lease)
    assert result.status is StoreStatus.BYPASSED
    holder.current = CLOSED
    again = await cache.lookup(LookupQuery(k))
    assert again.outcome is Outcome.MISS
    assert again.lease_holder, "the bypassed store must release the lease it held"


async def test_policy_ttl_is_applied(cache: ResultCache, holder: PolicyHolder) -> None:
    """The tenant's default and maximum TTL from the policy decide the stored TTL."""
    holder.current = Policy(TenantPolicy(default_ttl_s=120, max_ttl_s=300))
    k1, k2 = cache_key("one"), cache_key("two")
    miss = await cache.lookup(LookupQuery(k1))
    assert (await cache.store(k1, b"a", lease_token=miss.lease)).ttl_s == 120
    miss = await cache.lookup(LookupQuery(k2))
    assert (await cache.store(k2, b"a", ttl_s=9999, lease_token=miss.lease)).ttl_s == 300


async def test_skip_for_inert_policies_still_sees_the_one_strict_tenant(
    cache: ResultCache, holder: PolicyHolder
) -> None:
    """Defaults that only act on declared traits do not hide a strict tenant's rules,
    and declared traits still bypass under the built-in policy."""
    holder.current = Policy(
        TenantPolicy(), MappingProxyType({"billing": TenantPolicy(cacheable=False)})
    )
    results = await cache.lookup_many(
        [
            LookupQuery(cache_key("a", temperature=None)),
            LookupQuery(cache_key("b", tenant="billing")),
        ]
    )
    assert [r.outcome for r in results] == [Outcome.MISS, Outcome.BYPASS]
    holder.current = Policy()
    declared = await cache.lookup(LookupQuery(cache_key("c"), traits=RequestTraits(real_time=True)))
    assert declared.outcome is Outcome.BYPASS

"""Every sidecar applies every rule, including ones committed concurrently elsewhere."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from infercache.v1 import cache_pb2 as pb

from sidecar.backends.redis.control import RedisControlStore
from sidecar.backends.redis.warm import RedisWarmTier
from sidecar.config import LimitsConfig, TtlConfig
from sidecar.invalidation.freshness import Freshness
from sidecar.invalidation.invalidator import Invalidator
from sidecar.invalidation.rules import RuleSet, Selector
from sidecar.invalidation.store import AuditRecord
from sidecar.keys import InputKind, KeyRequest, build_key
from sidecar.policy.ttl import TtlPolicy
from sidecar.results.cache import ResultCache
from sidecar.results.lease_tokens import LeaseSigner
from sidecar.results.parts import CacheSettings, CacheTiers
from sidecar.results.types import LookupQuery, Outcome
from sidecar.tiers.hot import HotTier
from tests.support.cluster import RedisClusterProcesses
from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import sidecar

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]


class CommitsRightBefore:
    """A real RedisControlStore on which another sidecar's invalidation always lands just
    before this one's: the interleaving two concurrent Invalidates can have."""

    def __init__(self, inner: RedisControlStore, other: RedisControlStore, first: Selector):
        self._inner = inner
        self._other = other
        self._first = first

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def commit_invalidation(
        self, selector: Selector, reason: str, caller: str, estimated_entries: int
    ) -> AuditRecord:
        await self._other.commit_invalidation(self._first, "concurrent", "other", 0)
        return await self._inner.commit_invalidation(selector, reason, caller, estimated_entries)


async def test_rule_committed_just_before_ours_is_applied(
    shared_redis: RedisServer | RedisClusterProcesses,
) -> None:
    """When another sidecar's rule is committed between our refresh and our commit, we
    still apply it: an entry it kills misses here once our Invalidate returns, and later."""
    warm = RedisWarmTier(shared_redis.url, read_timeout_s=2, write_timeout_s=2)
    mine = RedisControlStore(shared_redis.url, timeout_s=2, client=warm.client)
    other = RedisControlStore(shared_redis.url, timeout_s=2)
    rules = RuleSet()
    control: Any = CommitsRightBefore(mine, other, Selector(tenant="acme"))
    freshness = Freshness(control, rules, bound_s=0.3)
    cache = ResultCache(
        CacheTiers(HotTier(1 << 20, 100), warm),
        CacheSettings(
            TtlPolicy.from_config(TtlConfig()),
            max_payload_bytes=1 << 20,
            max_chunks=LimitsConfig().max_chunks,
        ),
        freshness=freshness,
        signer=LeaseSigner(b"x" * 32),
    )
    try:
        await freshness.refresh()
        k = build_key(KeyRequest("acme", "m1", "p1", input="hello", input_kind=InputKind.TEXT))
        miss = await cache.lookup(LookupQuery(k))
        await cache.store(k, b"cached", lease_token=miss.lease)
        assert (await cache.lookup(LookupQuery(k))).outcome is Outcome.HIT

        record = await Invalidator(control, freshness, warm).invalidate(
            Selector(tenant="beta"), "ours", "me"
        )

        assert record.epoch == 2
        assert (await cache.lookup(LookupQuery(k))).outcome is Outcome.MISS
        await freshness.refresh()
        assert (await cache.lookup(LookupQuery(k))).outcome is Outcome.MISS
        assert {r.epoch for r in rules.rules()} == {1, 2}
    finally:
        await other.close()
        await mine.close()
        await warm.close()


async def test_concurrent_invalidations_from_two_sidecars(
    shared_redis: RedisServer | RedisClusterProcesses,
) -> None:
    """Many Invalidates racing through two sidecars: once all returned, each sidecar has
    every rule and misses every entry any of them killed."""
    tenants = [f"tenant-{i}" for i in range(12)]
    async with sidecar(shared_redis.url) as a, sidecar(shared_redis.url) as b:
        keys = [key("q", tenant=t) for t in tenants]
        for k in keys:
            await a.fill(k, b"cached")
        for s in (a, b):
            for k in keys:
                await s.client.lookup(k)
                assert (await s.client.lookup(k)).tier == pb.TIER_HOT
        await asyncio.gather(
            *(
                (a if i % 2 else b).invalidate(tenant=t, reason=f"purge {t}")
                for i, t in enumerate(tenants)
            )
        )
        for s in (a, b):
            assert len(s.running.freshness.rules) == len(tenants)
            for k in keys:
                assert (await s.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS

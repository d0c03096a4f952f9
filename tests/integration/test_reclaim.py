"""Background reclaim removes exactly the entries invalidation rules killed."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from sidecar.backends.redis.control import RedisControlStore
from sidecar.backends.redis.warm import RedisWarmTier
from sidecar.config import LimitsConfig, TtlConfig
from sidecar.invalidation.embedded_store import EmbeddedControlStore
from sidecar.invalidation.freshness import Freshness
from sidecar.invalidation.invalidator import Invalidator
from sidecar.invalidation.reclaim import Reclaimer
from sidecar.invalidation.rules import RuleSet, Selector
from sidecar.invalidation.store import ControlStore
from sidecar.keys import CacheKey, InputKind, KeyDigest, KeyRequest, build_key
from sidecar.policy.ttl import TtlPolicy
from sidecar.results.cache import ResultCache
from sidecar.results.lease_tokens import LeaseSigner
from sidecar.results.parts import CacheSettings, CacheTiers
from sidecar.results.types import LookupQuery, Outcome, StoreStatus
from sidecar.tiers.base import WarmItem, WarmTier
from sidecar.tiers.embedded import EmbeddedWarmTier
from sidecar.tiers.hot import HotTier
from tests.support.cluster import RedisClusterProcesses
from tests.support.processes import RedisServer

pytestmark = pytest.mark.timeout(60)

# More than one scan batch (200), so reclaim pages through the store.
DEAD, ALIVE, NEWER = 250, 150, 5


@dataclass
class Node:
    """One sidecar's invalidation machinery, without the gRPC layer."""

    warm: WarmTier
    control: ControlStore
    cache: ResultCache
    invalidator: Invalidator
    reclaimer: Reclaimer


@pytest.fixture(
    params=[
        "embedded",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("cluster", marks=pytest.mark.redis),
    ]
)
async def node(request: pytest.FixtureRequest) -> AsyncIterator[Node]:
    """Cache, invalidator and reclaimer on the embedded stores, a real Redis or a cluster."""
    warm: WarmTier
    control: ControlStore
    if request.param == "embedded":
        embedded = EmbeddedControlStore()
        warm = EmbeddedWarmTier(1 << 30, 1_000_000, epoch_source=embedded.epoch_now)
        control = embedded
    else:
        fixture = "redis_server" if request.param == "redis" else "redis_cluster"
        server: RedisServer | RedisClusterProcesses = request.getfixturevalue(fixture)
        redis_warm = RedisWarmTier(server.url, read_timeout_s=2, write_timeout_s=2)
        warm = redis_warm
        control = RedisControlStore(server.url, timeout_s=2, client=redis_warm.client)
    rules = RuleSet()
    freshness = Freshness(control, rules, bound_s=0.3)
    await freshness.refresh()
    cache = ResultCache(
        CacheTiers(HotTier(1 << 30, 100_000), warm),
        CacheSettings(
            TtlPolicy.from_config(TtlConfig()),
            max_payload_bytes=1 << 20,
            max_chunks=LimitsConfig().max_chunks,
        ),
        freshness=freshness,
        signer=LeaseSigner(os.urandom(32)),
    )
    reclaimer = Reclaimer(warm, cache.hot, control, rules, cache.stats, keys_per_s=1_000_000)
    yield Node(warm, control, cache, Invalidator(control, freshness, warm), reclaimer)
    await control.leave(freshness.member_id)
    await control.close()
    await warm.close()


def _key(tenant: str, i: int) -> CacheKey:
    return build_key(
        KeyRequest(
            tenant=tenant,
            model_version="m1",
            prompt_version="p1",
            input=f"prompt {i}",
            input_kind=InputKind.TEXT,
        )
    )


async def _fill(cache: ResultCache, keys: list[CacheKey]) -> None:
    for k in keys:
        miss = await cache.lookup(LookupQuery(k))
        assert miss.outcome is Outcome.MISS
        stored = await cache.store(k, b"payload", lease_token=miss.lease)
        assert stored.status is StoreStatus.STORED


async def _all_digests(warm: WarmTier) -> set[KeyDigest]:
    found: set[KeyDigest] = set()
    cursor = 0
    while True:
        cursor, page = await warm.scan_page(cursor, 7)
        found.update(d for d, _ in page)
        if cursor == 0:
            return found


async def test_reclaim_removes_exactly_the_dead(node: Node) -> None:
    """After invalidating a selector matching N stored entries, run_pass removes those N
    (and counts them) while non-matching entries, entries stored after the rule, and values
    it cannot parse survive; a second pass finds nothing."""
    dead = [_key("acme", i) for i in range(DEAD)]
    alive = [_key("beta", i) for i in range(ALIVE)]
    await _fill(node.cache, dead + alive)
    await node.invalidator.invalidate(Selector(tenant="acme"), "purge", "test")
    newer = [_key("acme", DEAD + i) for i in range(NEWER)]
    await _fill(node.cache, newer)
    garbage = KeyDigest(b"\x01" * 32)
    await node.warm.put_many([WarmItem(garbage, b"not an entry", 60_000)])

    removed = await node.reclaimer.run_pass()

    assert removed == DEAD
    assert node.cache.stats.reclaimed == DEAD
    survivors = {k.digest for k in alive + newer} | {garbage}
    assert await _all_digests(node.warm) == survivors
    assert await node.reclaimer.run_pass() == 0
    assert node.cache.stats.reclaimed == DEAD
    for k in alive + newer:
        assert (await node.cache.lookup(LookupQuery(k))).outcome is Outcome.HIT
    for k in dead:
        assert (await node.cache.lookup(LookupQuery(k))).outcome is Outcome.MISS


async def test_reclaim_hot_drops_only_dead_entries(node: Node) -> None:
    """reclaim_hot removes exactly the hot entries a rule killed from this sidecar's memory."""
    dead = [_key("acme", i) for i in range(DEAD)]
    alive = [_key("beta", i) for i in range(ALIVE)]
    await _fill(node.cache, dead + alive)
    assert len(node.cache.hot) == DEAD + ALIVE
    await node.invalidator.invalidate(Selector(tenant="acme"), "purge", "test")

    assert node.reclaimer.reclaim_hot() == DEAD

    held = {d for d, _ in node.cache.hot.entries()}
    assert held == {k.digest for k in alive}
    assert node.reclaimer.reclaim_hot() == 0


async def test_reclaim_all(node: Node) -> None:
    """Invalidating `all` makes every entry stored before it reclaimable."""
    keys = [_key("acme", i) for i in range(5)] + [_key("beta", i) for i in range(5)]
    await _fill(node.cache, keys)
    await node.invalidator.invalidate(Selector(all=True), "flush", "test")
    assert await node.reclaimer.run_pass() == len(keys)
    assert await _all_digests(node.warm) == set()

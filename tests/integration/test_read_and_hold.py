"""HoldingStore: a lookup's read and single-flight hold in one step, a store's write and
release in one, on one Redis (warm_scripts.py) and the embedded pair; and what that
saves a sidecar on Redis (one round trip per MISS, one per store)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis
from infercache.v1 import cache_pb2 as pb

from sidecar.backends.embedded_holding import EmbeddedHolding
from sidecar.backends.redis.client import RedisKeys
from sidecar.backends.redis.warm import RedisWarmTier
from sidecar.invalidation.embedded_store import EmbeddedControlStore
from sidecar.invalidation.rules import Selector
from sidecar.keys import KeyDigest
from sidecar.tiers.base import HoldAsk, HoldingStore, WarmItem, WarmTier
from sidecar.tiers.embedded import EmbeddedWarmTier
from tests.support.cluster import RedisClusterProcesses
from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import sidecar

LONG_MS = 60_000


def digest(n: int) -> KeyDigest:
    return KeyDigest(n.to_bytes(32, "big"))


@dataclass
class Pair:
    """A HoldingStore, its warm tier, who holds a digest now, and a way to bump the epoch."""

    holding: HoldingStore
    warm: WarmTier
    holder: Callable[[KeyDigest], Awaitable[bytes | None]]
    bump_epoch: Callable[[], Awaitable[None]]


@pytest.fixture(params=["embedded", pytest.param("redis", marks=pytest.mark.redis)])
async def pair(request: pytest.FixtureRequest) -> AsyncIterator[Pair]:
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        tier = RedisWarmTier(server.url, read_timeout_s=5.0, write_timeout_s=5.0)
        admin = aioredis.Redis.from_url(server.url)
        keys = RedisKeys()
        assert tier.holding is not None

        async def holder(d: KeyDigest) -> bytes | None:
            value = await admin.get(keys.holder(d))
            assert value is None or isinstance(value, bytes)
            return value

        async def bump() -> None:
            await admin.incr(keys.meta("epoch"))

        yield Pair(tier.holding, tier, holder, bump)
        await admin.aclose()
        await tier.close()
        return
    control = EmbeddedControlStore()
    warm = EmbeddedWarmTier(10**7, 10**4, epoch_source=control.epoch_now)

    async def embedded_holder(d: KeyDigest) -> bytes | None:
        held = control._holders.get(d)  # the store's own table: no other way to name the holder
        return held[0] if held else None

    async def embedded_bump() -> None:
        await control.commit_invalidation(Selector(tenant="acme"), "test", "tests", 0)

    yield Pair(EmbeddedHolding(warm, control), warm, embedded_holder, embedded_bump)


@dataclass
class OnRedis:
    """One Redis: the warm tier, its HoldingStore and an admin client."""

    tier: RedisWarmTier
    holding: HoldingStore
    admin: aioredis.Redis


@pytest.fixture
async def on_redis(redis_server: RedisServer) -> AsyncIterator[OnRedis]:
    tier = RedisWarmTier(redis_server.url, read_timeout_s=5.0, write_timeout_s=5.0)
    admin = aioredis.Redis.from_url(redis_server.url)
    assert tier.holding is not None
    yield OnRedis(tier, tier.holding, admin)
    await admin.config_set("maxmemory", "0")
    await admin.aclose()
    await tier.close()


async def test_absent_values_are_held_and_present_ones_are_not(pair: Pair) -> None:
    """A value that is there is returned and nothing is held; an absent one is held by
    the ask's lease, for the ask's ttl."""
    await pair.warm.put_many([WarmItem(digest(1), b"one", LONG_MS)])
    read = await pair.holding.get_or_hold(
        [HoldAsk(digest(1), b"lease-1", LONG_MS), HoldAsk(digest(2), b"lease-2", LONG_MS)]
    )
    assert read.values == [b"one", None]
    assert read.held == [False, True]
    assert await pair.holder(digest(1)) is None
    assert await pair.holder(digest(2)) == b"lease-2"


async def test_a_held_key_is_not_taken_again(pair: Pair) -> None:
    """A second ask for a held key (the same call or a later one) does not get the hold;
    the first holder keeps it."""
    read = await pair.holding.get_or_hold(
        [HoldAsk(digest(3), b"first", LONG_MS), HoldAsk(digest(3), b"second", LONG_MS)]
    )
    assert (read.values, read.held) == ([None, None], [True, False])
    later = await pair.holding.get_or_hold([HoldAsk(digest(3), b"third", LONG_MS)])
    assert later.held == [False]
    assert await pair.holder(digest(3)) == b"first"


async def test_the_epoch_comes_with_the_read(pair: Pair) -> None:
    """The store's invalidation epoch is read at the same instant as the values."""
    before = (await pair.holding.get_or_hold([HoldAsk(digest(4), b"a", LONG_MS)])).epoch
    await pair.bump_epoch()
    after = (await pair.holding.get_or_hold([HoldAsk(digest(5), b"b", LONG_MS)])).epoch
    assert after == before + 1


async def test_put_and_release_gives_back_only_its_own_hold(pair: Pair) -> None:
    """The write lands either way; the hold goes only with the lease that has it."""
    await pair.holding.get_or_hold([HoldAsk(digest(6), b"holder", LONG_MS)])
    await pair.holding.put_and_release(WarmItem(digest(6), b"v1", LONG_MS), b"not-the-holder")
    assert await pair.warm.get_many([digest(6)]) == [b"v1"]
    assert await pair.holder(digest(6)) == b"holder"
    await pair.holding.put_and_release(WarmItem(digest(6), b"v2", LONG_MS), b"holder")
    assert await pair.warm.get_many([digest(6)]) == [b"v2"]
    assert await pair.holder(digest(6)) is None


@pytest.mark.redis
async def test_redis_holds_expire_with_the_lease_ttl(on_redis: OnRedis) -> None:
    """The holder key carries the ask's ttl (a holder that vanishes stops blocking), and
    an entry written with its release carries the item's."""
    await on_redis.holding.get_or_hold([HoldAsk(digest(7), b"lease", 4_000)])
    assert 3_000 < await on_redis.admin.pttl(RedisKeys().holder(digest(7))) <= 4_000
    await on_redis.holding.put_and_release(WarmItem(digest(7), b"v", 9_000), b"lease")
    assert 8_000 < await on_redis.admin.pttl(RedisKeys().entry(digest(7))) <= 9_000


@pytest.mark.redis
async def test_redis_scripts_survive_a_script_flush(on_redis: OnRedis) -> None:
    """A Redis that forgot the scripts (restart, SCRIPT FLUSH) gets them again."""
    await on_redis.holding.get_or_hold([HoldAsk(digest(8), b"a", LONG_MS)])
    await on_redis.holding.put_and_release(WarmItem(digest(8), b"v", LONG_MS), b"a")
    await on_redis.admin.script_flush()
    read = await on_redis.holding.get_or_hold([HoldAsk(digest(9), b"b", LONG_MS)])
    assert read.held == [True]
    await on_redis.holding.put_and_release(WarmItem(digest(9), b"w", LONG_MS), b"b")
    assert await on_redis.tier.get_many([digest(9)]) == [b"w"]


@pytest.mark.redis
async def test_a_refused_write_is_a_hold_not_taken(on_redis: OnRedis) -> None:
    """At maxmemory (noeviction) Redis refuses the hold's SET: the values still come back
    and the hold is reported not taken, as a separate SET NX failing after an MGET was."""
    await on_redis.tier.put_many([WarmItem(digest(10), b"kept", LONG_MS)])
    await on_redis.admin.config_set("maxmemory-policy", "noeviction")
    await on_redis.admin.config_set("maxmemory", "1")
    read = await on_redis.holding.get_or_hold(
        [HoldAsk(digest(10), b"a", LONG_MS), HoldAsk(digest(11), b"b", LONG_MS)]
    )
    assert (read.values, read.held) == ([b"kept", None], [False, False])


@pytest.mark.redis
async def test_concurrent_reads_and_holds_share_one_script(on_redis: OnRedis) -> None:
    """Calls made together: the first finds nothing in flight and goes alone, the two
    behind it share one EVALSHA; each gets its own values."""
    holding = on_redis.holding
    await on_redis.tier.put_many([WarmItem(digest(12), b"twelve", LONG_MS)])
    await holding.get_or_hold([HoldAsk(digest(99), b"warm-up", LONG_MS)])
    before = await _evalsha_calls(on_redis.admin)
    reads = await asyncio.gather(
        holding.get_or_hold([HoldAsk(digest(12), b"a", LONG_MS)]),
        holding.get_or_hold([HoldAsk(digest(13), b"b", LONG_MS)]),
        holding.get_or_hold([HoldAsk(digest(13), b"c", LONG_MS)]),
    )
    assert await _evalsha_calls(on_redis.admin) - before == 2
    assert [(r.values, r.held) for r in reads] == [
        ([b"twelve"], [False]),
        ([None], [True]),
        ([None], [False]),
    ]


@pytest.mark.redis
async def test_concurrent_writes_and_releases_share_one_script(on_redis: OnRedis) -> None:
    """Stores made together: the first alone, the two behind it one EVALSHA; each entry
    lands, each hold goes."""
    holding = on_redis.holding
    await holding.put_and_release(WarmItem(digest(98), b"warm-up", LONG_MS), b"-")
    asks = [HoldAsk(digest(20 + i), b"lease-%d" % i, LONG_MS) for i in range(3)]
    assert (await holding.get_or_hold(asks)).held == [True] * 3
    before = await _evalsha_calls(on_redis.admin)
    await asyncio.gather(
        *(
            holding.put_and_release(WarmItem(digest(20 + i), b"v%d" % i, LONG_MS), a.lease_id)
            for i, a in enumerate(asks)
        )
    )
    assert await _evalsha_calls(on_redis.admin) - before == 2
    assert await on_redis.tier.get_many([digest(20 + i) for i in range(3)]) == [b"v0", b"v1", b"v2"]
    assert [await on_redis.admin.exists(RedisKeys().holder(digest(20 + i))) for i in range(3)] == [
        0
    ] * 3


@pytest.mark.redis
async def test_a_cluster_keeps_the_separate_calls(redis_cluster: RedisClusterProcesses) -> None:
    """On a cluster an entry and its holder key live in different slots: no HoldingStore."""
    tier = RedisWarmTier(redis_cluster.url, read_timeout_s=5.0, write_timeout_s=5.0)
    try:
        assert tier.holding is None
    finally:
        await tier.close()


async def _evalsha_calls(admin: aioredis.Redis) -> int:
    stats = await admin.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


@pytest.mark.redis
async def test_a_sidecar_miss_and_its_store_cost_one_round_trip_each(
    redis_server: RedisServer,
) -> None:
    """Through the gRPC API on one Redis: a waiting lookup's MISS sends one command naming
    its key (the read-and-hold script), the store one (write-and-release), where the
    separate calls sent five (MGET, SET NX, MGET again, SET, release).

    The hold's TTL is long here: its keeper renews it every quarter TTL (one more
    EVALSHA naming the key), which on a slow machine fell between the miss and the
    store at the default 800 ms; renewals are test_hold_liveness's subject."""
    admin = aioredis.Redis.from_url(redis_server.url)
    try:
        await _one_round_trip_each(admin, redis_server)
    finally:
        # Closed on every path: a connection left open warns when collected, in
        # whichever test then runs on this worker.
        await admin.aclose()


async def _one_round_trip_each(admin: aioredis.Redis, redis_server: RedisServer) -> None:
    async with sidecar(
        redis_server.url, lookup_timeout_ms=2000, write_timeout_ms=2000, lease_hold_ttl_ms=60_000
    ) as sc:
        await sc.store(key("warm-up: scripts loaded, connections open"), b"x")
        k = key("counted")
        seen: list[str] = []
        async with admin.monitor() as monitor:
            watching = asyncio.create_task(_collect(monitor, seen))
            await asyncio.sleep(0.1)
            miss = await sc.client.lookup(k, wait_ms=1000)
            assert (miss.outcome, miss.lease_holder) == (pb.LOOKUP_OUTCOME_MISS, True)
            stored = await sc.client.store(k, b"answer", lease=miss.lease)
            assert stored.outcome == pb.STORE_OUTCOME_STORED
            await admin.ping()  # a marker: everything before it has been monitored
            await asyncio.sleep(0.3)
            watching.cancel()
        hexed = miss.key_digest.hex()
        naming = [c for c in seen if hexed in c]
        assert [c.split()[0].upper() for c in naming] == ["EVALSHA", "EVALSHA"], naming


async def _collect(monitor: object, seen: list[str]) -> None:
    """Commands sent by clients (not those a script ran) as MONITOR reports them."""
    while True:
        entry = await monitor.next_command()  # type: ignore[attr-defined]
        if entry.get("client_type") != "lua":
            seen.append(entry["command"])

"""The WarmTier contract, run against every implementation: real Redis and the embedded tier."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from sidecar.backends.redis.warm import RedisWarmTier
from sidecar.errors import TierUnavailable
from sidecar.keys import KeyDigest
from sidecar.tiers.base import WarmItem, WarmTier
from sidecar.tiers.embedded import EmbeddedWarmTier
from tests.support.cluster import RedisClusterProcesses
from tests.support.processes import RedisServer, free_port

LONG_MS = 60_000


def digest(n: int) -> KeyDigest:
    return KeyDigest(n.to_bytes(32, "big"))


@pytest.fixture(
    params=[
        "embedded",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("cluster", marks=pytest.mark.redis),
    ]
)
async def warm(request: pytest.FixtureRequest) -> AsyncIterator[WarmTier]:
    """Each WarmTier implementation, empty: embedded, one Redis, a Redis Cluster."""
    tier: WarmTier
    if request.param in ("redis", "cluster"):
        fixture = "redis_server" if request.param == "redis" else "redis_cluster"
        server: RedisServer | RedisClusterProcesses = request.getfixturevalue(fixture)
        # Generous deadlines: this suite checks behaviour, test_redis_failure checks deadlines.
        tier = RedisWarmTier(server.url, read_timeout_s=5.0, write_timeout_s=5.0)
    else:
        tier = EmbeddedWarmTier(max_bytes=256 * 1024**2, max_entries=10_000)
    yield tier
    await tier.close()


async def test_get_many_keeps_request_order_with_none_for_absent(warm: WarmTier) -> None:
    """get_many answers in request order, None where nothing is stored, duplicates included."""
    await warm.put_many([WarmItem(digest(1), b"one", LONG_MS), WarmItem(digest(3), b"3", LONG_MS)])
    got = await warm.get_many([digest(3), digest(2), digest(1), digest(3)])
    assert got == [b"3", None, b"one", b"3"]


async def test_get_many_with_epoch_returns_the_same_values(warm: WarmTier) -> None:
    """get_many_with_epoch gives get_many's values plus a non-negative epoch."""
    await warm.put_many([WarmItem(digest(1), b"one", LONG_MS)])
    values, epoch = await warm.get_many_with_epoch([digest(2), digest(1)])
    assert values == [None, b"one"]
    assert epoch >= 0


async def test_put_overwrites(warm: WarmTier) -> None:
    """A second put of a digest replaces its value."""
    await warm.put_many([WarmItem(digest(1), b"old", LONG_MS)])
    await warm.put_many([WarmItem(digest(1), b"new", LONG_MS)])
    assert await warm.get_many([digest(1)]) == [b"new"]


async def test_each_item_expires_after_its_own_ttl(warm: WarmTier) -> None:
    """A short-TTL item disappears (bounded polling) while a long-TTL one stays."""
    started = time.monotonic()
    await warm.put_many([WarmItem(digest(1), b"short", 400), WarmItem(digest(2), b"long", LONG_MS)])
    first = await warm.get_many([digest(1)])
    if time.monotonic() - started < 0.3:  # only meaningful while surely inside the TTL
        assert first == [b"short"]
    deadline = time.monotonic() + 5
    while (await warm.get_many([digest(1)]))[0] is not None:
        assert time.monotonic() < deadline, "short-TTL item never expired"
        await asyncio.sleep(0.05)
    assert time.monotonic() - started >= 0.39
    assert await warm.get_many([digest(2)]) == [b"long"]


async def test_delete_many_removes_only_what_it_names(warm: WarmTier) -> None:
    """delete_many removes the named values, ignores absent ones, keeps the rest."""
    await warm.put_many([WarmItem(digest(i), bytes([i]), LONG_MS) for i in range(1, 5)])
    await warm.delete_many([digest(1), digest(3), digest(99)])
    assert await warm.get_many([digest(i) for i in range(1, 5)]) == [None, b"\x02", None, b"\x04"]


async def test_large_values_round_trip(warm: WarmTier) -> None:
    """Multi-MiB binary values come back byte for byte."""
    big = os.urandom(4 * 1024 * 1024 + 17)
    other = os.urandom(1024 * 1024)
    await warm.put_many([WarmItem(digest(1), big, LONG_MS), WarmItem(digest(2), other, LONG_MS)])
    assert await warm.get_many([digest(2), digest(1)]) == [other, big]


async def test_binary_values_are_not_altered(warm: WarmTier) -> None:
    """Every byte value, NULs and newlines included, survives; an empty value is not absence."""
    value = bytes(range(256)) * 4
    await warm.put_many([WarmItem(digest(1), value, LONG_MS), WarmItem(digest(2), b"", LONG_MS)])
    assert await warm.get_many([digest(1), digest(2)]) == [value, b""]


async def test_empty_batches_are_no_ops(warm: WarmTier) -> None:
    """Empty get/put/delete batches succeed and change nothing."""
    await warm.put_many([WarmItem(digest(1), b"kept", LONG_MS)])
    assert await warm.get_many([]) == []
    values, _ = await warm.get_many_with_epoch([])
    assert values == []
    await warm.put_many([])
    await warm.delete_many([])
    assert await warm.get_many([digest(1)]) == [b"kept"]


async def test_usage_is_what_is_held_or_unknown(warm: WarmTier) -> None:
    """usage() is None (only a round trip could tell) or the bytes and entries held now."""
    await warm.put_many([WarmItem(digest(i), b"x" * 50, LONG_MS) for i in range(4)])
    usage = warm.usage()
    if isinstance(warm, RedisWarmTier):
        assert usage is None
    else:
        assert usage is not None
        held, entries = usage
        assert entries == 4
        assert held >= 4 * 50


async def test_ping_answers(warm: WarmTier) -> None:
    """A healthy tier answers ping."""
    await warm.ping()


async def test_scan_visits_every_entry_once(warm: WarmTier) -> None:
    """A full scan_page pass sees every stored digest with the start of its value."""
    values = {digest(i): f"value-{i}".encode() * 3 for i in range(1, 40)}
    await warm.put_many([WarmItem(d, v, LONG_MS) for d, v in values.items()])
    seen: dict[KeyDigest, bytes] = {}
    cursor = 0
    for _ in range(1000):
        cursor, page = await warm.scan_page(cursor, 7)
        for d, head in page:
            seen[d] = head
        if cursor == 0:
            break
    assert set(seen) == set(values)
    assert all(values[d].startswith(head) and head for d, head in seen.items())
    assert await warm.approx_entries() >= len(values)


@pytest.mark.redis
async def test_redis_key_prefixes_isolate_deployments(
    shared_redis: RedisServer | RedisClusterProcesses,
) -> None:
    """Two Redis tiers with different prefixes on one Redis (or one cluster) never see
    each other's values."""
    blue = RedisWarmTier(shared_redis.url, key_prefix="blue:", read_timeout_s=5.0)
    green = RedisWarmTier(shared_redis.url, key_prefix="green:", read_timeout_s=5.0)
    try:
        await blue.put_many([WarmItem(digest(1), b"blue", LONG_MS)])
        assert await green.get_many([digest(1)]) == [None]
        await green.delete_many([digest(1)])
        assert await blue.get_many([digest(1)]) == [b"blue"]
    finally:
        await blue.close()
        await green.close()


@pytest.mark.redis
async def test_unreachable_redis_raises_only_tier_unavailable() -> None:
    """Against a port nobody listens on, every call raises TierUnavailable, nothing else."""
    tier = RedisWarmTier(f"redis://127.0.0.1:{free_port()}/0", read_timeout_s=0.2)
    try:
        calls = [
            lambda: tier.get_many([digest(1)]),
            lambda: tier.get_many_with_epoch([digest(1)]),
            lambda: tier.put_many([WarmItem(digest(1), b"x", LONG_MS)]),
            lambda: tier.delete_many([digest(1)]),
            tier.ping,
        ]
        for call in calls:
            with pytest.raises(TierUnavailable):
                await call()
    finally:
        await tier.close()


@pytest.mark.redis
async def test_redis_concurrent_epoch_reads_share_one_mget(redis_server: RedisServer) -> None:
    """Concurrent get_many_with_epoch calls: the first reads alone (nothing in flight), the
    two behind it share one round trip; each gets its own values."""
    tier = RedisWarmTier(redis_server.url, key_prefix="co:", read_timeout_s=5.0)
    try:
        await tier.put_many([WarmItem(digest(i), bytes([i]) * 3, LONG_MS) for i in range(1, 6)])
        await tier.get_many_with_epoch([])  # connect first
        before = tier._reads.fetches
        got = await asyncio.gather(
            tier.get_many_with_epoch([digest(1), digest(9)]),
            tier.get_many_with_epoch([]),
            tier.get_many_with_epoch([digest(5), digest(3), digest(5)]),
        )
        assert [values for values, _ in got] == [
            [b"\x01" * 3, None],
            [],
            [b"\x05" * 3, b"\x03" * 3, b"\x05" * 3],
        ]
        assert len({epoch for _, epoch in got}) == 1
        assert tier._reads.fetches == before + 2
    finally:
        await tier.close()


@pytest.mark.redis
async def test_redis_read_survives_a_closed_read_connection(redis_server: RedisServer) -> None:
    """Redis dropping the idle read connection costs no failed read (one reconnect)."""
    tier = RedisWarmTier(redis_server.url, key_prefix="kill:", read_timeout_s=5.0)
    other = aioredis.Redis.from_url(redis_server.url)
    try:
        await tier.put_many([WarmItem(digest(1), b"one", LONG_MS)])
        assert (await tier.get_many_with_epoch([digest(1)]))[0] == [b"one"]
        killed = await other.execute_command(  # type: ignore[no-untyped-call]
            "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"
        )
        assert killed >= 1
        assert (await tier.get_many_with_epoch([digest(1)]))[0] == [b"one"]
        assert tier.failures == 0
    finally:
        await other.aclose()
        await tier.close()


@pytest.mark.redis
async def test_redis_late_reply_after_a_timeout_is_never_taken_for_the_next_read(
    redis_server: RedisServer,
) -> None:
    """A read timed out while Redis was busy: the next read gets its own values, not late ones."""
    tier = RedisWarmTier(redis_server.url, key_prefix="late:", read_timeout_s=0.05)
    other = aioredis.Redis.from_url(redis_server.url)
    busy = "local t0 = redis.call('TIME') repeat local t = redis.call('TIME') until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > 300000 return 1"  # noqa: E501
    try:
        await tier.put_many(
            [WarmItem(digest(1), b"one", LONG_MS), WarmItem(digest(2), b"two", LONG_MS)]
        )
        assert (await tier.get_many_with_epoch([digest(1)]))[0] == [b"one"]

        async def hold_redis() -> object:
            return await other.eval(busy, 0)

        script = asyncio.create_task(hold_redis())
        await asyncio.sleep(0.05)  # the script now holds Redis for ~0.3 s
        with pytest.raises(TierUnavailable):
            await tier.get_many_with_epoch([digest(1)])
        assert await script == 1
        await asyncio.sleep(0.1)  # past the circuit's first pause (50 ms)
        # On a loaded machine the reconnect after the dropped connection can itself take
        # longer than the 50 ms deadline: a read may time out again (a MISS, never wrong),
        # but the first read that answers must carry its own value, never the late "one".
        answered: list[bytes | None] | None = None
        for _ in range(40):
            try:
                answered = (await tier.get_many_with_epoch([digest(2)]))[0]
                break
            except TierUnavailable:
                await asyncio.sleep(0.1)  # past the circuit's pause again
        assert answered == [b"two"]
    finally:
        await other.aclose()
        await tier.close()

"""Faults don't cascade: a slow read does not fail the next Store, and a Redis outage
is logged once per distinct failure per interval (with a count), not once per call."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from infercache.v1 import cache_pb2 as pb
from infercache_client import AsyncCacheClient

from sidecar.backends.redis.control import RedisControlStore
from sidecar.backends.redis.warm import RedisWarmTier
from sidecar.keys import KeyDigest
from sidecar.tiers.base import WarmItem
from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import SidecarProcess

pytestmark = [pytest.mark.redis, pytest.mark.timeout(90)]


async def test_a_timed_out_read_does_not_fail_the_next_write(
    redis_server: RedisServer,
) -> None:
    """A read slower than its deadline trips the read circuit only: a write right after it
    is tried (and lands), where it used to fail at once with 'recently failed; pausing'."""
    tier = RedisWarmTier(redis_server.url, read_timeout_s=0.05, write_timeout_s=5.0)
    admin = aioredis.Redis.from_url(redis_server.url)
    digest = KeyDigest(bytes(32))
    try:
        await tier.get_many_with_epoch([digest])  # connected
        # A blocking script holds Redis for 300 ms: the read overruns its 50 ms deadline.
        slow: asyncio.Future[Any] = asyncio.ensure_future(
            admin.eval(
                "local t = redis.call('TIME') local s = t[1] * 1e6 + t[2] "
                "while true do local n = redis.call('TIME') "
                "if n[1] * 1e6 + n[2] - s > 300000 then return 1 end end",
                0,
            )
        )
        await asyncio.sleep(0.05)
        with pytest.raises(Exception, match="no answer within 50 ms"):
            await tier.get_many_with_epoch([digest])
        await asyncio.sleep(0.02)  # the read's own call overruns too: its circuit opens
        await tier.put_many([WarmItem(digest, b"value", 60_000)])
        await slow
        assert await admin.exists(tier.redis_key(digest))
    finally:
        await tier.close()
        await admin.aclose()


async def test_a_timed_out_hold_does_not_fail_the_next_release(
    redis_server: RedisServer,
) -> None:
    """A holder SET NX slower than the lookup deadline trips the take circuit only: the
    release right after it (a Store's, on the write deadline) is tried and drops the hold."""
    control = RedisControlStore(redis_server.url, timeout_s=5.0, lookup_timeout_s=0.05)
    admin = aioredis.Redis.from_url(redis_server.url)
    mine, other = KeyDigest(bytes(32)), KeyDigest(b"\x01" * 32)
    try:
        assert await control.acquire_holder(mine, b"lease-1", 60_000)
        # Writes block for 300 ms: the next take overruns its 50 ms deadline.
        await admin.client_pause(300, all=False)
        with pytest.raises(Exception, match="no answer within 50 ms"):
            await control.acquire_holder(other, b"lease-2", 60_000)
        await control.release_holder(mine, b"lease-1")
        assert not await admin.exists(control.keys.holder(mine))
    finally:
        await admin.client_unpause()
        await control.close()
        await admin.aclose()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, to be killed."""
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_redis_down_logs_each_failure_once_per_interval(own_redis: RedisServer) -> None:
    """With Redis gone, 8 s of Lookups and Stores, one after another, log each distinct
    warning at most a few times (the first, then one per interval carrying how many it
    stands for), not one line per call (before: hundreds of lines). No pause between
    calls: with a 10 ms one a slow CI machine made only 155 calls in the 8 s, fewer than
    the 200 that show the lines do not follow the calls."""
    proc = SidecarProcess(
        own_redis.url,
        log_format="json",
        log_repeat_interval_s=2,
        lookup_timeout_ms=50,
        write_timeout_ms=200,
    )
    try:
        proc.wait_ready()
        client = AsyncCacheClient(proc.target)
        try:
            own_redis.kill()
            end = time.monotonic() + 8
            i = 0
            while time.monotonic() < end:
                k = key(f"prompt {i}")
                miss = await client.lookup(k, timeout=5)
                assert miss.outcome == pb.LOOKUP_OUTCOME_MISS
                assert miss.degraded
                await client.store(k, b"v", lease=miss.lease, timeout=5)
                i += 1
        finally:
            await client.close()
        lines = [json.loads(x) for x in proc.stderr().splitlines() if x.startswith("{")]
    finally:
        proc.stop()
    warnings = [x for x in lines if x.get("level") in ("warning", "error")]
    per_event = Counter(x["event"] for x in warnings)
    assert i > 200, f"only {i} requests were made"
    assert warnings, "a Redis outage must be logged"
    # Each distinct failure: its first line, then at most one per 2 s interval (8 s here,
    # so 5), for a few distinct messages per event (refused, timed out, pausing).
    assert max(per_event.values()) <= 20, per_event
    assert len(warnings) <= 80, per_event
    counted = [x for x in warnings if x.get("count", 1) > 1]
    assert counted, "a line after the interval says how many it stands for"
    assert sum(x.get("count", 1) for x in warnings if x["event"] == "warm_read_failed") > 100

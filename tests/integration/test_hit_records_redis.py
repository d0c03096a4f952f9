"""The Redis hit store against a real redis-server: ranking, trimming, expiry."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import cast

import pytest
import redis.asyncio as aioredis

from sidecar.backends.redis.hits import RedisHitStore
from sidecar.keys import KeyDigest
from tests.support.processes import RedisServer

pytestmark = pytest.mark.redis


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    """A client of the test's (flushed) Redis."""
    c = aioredis.Redis.from_url(redis_server.url)
    yield c
    await c.aclose()


def digest(i: int) -> KeyDigest:
    return KeyDigest(bytes([i]) * 32)


async def test_ranks_by_sampled_hits_and_keeps_requests(client: aioredis.Redis) -> None:
    """top() is most hit first with each request; versions are separate."""
    store = RedisHitStore(client, key_prefix="t:", max_per_version=10, ttl_ms=60_000, timeout_s=2)
    for i, hits in ((1, 2), (2, 5), (3, 1)):
        for _ in range(hits):
            await store.record("fp1-v1", digest(i), b"req%d" % i)
    await store.record("fp1-other", digest(9), b"other")
    top = await store.top("fp1-v1", 2)
    assert [(t.digest, t.hits, t.request) for t in top] == [
        (digest(2), 5, b"req2"),
        (digest(1), 2, b"req1"),
    ]
    assert [t.request for t in await store.top("fp1-other", 5)] == [b"other"]
    assert await store.top("fp1-none", 5) == []


async def test_trims_over_budget_and_everything_expires(client: aioredis.Redis) -> None:
    """Past 1.25 x the budget the ranking keeps its top and deletes the dropped requests;
    ranking and requests carry the TTL."""
    store = RedisHitStore(client, key_prefix="t:", max_per_version=4, ttl_ms=60_000, timeout_s=2)
    for i in range(6):
        for _ in range(10 - i):
            await store.record("v", digest(i), b"r%d" % i)
    keys = sorted(k.decode() for k in cast(list[bytes], await client.keys("t:*")))
    ranked = await store.top("v", 10)
    assert len(ranked) <= 5
    assert [t.digest for t in ranked][:4] == [digest(0), digest(1), digest(2), digest(3)]
    # One ranking plus one request key per ranked request, nothing left behind.
    assert len(keys) == 1 + len(ranked)
    for k in keys:
        assert "{hits:" in k
        assert 0 < await client.pttl(k) <= 60_000

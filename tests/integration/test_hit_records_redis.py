"""The Redis hit store against a real redis-server and a real Redis Cluster: ranking,
trimming, expiry."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from sidecar.backends.redis.backend import RedisBackend, connect
from sidecar.backends.redis.hits import RedisHitStore
from sidecar.keys import KeyDigest
from tests.support.cluster import RedisClusterProcesses
from tests.support.processes import RedisServer

pytestmark = pytest.mark.redis


@pytest.fixture
async def client(
    shared_redis: RedisServer | RedisClusterProcesses,
) -> AsyncIterator[RedisBackend]:
    """A client of the test's (flushed) Redis or Redis Cluster."""
    c = connect(shared_redis.url, connect_timeout_s=2, socket_timeout_s=2)
    yield c
    await c.aclose()


async def all_keys(client: RedisBackend, pattern: str) -> list[str]:
    """Every key matching `pattern` (on every primary of a cluster)."""
    found: list[str] = []
    cursor = 0
    while True:
        cursor, page = await client.scan(cursor, pattern, 100)
        found += [k.decode() for k in page]
        if cursor == 0:
            return sorted(set(found))


def digest(i: int) -> KeyDigest:
    return KeyDigest(bytes([i]) * 32)


async def test_ranks_by_merged_hits_and_keeps_requests(client: RedisBackend) -> None:
    """top() is most hit first with each attached record; a ranked digest whose Store
    attached nothing has none; versions are separate."""
    store = RedisHitStore(client, key_prefix="t:", max_per_version=10, ttl_ms=60_000, timeout_s=2)
    for i in (1, 2):
        await store.attach("fp1-v1", digest(i), b"req%d" % i, 30_000)
    await store.merge("fp1-v1", [(digest(1), 1), (digest(2), 5), (digest(3), 1)])
    await store.merge("fp1-v1", [(digest(1), 1)])  # merges add up
    await store.attach("fp1-other", digest(9), b"other", 30_000)
    await store.merge("fp1-other", [(digest(9), 1)])
    top = await store.top("fp1-v1", 3)
    assert [(t.digest, t.hits, t.request) for t in top] == [
        (digest(2), 5, b"req2"),
        (digest(1), 2, b"req1"),
        (digest(3), 1, None),
    ]
    assert [t.request for t in await store.top("fp1-other", 5)] == [b"other"]
    assert await store.top("fp1-none", 5) == []


async def test_trims_over_budget_and_everything_expires(client: RedisBackend) -> None:
    """Past 1.25 x the budget the ranking keeps its top (a cut digest's record stays until
    it expires: only a Store can attach it again); a record lives as long as its stored
    result until a merged hit extends it to the record TTL."""
    store = RedisHitStore(client, key_prefix="t:", max_per_version=4, ttl_ms=60_000, timeout_s=2)
    for i in range(6):
        await store.attach("v", digest(i), b"r%d" % i, 5_000)
    await store.merge("v", [(digest(i), 10 - i) for i in range(6)])
    ranked = await store.top("v", 10)
    assert len(ranked) <= 5
    assert [t.digest for t in ranked][:4] == [digest(0), digest(1), digest(2), digest(3)]
    keys = await all_keys(client, "t:*")
    assert len(keys) == 1 + 6  # the ranking and every record
    for k in keys:
        assert "{hits:" in k
        assert 5_000 < await client.redis.pttl(k) <= 60_000  # each record was hit: extended
    await store.attach("v", digest(7), b"r7", 5_000)
    listed = await all_keys(client, "t:*")
    never_hit = [k for k in listed if k.endswith(digest(7).hex())]
    assert 0 < await client.redis.pttl(never_hit[0]) <= 5_000


async def test_record_reads_one_record_through_its_tag(client: RedisBackend) -> None:
    """record() returns the attached record of a digest under its version; another
    version, a digest without one, and a record altered in Redis (its tag no longer
    verifies) read as absent, the last counted as rejected."""
    store = RedisHitStore(client, key_prefix="t:", max_per_version=10, ttl_ms=60_000, timeout_s=2)
    await store.attach("fp1-v1", digest(1), b"req1", 30_000)
    assert await store.record("fp1-v1", digest(1)) == b"req1"
    assert await store.record("fp1-v2", digest(1)) is None
    assert await store.record("fp1-v1", digest(2)) is None
    (name,) = await all_keys(client, "t:*:q:*")
    stored = await client.redis.get(name)
    assert isinstance(stored, bytes)
    await client.redis.set(name, stored[:-4] + b"evil")
    assert await store.record("fp1-v1", digest(1)) is None
    assert store.rejected_records == 1

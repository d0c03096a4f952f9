"""Keys in the entry namespace that no sidecar wrote never break invalidation or reclaim,
and entries whose key material outgrows the first scan read are still seen by both."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from infercache.v1 import cache_pb2 as pb
from infercache_client import make_key

from sidecar.backends.redis.warm import PEEK_BYTES, RedisWarmTier
from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import Sidecar, sidecar

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

PREFIX = "ic:v2:"


async def _entry_keys(r: aioredis.Redis) -> set[bytes]:
    return {k async for k in r.scan_iter(match=f"{PREFIX}r:*")}


async def _wait_gone(r: aioredis.Redis, keys: set[bytes], timeout_s: float = 20.0) -> None:
    """Until none of `keys` exists (reclaim runs in the background)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while await r.exists(*keys):
        assert asyncio.get_running_loop().time() < deadline, "reclaim never removed them"
        await asyncio.sleep(0.1)


def _warm(sc: Sidecar) -> RedisWarmTier:
    warm = sc.running.stores.warm
    assert isinstance(warm, RedisWarmTier)
    return warm


async def test_foreign_keys_in_the_namespace_are_skipped_and_counted(
    redis_server: RedisServer,
) -> None:
    """`SET ic:v2:r:debug-test 1` (and a hash under a digest-shaped name) made every
    Invalidate fail with UNKNOWN and killed the reclaimer; now Invalidate is OK, the
    foreign keys are counted and left alone, and reclaim still removes dead entries."""
    r = aioredis.Redis.from_url(redis_server.url)
    async with sidecar(redis_server.url) as sc:
        doomed = [key(f"q{i}", tenant="doomed") for i in range(5)]
        for k in doomed:
            await sc.fill(k, b"old answer")
        dead = await _entry_keys(r)
        kept = key("q", tenant="kept")
        await sc.fill(kept, b"kept answer")
        await r.set(f"{PREFIX}r:debug-test", "1")
        await r.hset(f"{PREFIX}r:{'ab' * 32}", "field", "value")
        await r.set(f"{PREFIX}r:{'zz' * 32}", "not an entry")

        first = await sc.invalidate(tenant="doomed", reason="foreign keys present")
        second = await sc.invalidate(tenant="doomed", reason="and again")

        assert second.record.epoch == first.record.epoch + 1
        assert first.record.estimated_entries >= 1
        assert _warm(sc).foreign_keys >= 3
        for k in doomed:
            assert (await sc.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS
        # The reclaimer outlived the foreign keys: it removes the dead entries...
        await _wait_gone(r, dead)
        # ...and nothing else.
        assert await r.get(f"{PREFIX}r:debug-test") == b"1"
        assert await r.hget(f"{PREFIX}r:{'ab' * 32}", "field") == b"value"
        found = await sc.client.lookup(kept)
        assert (found.outcome, found.payload) == (pb.LOOKUP_OUTCOME_HIT, b"kept answer")
    await r.aclose()


async def test_reclaim_and_estimate_see_entries_with_long_key_material(
    redis_server: RedisServer,
) -> None:
    """Entries whose key material is longer than the scan's first read (PEEK_BYTES) were
    invisible to reclaim and to the Invalidate estimate (estimate 0, entries kept until
    their TTL); now both see them."""
    r = aioredis.Redis.from_url(redis_server.url)
    # Key schema v2 keeps long fields as digests; four dimensions at their 256-character
    # limit, in 4-byte UTF-8, still make a material longer than the peek.
    wide = "\U0001f600" * 255
    async with sidecar(redis_server.url) as sc:
        long_keys = [
            make_key(
                text=f"long {i}",
                tenant="v" + wide,
                model_version="m" + wide,
                adapter_version="a" + wide,
                prompt_version="p" + wide,
                temperature=0.0,
                extra={"ctx": "x" * 4096},
            )
            for i in range(12)
        ]
        for k in long_keys:
            await sc.fill(k, b"answer")
        stored = await _entry_keys(r)
        assert len(stored) == len(long_keys)
        for name in stored:
            assert await r.strlen(name) > PEEK_BYTES

        resp = await sc.invalidate(tenant="v" + wide, reason="long material")

        assert resp.record.estimated_entries >= len(long_keys)
        await _wait_gone(r, stored)
    await r.aclose()

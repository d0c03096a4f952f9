"""Values tampered with inside Redis are never served: a real sidecar, a real Redis, real gRPC."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import redis
from infercache.v1 import cache_pb2 as pb

from sidecar.backends.redis.warm import RedisWarmTier
from sidecar.testing import InProcessSidecar
from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import StartSidecar

pytestmark = pytest.mark.redis


@pytest.fixture
def raw(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A plain redis-py client, to tamper with what the sidecar wrote."""
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


@pytest.fixture
async def sidecar(start_sidecar: StartSidecar, redis_server: RedisServer) -> InProcessSidecar:
    """A Redis-backed sidecar with its hot tier off, so every lookup reads Redis."""
    return await start_sidecar(redis_url=redis_server.url, hot_max_entries="0")


def redis_key(sidecar: InProcessSidecar, digest: bytes) -> bytes:
    warm = sidecar.running.cache.warm
    assert isinstance(warm, RedisWarmTier)
    return warm.redis_key(digest)  # type: ignore[arg-type]


async def stored(sidecar: InProcessSidecar, raw: redis.Redis, text: str, payload: bytes) -> bytes:
    """Store through the sidecar; return the Redis key holding the entry."""
    resp = await sidecar.store(key(text), payload)
    assert resp.outcome == pb.STORE_OUTCOME_STORED
    rkey = redis_key(sidecar, resp.key_digest)
    assert raw.exists(rkey) == 1
    return rkey


def value_of(raw: redis.Redis, rkey: bytes) -> bytes:
    value = raw.get(rkey)
    assert isinstance(value, bytes)
    return value


async def wait_deleted(raw: redis.Redis, rkey: bytes, timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while raw.exists(rkey):
        assert time.monotonic() < deadline, "rejected value was not deleted from Redis"
        await asyncio.sleep(0.02)


async def assert_rejected_miss(
    sidecar: InProcessSidecar, text: str, reason: str, payload: bytes
) -> None:
    before = sidecar.stats.total("rejected", reason=reason)
    resp = await sidecar.client.lookup(key(text))
    assert resp.outcome == pb.LOOKUP_OUTCOME_MISS
    assert resp.payload == b""
    assert payload not in resp.SerializeToString()
    assert not resp.degraded
    assert sidecar.stats.total("rejected", reason=reason) == before + 1


async def test_hit_before_tampering(sidecar: InProcessSidecar, raw: redis.Redis) -> None:
    """Untouched, the stored value is a WARM hit (the baseline the other tests break)."""
    await stored(sidecar, raw, "q", b"the real answer")
    hit = await sidecar.client.lookup(key("q"))
    assert (hit.outcome, hit.tier, hit.payload) == (
        pb.LOOKUP_OUTCOME_HIT,
        pb.TIER_WARM,
        b"the real answer",
    )


@pytest.mark.parametrize("where", ["payload", "header", "checksum"])
async def test_flipped_byte_is_a_counted_miss_and_deleted(
    sidecar: InProcessSidecar, raw: redis.Redis, where: str
) -> None:
    """A value with one flipped byte is a MISS, counted as forged (its tag no longer
    verifies), never returned, deleted."""
    payload = b"the real answer, long enough to damage in the middle"
    rkey = await stored(sidecar, raw, "q", payload)
    value = bytearray(value_of(raw, rkey))
    index = {"payload": len(value) - 32 - len(payload) // 2, "header": 5, "checksum": -1}[where]
    value[index] ^= 0x04
    raw.set(rkey, bytes(value), keepttl=True)
    await assert_rejected_miss(sidecar, "q", "forged", b"long enough to damage")
    await wait_deleted(raw, rkey)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
async def test_unreadable_value_is_a_counted_miss_and_deleted(
    sidecar: InProcessSidecar, raw: redis.Redis, damage: str
) -> None:
    """A truncated, foreign-format or empty value is a MISS counted as corrupt, then deleted."""
    rkey = await stored(sidecar, raw, "q", b"the real answer")
    value = value_of(raw, rkey)
    planted = {"truncated": value[: len(value) // 2], "garbage": b"hello world", "empty": b""}
    raw.set(rkey, planted[damage], keepttl=True)
    await assert_rejected_miss(sidecar, "q", "corrupt", b"the real answer")
    await wait_deleted(raw, rkey)


async def test_entry_of_another_key_is_a_foreign_miss(
    sidecar: InProcessSidecar, raw: redis.Redis
) -> None:
    """A valid entry copied under another key's Redis key is a MISS counted as foreign."""
    mine = await stored(sidecar, raw, "mine", b"my answer")
    theirs = await stored(sidecar, raw, "theirs", b"THEIR ANSWER")
    raw.set(mine, value_of(raw, theirs), keepttl=True)
    await assert_rejected_miss(sidecar, "mine", "foreign", b"THEIR ANSWER")
    await wait_deleted(raw, mine)
    # The genuine owner is unaffected.
    hit = await sidecar.client.lookup(key("theirs"))
    assert (hit.outcome, hit.payload) == (pb.LOOKUP_OUTCOME_HIT, b"THEIR ANSWER")


async def test_key_is_usable_again_after_a_rejection(
    sidecar: InProcessSidecar, raw: redis.Redis
) -> None:
    """After a corrupt value is dropped, a fresh store under the key hits again."""
    rkey = await stored(sidecar, raw, "q", b"v1")
    raw.set(rkey, b"junk", keepttl=True)
    await assert_rejected_miss(sidecar, "q", "corrupt", b"v1")
    await wait_deleted(raw, rkey)
    await stored(sidecar, raw, "q", b"v2")
    hit = await sidecar.client.lookup(key("q"))
    assert hit.payload == b"v2"


async def test_a_fresh_sidecar_of_the_fleet_rejects_tampered_values(
    start_sidecar: StartSidecar, redis_server: RedisServer, raw: redis.Redis
) -> None:
    """With hot tiers on, a second sidecar sharing Redis still verifies what it reads."""
    writer = await start_sidecar(redis_url=redis_server.url)
    reader = await start_sidecar(redis_url=redis_server.url)
    rkey = await stored(writer, raw, "q", b"the real answer")
    value = bytearray(value_of(raw, rkey))
    value[len(value) // 2] ^= 0x01
    raw.set(rkey, bytes(value), keepttl=True)
    await assert_rejected_miss(reader, "q", "forged", b"the real answer")

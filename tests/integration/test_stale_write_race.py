"""Leases close the stale-write race: a result computed before an Invalidate is refused.

Every test runs against the embedded stores and against a real Redis, over real gRPC.
"""

from __future__ import annotations

import asyncio
import os
import struct
import time

import grpc
import pytest
from infercache.v1 import cache_pb2 as pb

from tests.support.cluster import RedisClusterProcesses
from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import sidecar

pytestmark = pytest.mark.timeout(60)

LEASE_BODY = struct.Struct(">B32sQQ16s")


@pytest.fixture(
    params=[
        "embedded",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("cluster", marks=pytest.mark.redis),
    ]
)
def store_url(request: pytest.FixtureRequest) -> str | None:
    """None for the embedded stores, else the URL of a flushed redis-server or Redis Cluster."""
    if request.param == "embedded":
        return None
    fixture = "redis_server" if request.param == "redis" else "redis_cluster"
    server: RedisServer | RedisClusterProcesses = request.getfixturevalue(fixture)
    return server.url


async def test_store_after_invalidate_is_stale(store_url: str | None) -> None:
    """MISS (lease) -> Invalidate -> Store with that lease is STALE_LEASE; the key stays a MISS."""
    async with sidecar(store_url) as s:
        k = key("slow request")
        miss = await s.client.lookup(k)
        assert miss.outcome == pb.LOOKUP_OUTCOME_MISS
        await s.invalidate(tenant="acme", reason="bad template")
        stored = await s.client.store(k, b"computed before the purge", lease=miss.lease)
        assert stored.outcome == pb.STORE_OUTCOME_STALE_LEASE
        after = await s.client.lookup(k)
        assert after.outcome == pb.LOOKUP_OUTCOME_MISS
        assert after.payload == b""
        assert s.running.cache.stats.total("stores", reason="stale_lease") == 1


async def test_fresh_lease_after_invalidate_stores(store_url: str | None) -> None:
    """A lease taken after the Invalidate stores and then HITs (the refusal is targeted)."""
    async with sidecar(store_url) as s:
        k = key("recomputed")
        await s.invalidate(tenant="acme", reason="bad template")
        await s.fill(k, b"fresh")
        hit = await s.client.lookup(k)
        assert hit.outcome == pb.LOOKUP_OUTCOME_HIT
        assert hit.payload == b"fresh"


async def test_non_matching_invalidate_does_not_refuse(store_url: str | None) -> None:
    """An Invalidate for another tenant, model or prompt leaves an older lease valid."""
    async with sidecar(store_url) as s:
        k = key("unrelated")
        miss = await s.client.lookup(k)
        await s.invalidate(tenant="beta", reason="other tenant")
        await s.invalidate(model_version="m2", reason="other model")
        await s.invalidate(tenant="acme", prompt_version="p9", reason="other prompt")
        stored = await s.client.store(k, b"still good", lease=miss.lease)
        assert stored.outcome == pb.STORE_OUTCOME_STORED
        hit = await s.client.lookup(k)
        assert (hit.outcome, hit.payload) == (pb.LOOKUP_OUTCOME_HIT, b"still good")


async def test_stored_entry_dies_on_invalidate(store_url: str | None) -> None:
    """An entry stored (and hit from the hot tier) before a matching Invalidate misses after it."""
    async with sidecar(store_url) as s:
        k = key("cached answer", prompt_version="p1")
        survivor = key("cached answer", prompt_version="p2")
        await s.fill(k, b"old")
        await s.fill(survivor, b"kept")
        for _ in range(2):
            assert (await s.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_HIT
        assert (await s.client.lookup(k)).tier == pb.TIER_HOT
        await s.invalidate(prompt_version="p1", reason="template fix")
        assert (await s.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS
        kept = await s.client.lookup(survivor)
        assert (kept.outcome, kept.payload) == (pb.LOOKUP_OUTCOME_HIT, b"kept")


async def test_store_without_lease_is_refused_by_default(store_url: str | None) -> None:
    """Store without a lease is FAILED_PRECONDITION and stores nothing."""
    async with sidecar(store_url) as s:
        k = key("no lease")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await s.client.store(k, b"x")
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert (await s.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS


async def test_unleased_store_when_allowed(store_url: str | None) -> None:
    """With allow_unleased_store=true a Store without a lease is stored and HITs."""
    async with sidecar(store_url, allow_unleased_store=True) as s:
        k = key("no lease")
        stored = await s.client.store(k, b"x")
        assert stored.outcome == pb.STORE_OUTCOME_STORED
        hit = await s.client.lookup(k)
        assert (hit.outcome, hit.payload) == (pb.LOOKUP_OUTCOME_HIT, b"x")


async def test_unleased_store_after_recent_invalidate_is_stale(store_url: str | None) -> None:
    """An unleased result is assumed computed unleased_window_s ago: a recent matching
    Invalidate makes it STALE_LEASE."""
    async with sidecar(store_url, allow_unleased_store=True) as s:
        k = key("no lease")
        await s.invalidate(tenant="acme", reason="purge")
        stored = await s.client.store(k, b"maybe stale")
        assert stored.outcome == pb.STORE_OUTCOME_STALE_LEASE
        assert (await s.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS


@pytest.mark.parametrize("forgery", ["random", "raised_epoch", "flipped_tag", "truncated"])
async def test_forged_or_tampered_lease_is_invalid_argument(
    store_url: str | None, forgery: str
) -> None:
    """A lease that is not a genuine token (random, epoch raised, tag flipped, cut short)
    is INVALID_ARGUMENT and stores nothing, even after an Invalidate made the real one stale."""
    async with sidecar(store_url) as s:
        k = key("forged")
        token = (await s.client.lookup(k)).lease
        await s.invalidate(tenant="acme", reason="purge")
        if forgery == "random":
            bad = os.urandom(len(token))
        elif forgery == "raised_epoch":
            version, digest, epoch, expires, lease_id = LEASE_BODY.unpack(token[: LEASE_BODY.size])
            body = LEASE_BODY.pack(version, digest, epoch + 1000, expires, lease_id)
            bad = body + token[LEASE_BODY.size :]
        elif forgery == "flipped_tag":
            bad = token[:-1] + bytes([token[-1] ^ 0x80])
        else:
            bad = token[:-1]
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await s.client.store(k, b"forged", lease=bad)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "lease" in (info.value.details() or "")
        assert (await s.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS


async def test_lease_for_another_key_is_invalid_argument(store_url: str | None) -> None:
    """A genuine lease of key A cannot store key B."""
    async with sidecar(store_url) as s:
        a, b = key("a"), key("b")
        lease_a = (await s.client.lookup(a)).lease
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await s.client.store(b, b"wrong key", lease=lease_a)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (await s.client.lookup(b)).outcome == pb.LOOKUP_OUTCOME_MISS


async def test_expired_lease_is_failed_precondition(store_url: str | None) -> None:
    """A lease past lease_ttl_s is FAILED_PRECONDITION and stores nothing."""
    async with sidecar(store_url, lease_ttl_s=1) as s:
        k = key("took too long")
        token = (await s.client.lookup(k)).lease
        expires_ms = LEASE_BODY.unpack(token[: LEASE_BODY.size])[3]
        deadline = time.monotonic() + 5
        while time.time() * 1000 <= expires_ms + 5:  # bounded: the lease lives 1 s
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await s.client.store(k, b"late", lease=token)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert (await s.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS


@pytest.mark.redis
async def test_lease_from_one_sidecar_is_judged_by_another(redis_server: RedisServer) -> None:
    """Sidecars sharing a store (and the lease secret it hands out) verify each other's
    leases: B stores A's fresh lease and refuses A's lease that predates an Invalidate."""
    async with (
        sidecar(redis_server.url, lease_secret="") as a,
        sidecar(redis_server.url, lease_secret="") as b,
    ):
        fresh, stale = key("fresh"), key("stale")
        fresh_lease = (await a.client.lookup(fresh)).lease
        stale_lease = (await a.client.lookup(stale)).lease
        stored = await b.client.store(fresh, b"ok", lease=fresh_lease)
        assert stored.outcome == pb.STORE_OUTCOME_STORED
        await a.invalidate(tenant="acme", reason="purge")
        refused = await b.client.store(stale, b"old", lease=stale_lease)
        assert refused.outcome == pb.STORE_OUTCOME_STALE_LEASE
        assert (await a.client.lookup(stale)).outcome == pb.LOOKUP_OUTCOME_MISS
        assert (await b.client.lookup(fresh)).outcome == pb.LOOKUP_OUTCOME_MISS

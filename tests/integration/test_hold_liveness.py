"""A single-flight hold lasts only while its holder proves it computes (issue 26 item 1):
renewed while the result may still come, given back when a take timed out, lapsed
within the hold TTL when the holder dies, released when an invalidation makes its
result unstorable. Real redis-servers, real sidecars (in-process and a subprocess)."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
import redis.asyncio as aioredis
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient

from sidecar.backends.redis.client import RedisKeys
from sidecar.keys import KeyDigest
from tests.support.cluster import RedisClusterProcesses
from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import SidecarProcess, sidecar

pytestmark = [pytest.mark.redis, pytest.mark.timeout(90)]

DEFAULT_HOLD_TTL_MS = 800


async def _holder_pttl(redis: RedisServer | RedisClusterProcesses, digest: bytes) -> int:
    """The holder key's PTTL in ms (-2: no holder key), asked of the node holding it."""
    holder = RedisKeys().holder(KeyDigest(digest))
    if isinstance(redis, RedisClusterProcesses):
        port = redis.master_of_key(holder).port
    else:
        port = redis.port
    admin = aioredis.Redis(port=port)
    try:
        return int(await admin.pttl(holder))
    finally:
        await admin.aclose()


RENEWED_TTL_MS = 1000
"""The renewal test's hold TTL: short against its 4 s computation, long enough that the
shared event loop (two sidecars and the test) stalling on a loaded CI machine does not
make a renewal miss it (a renewal every 250 ms)."""


async def test_a_computing_holder_keeps_its_hold_past_the_hold_ttl(
    shared_redis: RedisServer | RedisClusterProcesses,
) -> None:
    """A holder that computes for 4 hold TTLs keeps the key: the waiter on another sidecar
    is not handed the hold, and gets the holder's result. The hold's own TTL stays short
    the whole time (it is renewed, not lengthened). On one Redis and on a cluster (where
    each hold is renewed by a script of its own, in its own slot)."""
    settings = {"lease_hold_ttl_ms": RENEWED_TTL_MS}
    url = shared_redis.url
    async with sidecar(url, **settings) as a, sidecar(url, **settings) as b:
        k = key("a long computation")
        holder = await a.client.lookup(k, wait_ms=5000)
        assert (holder.outcome, holder.lease_holder) == (pb.LOOKUP_OUTCOME_MISS, True)
        waiter = asyncio.create_task(b.client.lookup(k, wait_ms=10_000))
        for _ in range(8):
            await asyncio.sleep(RENEWED_TTL_MS / 2000)
            assert 0 < await _holder_pttl(shared_redis, holder.key_digest) <= RENEWED_TTL_MS
        assert not waiter.done(), waiter.result()
        stored = await a.client.store(k, b"computed once", lease=holder.lease)
        assert stored.outcome == pb.STORE_OUTCOME_STORED
        got = await asyncio.wait_for(waiter, 5)
        assert (got.outcome, got.payload) == (pb.LOOKUP_OUTCOME_HIT, b"computed once")
        # Stored and released: nothing is renewed any more.
        assert await _holder_pttl(shared_redis, holder.key_digest) == -2


async def test_a_dead_holder_is_replaced_within_a_second(redis_server: RedisServer) -> None:
    """The holder's sidecar is SIGKILLed mid-computation: a waiter on another sidecar takes
    the key over within 1 s (before: the lease TTL, 60 s, past any wait)."""
    a = SidecarProcess(redis_server.url)
    try:
        a.wait_ready()
        async with sidecar(redis_server.url) as b:
            k = key("the holder dies")
            with CacheClient(a.target) as ca:
                holder = ca.lookup(k, wait_ms=5000)
            assert holder.lease_holder
            # Renewed while A lives: past the hold TTL it is still A's.
            await asyncio.sleep(DEFAULT_HOLD_TTL_MS / 1000 * 1.5)
            assert await _holder_pttl(redis_server, holder.key_digest) > 0
            a.proc.send_signal(signal.SIGKILL)
            a.proc.wait()
            died = time.monotonic()
            took_over = await b.client.lookup(k, wait_ms=10_000)
            noticed = time.monotonic() - died
            assert (took_over.outcome, took_over.lease_holder) == (pb.LOOKUP_OUTCOME_MISS, True)
            assert noticed < 1.0, noticed
    finally:
        a.stop()


async def test_a_take_that_timed_out_is_given_back(own_redis: RedisServer) -> None:
    """Redis pauses (SIGSTOP) while a lookup reads and holds: the lookup answers a degraded
    MISS after its 50 ms deadline, and the script takes the hold when Redis resumes. That
    hold is given back (or lapses within the hold TTL): the next lookup of the key holds
    it at once instead of waiting out the 60 s lease."""
    assert own_redis.proc is not None
    async with sidecar(own_redis.url, lookup_timeout_ms=50) as sc:
        k = key("asked while redis sleeps")
        # The read-and-hold connection is open (a first lookup opens it), as on any pod
        # with traffic: the script goes out before the pause is noticed.
        await sc.client.lookup(key("warm-up"))
        own_redis.proc.send_signal(signal.SIGSTOP)
        try:
            first = await sc.client.lookup(k, wait_ms=5000)
            await asyncio.sleep(0.3)
        finally:
            own_redis.proc.send_signal(signal.SIGCONT)
        assert (first.outcome, first.degraded, first.lease_holder) == (
            pb.LOOKUP_OUTCOME_MISS,
            True,
            False,
        )
        assert await _holder_pttl(own_redis, first.key_digest) <= DEFAULT_HOLD_TTL_MS
        started = time.monotonic()
        again = await sc.client.lookup(k, wait_ms=5000)
        took = time.monotonic() - started
        assert (again.outcome, again.lease_holder) == (pb.LOOKUP_OUTCOME_MISS, True)
        assert took < 1.0, took


async def test_an_invalidate_frees_the_key_from_a_holder_whose_result_is_dead(
    redis_server: RedisServer,
) -> None:
    """A holder computes a result that an Invalidate makes unstorable (its lease predates
    the rule): a request after the Invalidate takes the key over within 1 s instead of
    waiting for a computation whose Store will be refused."""
    async with sidecar(redis_server.url) as a, sidecar(redis_server.url) as b:
        k = key("purged while computing")
        holder = await a.client.lookup(k, wait_ms=5000)
        assert holder.lease_holder
        await a.invalidate(tenant="acme", reason="purge while computing")
        started = time.monotonic()
        fresh = await b.client.lookup(k, wait_ms=5000)
        took = time.monotonic() - started
        assert (fresh.outcome, fresh.lease_holder) == (pb.LOOKUP_OUTCOME_MISS, True)
        assert took < 1.0, took
        refused = await a.client.store(k, b"stale", lease=holder.lease)
        assert refused.outcome == pb.STORE_OUTCOME_STALE_LEASE
        stored = await b.client.store(k, b"fresh", lease=fresh.lease)
        assert stored.outcome == pb.STORE_OUTCOME_STORED

"""Fleet-wide single-flight: concurrent misses on one key wait for one lease holder.

Each test runs on one Redis (where a lookup reads and holds in one script, a store
writes and releases in one) and on a Redis Cluster (separate MGET, SET NX and
release calls): the same guarantees on both paths."""

from __future__ import annotations

import asyncio

import pytest
from infercache.v1 import cache_pb2 as pb

from tests.support.cluster import RedisClusterProcesses
from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import Sidecar, sidecar

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

CALLERS = 20
WAIT_MS = 10_000
# Two servers and twenty callers share one event loop on a small CI machine: the
# default 50 ms read deadline would turn slowness into degraded misses, which is
# not what these tests are about.
SLOW_OK = {"lookup_timeout_ms": 2000, "write_timeout_ms": 2000}


def _spread(a: Sidecar, b: Sidecar, k: pb.CacheKey) -> list[asyncio.Task[pb.LookupResponse]]:
    """CALLERS concurrent waiting lookups, alternating between the two sidecars."""
    return [
        asyncio.create_task((a if i % 2 == 0 else b).client.lookup(k, wait_ms=WAIT_MS))
        for i in range(CALLERS)
    ]


async def _first_done(
    tasks: list[asyncio.Task[pb.LookupResponse]],
) -> tuple[asyncio.Task[pb.LookupResponse], list[asyncio.Task[pb.LookupResponse]]]:
    """The first task to finish and the ones still pending (at least one must finish in 10 s)."""
    done, pending = await asyncio.wait(tasks, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    assert len(done) == 1, f"{len(done)} lookups finished at once; only the holder may"
    return done.pop(), [t for t in tasks if t in pending]


async def test_one_holder_the_rest_get_its_result(
    shared_redis: RedisServer | RedisClusterProcesses,
) -> None:
    """20 concurrent lookups over two sidecars: exactly one lease holder; when it stores,
    the other 19 get its result as a HIT instead of computing."""
    async with sidecar(shared_redis.url, **SLOW_OK) as a, sidecar(shared_redis.url, **SLOW_OK) as b:
        k = key("popular prompt")
        tasks = _spread(a, b, k)
        first, waiting = await _first_done(tasks)
        holder = first.result()
        assert holder.outcome == pb.LOOKUP_OUTCOME_MISS
        assert holder.lease_holder
        assert len(waiting) == CALLERS - 1, "the others must still be waiting"
        stored = await a.client.store(k, b"the one computation", lease=holder.lease)
        assert stored.outcome == pb.STORE_OUTCOME_STORED
        results = await asyncio.gather(*waiting)
        assert [r.outcome for r in results] == [pb.LOOKUP_OUTCOME_HIT] * (CALLERS - 1), [
            (r.outcome, r.degraded, r.lease_holder) for r in results
        ]
        assert {r.payload for r in results} == {b"the one computation"}
        assert not any(r.lease_holder for r in results)


async def test_lapsed_holder_is_replaced_by_exactly_one_waiter(
    shared_redis: RedisServer | RedisClusterProcesses,
) -> None:
    """A holder that never stores (crashed) is replaced, once its holder key lapses, by
    exactly one waiter; the other waiters keep waiting and get the new holder's result."""
    async with (
        sidecar(shared_redis.url, lease_ttl_s=1, **SLOW_OK) as a,
        sidecar(shared_redis.url, lease_ttl_s=1, **SLOW_OK) as b,
    ):
        k = key("crashing computation")
        tasks = _spread(a, b, k)
        first, waiting = await _first_done(tasks)
        crashed = first.result()
        assert crashed.lease_holder
        # The crashed holder never stores. Within about lease_ttl_s one waiter takes over.
        second, still_waiting = await _first_done(waiting)
        successor = second.result()
        assert successor.outcome == pb.LOOKUP_OUTCOME_MISS
        assert successor.lease_holder, "the first waiter to finish must be the new holder"
        assert successor.lease != crashed.lease
        assert len(still_waiting) == CALLERS - 2
        stored = await b.client.store(k, b"computed by the successor", lease=successor.lease)
        assert stored.outcome == pb.STORE_OUTCOME_STORED
        results = await asyncio.gather(*still_waiting)
        assert [r.outcome for r in results] == [pb.LOOKUP_OUTCOME_HIT] * (CALLERS - 2)
        assert {r.payload for r in results} == {b"computed by the successor"}


async def test_stale_holder_hands_over(shared_redis: RedisServer | RedisClusterProcesses) -> None:
    """A holder whose Store is refused as STALE_LEASE releases the key at once: a waiter
    becomes the new holder long before the holder key would have lapsed."""
    async with sidecar(shared_redis.url, **SLOW_OK) as a, sidecar(shared_redis.url, **SLOW_OK) as b:
        k = key("invalidated mid-computation")
        tasks = _spread(a, b, k)
        first, waiting = await _first_done(tasks)
        holder = first.result()
        await a.invalidate(tenant="acme", reason="purge while computing")
        refused = await b.client.store(k, b"stale", lease=holder.lease)
        assert refused.outcome == pb.STORE_OUTCOME_STALE_LEASE
        second, still_waiting = await _first_done(waiting)
        successor = second.result()
        assert (successor.outcome, successor.lease_holder) == (pb.LOOKUP_OUTCOME_MISS, True)
        stored = await a.client.store(k, b"fresh", lease=successor.lease)
        assert stored.outcome == pb.STORE_OUTCOME_STORED
        results = await asyncio.gather(*still_waiting)
        assert {(r.outcome, r.payload) for r in results} == {(pb.LOOKUP_OUTCOME_HIT, b"fresh")}


async def test_without_wait_every_loser_misses_at_once(
    shared_redis: RedisServer | RedisClusterProcesses,
) -> None:
    """wait_ms=0: one holder, every other concurrent caller gets a non-holder MISS with a lease."""
    async with sidecar(shared_redis.url, **SLOW_OK) as a, sidecar(shared_redis.url, **SLOW_OK) as b:
        k = key("no waiting")
        results = await asyncio.gather(
            *((a if i % 2 else b).client.lookup(k) for i in range(CALLERS))
        )
        assert {r.outcome for r in results} == {pb.LOOKUP_OUTCOME_MISS}
        assert sum(r.lease_holder for r in results) == 1
        assert all(r.lease for r in results)

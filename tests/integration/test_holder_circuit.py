"""A slow single-flight holder call on the lookup path must not fail the next Invalidate."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from infercache.v1 import cache_pb2 as pb

from sidecar.invalidation.invalidator import Invalidator
from sidecar.invalidation.rules import Selector
from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import StartSidecar

pytestmark = pytest.mark.redis


async def test_holder_timeout_does_not_open_the_invalidation_circuit(
    start_sidecar: StartSidecar, redis_server: RedisServer
) -> None:
    """A holder SET NX that times out trips only its own circuit: Invalidate right after works."""
    sidecar = await start_sidecar(
        redis_url=redis_server.url, freshness_bound_ms="2000", lookup_timeout_ms="50"
    )
    running = sidecar.running
    invalidator = Invalidator(running.stores.control, running.freshness, running.stores.warm)
    admin = aioredis.Redis.from_url(redis_server.url)
    try:
        # Writes block for 300 ms; reads go on, so the lookup's MGET answers and its
        # holder SET NX (a write) overruns the 50 ms lookup deadline.
        await admin.client_pause(300, all=False)
        miss = await sidecar.client.lookup(key())
        assert miss.outcome == pb.LOOKUP_OUTCOME_MISS
        assert not miss.lease_holder  # the holder call failed
        # Immediately after that failure the control store must still be usable; the
        # commit waits for the pause to end instead of failing fast.
        record = await invalidator.invalidate(Selector(tenant="acme"), "test", "tests")
        assert record.epoch >= 1
    finally:
        await admin.client_unpause()
        await admin.aclose()

"""Issue 25 item 2: an epoch counter no sidecar wrote stops hits (fails closed) and makes
Invalidate UNAVAILABLE with a clear message, and is counted. Real Redis, real gRPC."""

from __future__ import annotations

import grpc
import pytest
import redis
from infercache.v1 import cache_pb2 as pb

from sidecar.backends.redis.client import RedisKeys
from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import sidecar

pytestmark = pytest.mark.redis


@pytest.mark.parametrize("planted", [str(2**63 - 1), "not-a-number", str(2**53 + 1)])
async def test_an_epoch_counter_no_sidecar_wrote_stops_hits_and_invalidate(
    redis_server: RedisServer, planted: str
) -> None:
    """Issue 25 repro 2: SET of the epoch counter to 2^63-1 (or a non-integer, or above
    2^53): lookups answer degraded MISS instead of hits, the refusal is counted
    (entries_rejected{reason=store_distrusted}), and Invalidate is UNAVAILABLE naming
    the epoch counter."""
    async with sidecar(redis_server.url, hot_max_entries="0") as sc:
        await sc.fill(key("q"), b"the answer")
        hit = await sc.client.lookup(key("q"))
        assert hit.outcome == pb.LOOKUP_OUTCOME_HIT
        raw = redis.Redis.from_url(redis_server.url)
        raw.set(RedisKeys(sc.running.app.config.redis.key_prefix).meta("epoch"), planted)
        raw.close()
        resp = await sc.client.lookup(key("q"))
        assert resp.outcome == pb.LOOKUP_OUTCOME_MISS
        assert resp.degraded
        assert sc.stats.total("rejected", reason="store_distrusted") >= 1
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await sc.invalidate(reason="after tampering", all=True)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "epoch counter" in (err.value.details() or "")
        assert sc.running.app.freshness.distrust is not None

"""Invalidate can wait until the rule is durable (Redis WAIT / WAITAOF) before OK."""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Iterator

import grpc
import pytest
import redis

from tests.support.processes import RedisServer, free_port, redis_command
from tests.support.sidecars import sidecar

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]


def _online(replication: dict[str, object]) -> bool:
    """Whether the primary's INFO replication lists a replica in state online."""
    slave = replication.get("slave0")
    return isinstance(slave, dict) and slave.get("state") == "online"


@pytest.fixture
def replica(own_redis: RedisServer) -> Iterator[int]:
    """A redis-server replicating own_redis, synced; yields its port."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="ic-replica-") as d:
        argv = [*redis_command(port, d), "--replicaof", "127.0.0.1", str(own_redis.port)]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 15
            # Synced, not only connected: a replica still in its first full sync (the
            # primary's BGSAVE, the transfer) acknowledges no offset, so WAIT would count
            # it only once that is done, which a loaded machine can stretch past the
            # test's wait.
            with redis.Redis(port=own_redis.port) as primary:
                while not _online(primary.info("replication")):
                    assert time.monotonic() < deadline, "replica never synced"
                    time.sleep(0.05)
            yield port
        finally:
            proc.kill()
            proc.wait()


async def test_invalidate_waits_for_the_configured_replicas(own_redis: RedisServer) -> None:
    """With INFERCACHE_INVALIDATE_WAIT_REPLICAS=1 and no replica, Invalidate is
    UNAVAILABLE saying the rule is committed but not durable (there was no such
    setting: OK once the primary's memory held it)."""
    async with sidecar(
        own_redis.url, invalidate_wait_replicas=1, invalidate_wait_timeout_ms=200
    ) as sc:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await sc.invalidate(tenant="acme")
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        details = refused.value.details() or ""
        assert "committed at epoch 1 but not known to be durable" in details
        assert "0 of 1 replica" in details


async def test_invalidate_is_ok_once_a_replica_holds_the_rule(
    own_redis: RedisServer, replica: int
) -> None:
    """With a synced replica, the same setting answers OK, and the replica has the rule."""
    async with sidecar(
        own_redis.url, invalidate_wait_replicas=1, invalidate_wait_timeout_ms=5000
    ) as sc:
        resp = await sc.invalidate(tenant="acme")
    with redis.Redis(port=replica) as r:
        assert r.zcard("ic:v2:{meta}:rules") == 1
    assert resp.record.epoch == 1


async def test_waiting_for_the_aof_where_redis_cannot_is_refused_loudly(
    own_redis: RedisServer,
) -> None:
    """INFERCACHE_INVALIDATE_WAIT_AOF on a Redis without an AOF (or without WAITAOF,
    before 7.2) never answers OK: UNAVAILABLE, the rule committed but not durable."""
    async with sidecar(own_redis.url, invalidate_wait_aof=True) as sc:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await sc.invalidate(tenant="acme")
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "not known to be durable" in (refused.value.details() or "")

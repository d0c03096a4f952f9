"""What only a Redis Cluster has: reads spread per node, WAIT on the control slot's
primary, the sharded invalidation channel, one slot per script."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import grpc
import pytest
import redis
from infercache.v1 import cache_pb2 as pb
from redis.asyncio.connection import Connection
from redis.crc import key_slot

from sidecar.backends.redis.client import RedisKeys
from sidecar.backends.redis.control import RedisControlStore
from sidecar.backends.redis.warm import RedisWarmTier
from sidecar.invalidation.rules import Selector
from sidecar.keys import KeyDigest
from sidecar.tiers.base import WarmItem
from tests.support.cluster import RedisClusterProcesses
from tests.support.keys import key
from tests.support.sidecars import sidecar

pytestmark = [pytest.mark.redis, pytest.mark.timeout(90)]


def digest(n: int) -> KeyDigest:
    return KeyDigest(n.to_bytes(32, "big"))


async def test_a_batch_read_is_one_round_trip_per_primary(
    redis_cluster: RedisClusterProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    """get_many_with_epoch of 200 keys spread over every slot's owner writes once to each
    primary (one pipeline of per-slot MGETs, the epoch's among them), all at once, and
    each primary runs one MGET per slot it owns in the batch, no GET (the reader's
    connections already open)."""
    tier = RedisWarmTier(redis_cluster.url, read_timeout_s=5.0, write_timeout_s=5.0)
    try:
        await tier.put_many([WarmItem(digest(i), b"v%d" % i, 60_000) for i in range(200)])
        sends: Counter[int] = Counter()
        real_send = Connection.send_packed_command

        async def counting_send(self: Connection, command: Any, check_health: bool = True) -> None:
            sends[int(self.port)] += 1
            await real_send(self, command, check_health)

        # A first read opens the reader's connections (their handshake is sent once).
        await tier.get_many_with_epoch([digest(i) for i in range(200)])
        before = {n.port: _mget_calls(n.port) for n in redis_cluster.masters()}
        monkeypatch.setattr(Connection, "send_packed_command", counting_send)
        values, epoch = await tier.get_many_with_epoch([digest(i) for i in range(200)])
        monkeypatch.undo()
        assert values == [b"v%d" % i for i in range(200)]
        assert epoch == 0
        assert sends == Counter({port: 1 for port in before})
        cluster = redis.RedisCluster(host="127.0.0.1", port=redis_cluster.ports[0])
        try:
            names = [tier.keys.entry(digest(i)) for i in range(200)]
            names.append(tier.keys.meta("epoch").encode())
            slots: dict[int, set[int]] = {}
            for name in names:
                slot = key_slot(name)
                port = cluster.nodes_manager.get_node_from_slot(slot).port
                slots.setdefault(int(port), set()).add(slot)
        finally:
            cluster.close()
        for port, calls in before.items():
            assert _mget_calls(port) - calls == len(slots[port])
    finally:
        await tier.close()


def _mget_calls(port: int) -> int:
    with redis.Redis(port=port) as r:
        stats = r.info("commandstats")
    return int(stats.get("cmdstat_mget", {}).get("calls", 0))


async def test_invalidate_waits_for_a_replica_of_the_control_slot(
    redis_cluster: RedisClusterProcesses,
) -> None:
    """WAIT goes to the primary that took the rule: one replica answers OK and holds the
    rule; asking for two (each master has one) is UNAVAILABLE, committed but not durable."""
    async with sidecar(
        redis_cluster.url, invalidate_wait_replicas=1, invalidate_wait_timeout_ms=5000
    ) as sc:
        resp = await sc.invalidate(tenant="acme")
    assert resp.record.epoch == 1
    owner = redis_cluster.master_of_key("ic:v2:{meta}:rules")
    replicas = [n for n in redis_cluster.nodes() if not n.master and not n.failed]
    held = []
    for n in replicas:
        with redis.Redis(port=n.port) as r:
            role = r.info("replication")
            if int(role["master_port"]) == owner.port:
                r.execute_command("READONLY")
                held.append(r.zcard("ic:v2:{meta}:rules"))
    assert held == [1]
    async with sidecar(
        redis_cluster.url, invalidate_wait_replicas=2, invalidate_wait_timeout_ms=300
    ) as sc:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await sc.invalidate(tenant="acme")
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    details = refused.value.details() or ""
    assert "committed at epoch 2 but not known to be durable" in details
    assert "1 of 2 replica" in details


async def test_commit_announces_on_the_sharded_channel(
    redis_cluster: RedisClusterProcesses,
) -> None:
    """The commit script SPUBLISHes the epoch on a shard channel in the {meta} slot, and a
    store's notifications() (SSUBSCRIBE) receives it."""
    keys = RedisKeys()
    assert key_slot(keys.channel(True).encode()) == key_slot(keys.meta("epoch").encode())
    store = RedisControlStore(redis_cluster.url, timeout_s=5.0)
    listener = RedisControlStore(redis_cluster.url, timeout_s=5.0)
    try:
        got: asyncio.Queue[int] = asyncio.Queue()

        async def listen() -> None:
            async for epoch in listener.notifications():
                await got.put(epoch)

        task = asyncio.create_task(listen())
        record = None
        # The subscription may not be in place yet: commit until one announcement arrives.
        for _ in range(50):
            record = await store.commit_invalidation(Selector(tenant="t"), "r", "test", 0)
            try:
                epoch = await asyncio.wait_for(got.get(), 0.2)
                break
            except TimeoutError:
                continue
        else:
            raise AssertionError("no announcement arrived")
        assert record is not None
        assert 1 <= epoch <= record.epoch
        task.cancel()
    finally:
        await store.close()
        await listener.close()


async def test_sidecar_on_a_cluster_hits_and_invalidates(
    redis_cluster: RedisClusterProcesses,
) -> None:
    """Two in-process sidecars on one cluster: a Store through one is a warm HIT on the
    other; an Invalidate through one is a MISS on both when it returns."""
    async with sidecar(redis_cluster.url) as a, sidecar(redis_cluster.url) as b:
        keys = [key(f"q{i}") for i in range(20)]
        for k in keys:
            miss = await a.client.lookup(k)
            assert miss.outcome == pb.LOOKUP_OUTCOME_MISS
            stored = await a.client.store(k, b"answer", lease=miss.lease)
            assert stored.outcome == pb.STORE_OUTCOME_STORED
        found = await b.client.lookup_batch(keys)
        assert [(r.outcome, r.payload) for r in found] == [(pb.LOOKUP_OUTCOME_HIT, b"answer")] * 20
        await a.invalidate(tenant="acme")
        for sc in (a, b):
            after = await sc.client.lookup_batch(keys)
            assert all(r.outcome == pb.LOOKUP_OUTCOME_MISS for r in after)

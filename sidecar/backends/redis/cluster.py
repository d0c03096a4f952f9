"""RedisBackend on a Redis Cluster, through redis-py's asyncio RedisCluster.

redis-py does the routing: it keeps the slot map, follows MOVED (updating the map)
and ASK (a slot being migrated), and re-reads the topology after a connection error
(a failed master) on the next call. Only primaries are read, so a read never sees a
replica that lags behind what its primary acknowledged.

Key layout (see RedisKeys): entries and KV blocks spread over all slots; every key a
script touches shares one hash tag (`{meta}` for the control store, `{hits:h}` per
model version for hit records), so each script runs on one slot; the invalidation
channel carries the `{meta}` tag too, so the commit script can SPUBLISH it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import structlog
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.commands.core import AsyncScript
from redis.crc import key_slot
from redis.exceptions import RedisClusterException, RedisError

from sidecar.backends.redis.single import pack_mget, parse_acks, wait_command
from sidecar.config.redis_urls import parse_cluster_url

log = structlog.get_logger("infercache.redis")

# A SCAN cursor over the cluster: node index in the low bits, that node's cursor above.
_NODE_BITS = 12
_NODE_MASK = (1 << _NODE_BITS) - 1


class ClusterReader:
    """The warm tier's reads on a cluster: per-slot MGETs, one write and one read per
    primary on a connection of its own per node, the primaries at once.

    The keys are grouped with redis-py's own slot map (`key_slot`, the nodes manager);
    anything unusual (a MOVED or ASK reply, a slot with no known owner, a connection
    error) drops that node's connection and hands the whole read to `mget_nonatomic`,
    which follows the redirection and updates the map, so the next read goes straight
    to the new owner. One read runs at a time (the coalescer), and any error or
    cancellation drops the connection, so a late reply is never taken for the next.
    """

    def __init__(self, backend: ClusterRedis) -> None:
        self._backend = backend
        self._conns: dict[str, AbstractConnection] = {}

    async def get(self, keys: list[bytes]) -> list[bytes | None]:
        """Values of `keys` in order."""
        try:
            by_node = self._group(keys)
        except RedisClusterException:  # no slot map yet, or a slot with no owner
            return await self._backend.get_many(keys)
        out: list[bytes | None] = [None] * len(keys)
        sent: list[tuple[AbstractConnection, list[list[int]]]] = []
        try:
            # Every primary's request goes out before any reply is read: the primaries
            # work at once, and no task per node is needed to wait for them.
            for node, slots in by_node:
                conn = self._conns.get(node.name)
                if conn is None:
                    conn = node.connection_class(**node.connection_kwargs)
                    conn.socket_timeout = None  # the caller's deadline bounds the read
                    self._conns[node.name] = conn
                groups = list(slots.values())
                sent.append((conn, groups))
                packed = b"".join(pack_mget([keys[i] for i in group]) for group in groups)
                await conn.send_packed_command(packed, check_health=False)
            for conn, groups in sent:
                for group in groups:
                    reply = await conn.read_response(timeout=math.inf)
                    for i, value in zip(group, reply, strict=True):
                        out[i] = value
        except BaseException as exc:
            # Replies may be left unread on any of them: none can serve the next read.
            for conn, _ in sent:
                self._drop(conn)
            if isinstance(exc, (RedisError, OSError)):
                return await self._backend.get_many(keys)
            raise
        return out

    def _group(self, keys: list[bytes]) -> list[tuple[ClusterNode, dict[int, list[int]]]]:
        manager = self._backend.redis.nodes_manager
        if not manager.slots_cache:
            raise RedisClusterException("no slot map yet")
        nodes: dict[str, tuple[ClusterNode, dict[int, list[int]]]] = {}
        for i, k in enumerate(keys):
            slot = key_slot(k)
            node = manager.get_node_from_slot(slot)
            entry = nodes.get(node.name)
            if entry is None:
                entry = nodes[node.name] = (node, {})
            entry[1].setdefault(slot, []).append(i)
        return list(nodes.values())

    def _drop(self, conn: AbstractConnection) -> None:
        for name, mine in list(self._conns.items()):
            if mine is conn:
                del self._conns[name]
        if conn.is_connected:
            conn._close()  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        """Disconnect the reader's connections."""
        conns, self._conns = self._conns, {}
        for conn in conns.values():
            await conn.disconnect()


class ClusterRedis:
    """RedisBackend on a Redis Cluster."""

    cluster = True
    publish_command = "SPUBLISH"

    def __init__(self, redis: RedisCluster) -> None:
        self.redis = redis

    def register_script(self, script: str) -> AsyncScript:
        """EVALSHA routed by the first key's slot (every key must share it)."""
        return self.redis.register_script(script)

    def reader(self) -> ClusterReader:
        """Reads need nothing per caller on a cluster."""
        return ClusterReader(self)

    async def get_many(self, keys: Sequence[bytes | str]) -> list[bytes | None]:
        """redis-py's mget_nonatomic: keys grouped per slot, each slot's MGET sent in one
        pipeline per node, the nodes in parallel; MOVED/ASK answers are retried there."""
        if not keys:
            return []
        return cast(list[bytes | None], await self.redis.mget_nonatomic(list(keys)))

    def _primaries(self) -> list[ClusterNode]:
        # A stable order, so that a cursor's node index means the same node next page
        # (unless the topology changed: a scan is best effort, like SCAN itself).
        return sorted(self.redis.get_primaries(), key=lambda n: n.name)

    async def scan(self, cursor: int, match: str, count: int) -> tuple[int, list[bytes]]:
        """SCAN one primary at a time; the cursor carries which one and where."""
        await self.redis.initialize()  # no-op once the slot map is known
        nodes = self._primaries()
        index, node_cursor = cursor & _NODE_MASK, cursor >> _NODE_BITS
        if index >= len(nodes):
            return 0, []  # the cluster shrank under the scan: it ends here
        cursors, found = await self.redis.execute_command(
            "SCAN", node_cursor, "MATCH", match, "COUNT", count, target_nodes=nodes[index]
        )
        next_cursor = int(next(iter(cursors.values())))
        if next_cursor == 0:
            index += 1
            if index >= len(nodes):
                return 0, list(found)
            return index, list(found)
        return (next_cursor << _NODE_BITS) | index, list(found)

    async def dbsize(self) -> int:
        """DBSIZE of every primary, summed."""
        await self.redis.initialize()
        sizes = await asyncio.gather(
            *(self.redis.execute_command("DBSIZE", target_nodes=node) for node in self._primaries())
        )
        return sum(int(s) for s in sizes)

    async def wait_replicas(
        self, probe_key: str, replicas: int, local_aof: bool, timeout_ms: int
    ) -> tuple[int, int]:
        """SET probe_key and WAIT in one pipeline to the primary owning probe_key (the same
        slot as the rule the caller committed). A redirection refuses the answer: WAIT on
        any other node would count replicas of writes it never took."""
        await self.redis.initialize()
        node = self.redis.get_node_from_key(probe_key)
        if node is None:
            raise RedisClusterException("no primary owns the control slot")
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(probe_key, "1")
        pipe.execute_command(*wait_command(replicas, local_aof, timeout_ms), target_nodes=node)
        return parse_acks((await pipe.execute(allow_redirections=False))[1], local_aof)

    async def messages(self, channel: str) -> AsyncIterator[bytes]:
        """SSUBSCRIBE on the primary owning the channel's slot; redis-py moves the
        subscription after a failover or slot migration. Ends on any error."""
        await self.redis.initialize()  # the slot map names the channel's node (no-op if known)
        pubsub = self.redis.pubsub()
        try:
            await pubsub.ssubscribe(channel)
            while True:
                msg = await pubsub.get_sharded_message(ignore_subscribe_messages=True, timeout=1.0)
                if msg is not None and msg.get("type") in ("smessage", b"smessage"):
                    yield msg["data"]
        finally:
            try:
                await cast(Any, pubsub).aclose()
            except Exception:  # closing a broken connection may fail; nothing to do
                log.debug("pubsub_close_failed")

    async def aclose(self) -> None:
        """Close every node's connections."""
        await self.redis.aclose()


def connect_cluster(url: str, kwargs: dict[str, Any]) -> ClusterRedis:
    """A RedisCluster over the URL's seed nodes with the connection keyword arguments of
    connect.py's client_kwargs (timeouts, password file, TLS material); user and
    password from the URL, TLS for rediss+cluster://.

    Partial coverage is allowed: while one master is failing over, keys in the other
    masters' slots are still served (the failed slots answer errors, counted as
    degraded misses). A short backoff keeps retries inside the callers' deadlines.
    """
    parsed = parse_cluster_url(url)
    options = dict(kwargs)
    options.setdefault("password", parsed.password)  # a password file wins (load_config
    # refuses both)
    return ClusterRedis(
        RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in parsed.seeds],
            username=parsed.username,
            ssl=parsed.tls,
            require_full_coverage=False,
            # A MOVED patches the slot map with the owner it names. redis-py's default also
            # closes every connection on each 5th MOVED, under commands other coroutines
            # still have in flight (seen during resharding: AttributeError inside
            # redis-py's connect): never do that.
            reinitialize_steps=0,
            **(options | {"retry": Retry(ExponentialBackoff(cap=0.05, base=0.005), 3)}),
        )
    )

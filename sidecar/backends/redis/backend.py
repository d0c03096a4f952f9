"""The one Redis seam every store uses: one Redis server, or a Redis Cluster.

The stores (warm tier, control store, KV warm blocks, hit records) send ordinary
commands through `redis` (a redis.asyncio Redis or RedisCluster: single-key
commands, scripts and pipelines whose keys share a slot route the same on both),
and everything that differs between the two goes through this Protocol: reads of
keys in many slots, scans over every primary, WAIT on the right primary, and the
invalidation channel (PUBLISH on one server, sharded SPUBLISH on a cluster).

`connect` picks the implementation from the URL: `redis://`, `rediss://` and
`unix://` are one server; `redis+cluster://h:p,h:p,...` (`rediss+cluster://` with
TLS) is a cluster reached through any of the listed seed nodes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Protocol

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from sidecar.backends.redis.cluster import connect_cluster
from sidecar.backends.redis.connect import RedisOptions, as_options, client_kwargs
from sidecar.backends.redis.single import SingleRedis
from sidecar.config.redis_urls import is_cluster_url

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

RedisClient = Redis | RedisCluster
"""The command client behind a RedisBackend; callers outside this package name it here."""


class Reader(Protocol):
    """GET of many keys, for one caller that issues one read at a time (the warm tier's
    coalescer): it may keep a connection of its own."""

    async def get(self, keys: list[bytes]) -> list[bytes | None]:
        """The values of `keys` in order (None where absent); bounded by the caller."""
        ...

    async def close(self) -> None:
        """Drop any connection it keeps."""
        ...


class RedisBackend(Protocol):
    """One Redis or one Redis Cluster, as the stores need it.

    Every method raises redis-py's RedisError (or OSError) on failure; the stores'
    RedisGuard maps those to TierUnavailable.
    """

    @property
    def redis(self) -> RedisClient:
        """The command client (redis.asyncio Redis or RedisCluster)."""
        ...

    @property
    def cluster(self) -> bool:
        """True for a Redis Cluster (keys of one script or MGET must share a slot)."""
        ...

    def register_script(self, script: str) -> AsyncScript:
        """A Lua script run with EVALSHA on the node owning its keys' slot."""
        ...

    def reader(self) -> Reader:
        """A Reader for one sequential caller (on a cluster: one pipeline of per-slot
        MGETs, sent to every owning primary in parallel)."""
        ...

    async def get_many(self, keys: Sequence[bytes | str]) -> list[bytes | None]:
        """Values of keys in any slots, in order; one round trip per node."""
        ...

    async def scan(self, cursor: int, match: str, count: int) -> tuple[int, list[bytes]]:
        """One SCAN step over the whole key space (every primary on a cluster);
        cursor 0 starts and ends."""
        ...

    async def dbsize(self) -> int:
        """Keys held (the sum over primaries on a cluster)."""
        ...

    async def wait_replicas(
        self, probe_key: str, replicas: int, local_aof: bool, timeout_ms: int
    ) -> tuple[int, int]:
        """Write `probe_key` then WAIT (WAITAOF with local_aof) on the same connection of
        the primary owning it; (local fsyncs, replicas) that acknowledged every write
        that primary took before the probe (local is 1 for plain WAIT)."""
        ...

    @property
    def publish_command(self) -> str:
        """What the invalidation script announces epochs with: PUBLISH or SPUBLISH."""
        ...

    def messages(self, channel: str) -> AsyncIterator[bytes]:
        """Payloads published on `channel` (sharded on a cluster); ends on any error."""
        ...

    async def aclose(self) -> None:
        """Close every connection."""
        ...


def connect(
    url: str | RedisOptions, *, connect_timeout_s: float, socket_timeout_s: float
) -> RedisBackend:
    """The backend the URL names, with short timeouts and the options' credentials and
    TLS material (connect.py's client_kwargs, for a cluster too)."""
    options = as_options(url)
    kwargs = client_kwargs(
        options, connect_timeout_s=connect_timeout_s, socket_timeout_s=socket_timeout_s
    )
    if is_cluster_url(options.url):
        return connect_cluster(options.url, kwargs)
    return SingleRedis(Redis.from_url(options.url, **kwargs))

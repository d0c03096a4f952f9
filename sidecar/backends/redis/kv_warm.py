"""KvWarmStore on Redis: demoted KV blocks as values (see sidecar.kv.warm for the value layout).

Each block is one value under one key (its header, checksum and bytes together), so a
block is read or written whole or not at all, on one Redis and on a cluster alike;
the blocks of a chain spread over the cluster's slots and are read per node in parallel.
"""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.backends.redis.backend import RedisBackend
from sidecar.backends.redis.client import RedisGuard
from sidecar.kv.layout import BlockKey
from sidecar.macs import LOCAL, FleetKeys


class RedisKvWarmStore:
    """KvWarmStore on Redis (the sidecar's own client, shared with the result warm tier)."""

    def __init__(
        self,
        client: RedisBackend,
        *,
        key_prefix: str,
        timeout_s: float,
        keys: FleetKeys = LOCAL,
    ) -> None:
        """`keys`: the fleet's MAC keys (blocks are sealed with them, see kv/warm.py)."""
        self.keys = keys
        self._client = client
        self._prefix = f"{key_prefix}kv:"
        self._versions_key = f"{self._prefix}versions"
        self._timeout = timeout_s
        self._guard = RedisGuard("redis KV warm tier")

    def redis_key(self, version: str, key: BlockKey) -> bytes:
        """Where a block of a version lives."""
        return f"{self._prefix}{version}:{key.hex()}".encode()

    async def put_many(
        self, version: str, items: Sequence[tuple[BlockKey, bytes | bytearray]], ttl_ms: int
    ) -> None:
        """SET PX each value in one pipelined round trip."""
        if not items:
            return
        async with self._guard(self._timeout):
            pipe = self._client.redis.pipeline(transaction=False)
            for key, value in items:
                pipe.set(self.redis_key(version, key), value, px=max(ttl_ms, 1))
            await pipe.execute()

    async def get_many(self, version: str, keys: Sequence[BlockKey]) -> list[bytes | None]:
        """One MGET (per slot and node on a cluster; the caller bounds the time)."""
        if not keys:
            return []
        async with self._guard(self._timeout):
            return await self._client.get_many([self.redis_key(version, k) for k in keys])

    async def versions(self) -> list[str]:
        """Members of the versions set."""
        async with self._guard(self._timeout):
            members = await self._client.redis.smembers(self._versions_key)
        return sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)

    async def note_version(self, version: str) -> None:
        """SADD to the versions set."""
        async with self._guard(self._timeout):
            await self._client.redis.sadd(self._versions_key, version)

    async def drop_version(self, version: str) -> int:
        """SCAN the version's keys and UNLINK them page by page, then forget the version."""
        deleted = 0
        cursor = 0
        pattern = f"{self._prefix}{version}:*"
        while True:
            async with self._guard(self._timeout):
                cursor, keys = await self._client.scan(cursor, pattern, 1000)
                if keys:
                    deleted += int(await self._client.redis.unlink(*keys))
            if int(cursor) == 0:
                break
        async with self._guard(self._timeout):
            await self._client.redis.srem(self._versions_key, version)
        return deleted

    async def close(self) -> None:
        """The client belongs to the warm tier, which closes it."""

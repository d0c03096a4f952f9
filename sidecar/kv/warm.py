"""The KV warm tier: demoted blocks as self-describing binary values in Redis.

Value layout (all integers big-endian):

    b"ICKV" | version u8 | key length u16 | key | payload length u32
    | XXH3-128(key || payload) 16 bytes | payload

The key material lets a reader prove the value is the block it asked for (a
value under the wrong Redis key, or from another scope, is refused), and the
checksum catches torn or corrupted values. Keys are grouped per model version
(`{prefix}kv:{version_tag}:{block key hex}`) so a whole version can be dropped
with one SCAN; `{prefix}kv:versions` remembers which versions have values.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Protocol, cast

import redis.asyncio as aioredis
import xxhash

from sidecar.kv.layout import BlockKey
from sidecar.redis_client import RedisGuard

MAGIC = b"ICKV"
FORMAT_VERSION = 2
_HEAD = struct.Struct(">4sBH")
_LEN = struct.Struct(">I")
_SUM_BYTES = 16


def _checksum(key: bytes, payload: bytes | memoryview) -> bytes:
    # XXH3-128 runs at memory speed (~10x BLAKE3 here): it guards against torn or
    # corrupted values; a value under the wrong key is caught by the key material.
    h = xxhash.xxh3_128(key)
    h.update(payload)
    return h.digest()


def encode_block(key: BlockKey, payload: bytes | memoryview) -> bytes:
    """The stored value for one block."""
    return b"".join(
        (
            _HEAD.pack(MAGIC, FORMAT_VERSION, len(key)),
            key,
            _LEN.pack(len(payload)),
            _checksum(key, payload),
            payload,
        )
    )


def decode_block(key: BlockKey, value: bytes) -> memoryview | None:
    """The payload (a view into value) if value is an intact block stored under key, else None."""
    try:
        magic, version, key_len = _HEAD.unpack_from(value, 0)
        at = _HEAD.size
        if magic != MAGIC or version != FORMAT_VERSION or value[at : at + key_len] != key:
            return None
        at += key_len
        (length,) = _LEN.unpack_from(value, at)
        at += _LEN.size
        digest = value[at : at + _SUM_BYTES]
        at += _SUM_BYTES
    except struct.error:
        return None
    payload = memoryview(value)[at:]
    if len(payload) != length or _checksum(key, payload) != digest:
        return None
    return payload


class KvWarmStore(Protocol):
    """Where demoted blocks live. Methods raise TierUnavailable when the backend fails."""

    async def put_many(
        self, version: str, items: Sequence[tuple[BlockKey, bytes]], ttl_ms: int
    ) -> None:
        """Store encoded values (see encode_block) under a version."""
        ...

    async def get_many(self, version: str, keys: Sequence[BlockKey]) -> list[bytes | None]:
        """Raw values in request order; None where absent."""
        ...

    async def versions(self) -> list[str]:
        """Versions that may have values."""
        ...

    async def note_version(self, version: str) -> None:
        """Remember that a version may have values."""
        ...

    async def drop_version(self, version: str) -> int:
        """Delete every value of a version; returns how many were deleted."""
        ...

    async def close(self) -> None:
        """Release connections this store owns."""
        ...


class RedisKvWarmStore:
    """KvWarmStore on Redis (the sidecar's own client, shared with the result warm tier)."""

    def __init__(self, client: aioredis.Redis, *, key_prefix: str, timeout_s: float) -> None:
        self._client = client
        self._prefix = f"{key_prefix}kv:"
        self._versions_key = f"{self._prefix}versions"
        self._timeout = timeout_s
        self._guard = RedisGuard("redis KV warm tier")

    def redis_key(self, version: str, key: BlockKey) -> bytes:
        """Where a block of a version lives."""
        return f"{self._prefix}{version}:{key.hex()}".encode()

    async def put_many(
        self, version: str, items: Sequence[tuple[BlockKey, bytes]], ttl_ms: int
    ) -> None:
        """SET PX each value in one pipelined round trip."""
        if not items:
            return
        async with self._guard(self._timeout):
            pipe = self._client.pipeline(transaction=False)
            for key, value in items:
                pipe.set(self.redis_key(version, key), value, px=max(ttl_ms, 1))
            await pipe.execute()

    async def get_many(self, version: str, keys: Sequence[BlockKey]) -> list[bytes | None]:
        """One MGET (the caller bounds the time)."""
        if not keys:
            return []
        async with self._guard(self._timeout):
            values = await self._client.mget([self.redis_key(version, k) for k in keys])
        return cast(list[bytes | None], values)

    async def versions(self) -> list[str]:
        """Members of the versions set."""
        async with self._guard(self._timeout):
            members = await self._client.smembers(self._versions_key)
        return sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)

    async def note_version(self, version: str) -> None:
        """SADD to the versions set."""
        async with self._guard(self._timeout):
            await self._client.sadd(self._versions_key, version)

    async def drop_version(self, version: str) -> int:
        """SCAN the version's keys and UNLINK them page by page, then forget the version."""
        deleted = 0
        cursor = 0
        pattern = f"{self._prefix}{version}:*"
        while True:
            async with self._guard(self._timeout):
                cursor, keys = await self._client.scan(cursor=cursor, match=pattern, count=1000)
                if keys:
                    deleted += int(await self._client.unlink(*keys))
            if int(cursor) == 0:
                break
        async with self._guard(self._timeout):
            await self._client.srem(self._versions_key, version)
        return deleted

    async def close(self) -> None:
        """The client belongs to the warm tier, which closes it."""


class MemoryKvWarmStore:
    """KvWarmStore in a dict (no TTL): the fake for unit tests."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, BlockKey], bytes] = {}
        self.known: set[str] = set()

    async def put_many(
        self, version: str, items: Sequence[tuple[BlockKey, bytes]], ttl_ms: int
    ) -> None:
        """Store each value."""
        for key, value in items:
            self.values[(version, key)] = value

    async def get_many(self, version: str, keys: Sequence[BlockKey]) -> list[bytes | None]:
        """Values or None."""
        return [self.values.get((version, k)) for k in keys]

    async def versions(self) -> list[str]:
        """Known versions."""
        return sorted(self.known)

    async def note_version(self, version: str) -> None:
        """Remember the version."""
        self.known.add(version)

    async def drop_version(self, version: str) -> int:
        """Delete the version's values."""
        doomed = [k for k in self.values if k[0] == version]
        for k in doomed:
            del self.values[k]
        self.known.discard(version)
        return len(doomed)

    async def close(self) -> None:
        """Nothing to close."""

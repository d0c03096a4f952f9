"""HitStore on Redis, shared by the fleet (so a v2 pod sees what v1 pods recorded).

Layout per model version V (h = first 16 hex digits of SHA-256(V), in a hash tag
so that one version's keys share a Cluster slot):
    {prefix}{hits:h}:rank        sorted set, member = key digest hex, score = sampled hits
    {prefix}{hits:h}:q:<digest>  the replayable request (JSON), expiring with the ranking
One Lua script counts, stores and trims, so a record is never half-written.
"""

from __future__ import annotations

import hashlib
from typing import cast

import redis.asyncio as aioredis

from sidecar.backends.redis.client import RedisGuard
from sidecar.keys import KeyDigest
from sidecar.prewarm.hits import HotRequest

_RECORD = """
redis.call('ZINCRBY', KEYS[1], 1, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
local n = redis.call('ZCARD', KEYS[1])
local keep = tonumber(ARGV[4])
if n > keep + math.floor(keep / 4) then
  local drop = redis.call('ZRANGE', KEYS[1], 0, n - keep - 1)
  for _, m in ipairs(drop) do redis.call('DEL', ARGV[5] .. m) end
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - keep - 1)
end
return n
"""


class RedisHitStore:
    """HitStore on a redis.asyncio client (normally the warm tier's)."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        key_prefix: str,
        max_per_version: int,
        ttl_ms: int,
        timeout_s: float,
    ) -> None:
        self._client = client
        self._prefix = key_prefix
        self._max = max_per_version
        self._ttl_ms = ttl_ms
        self._timeout_s = timeout_s
        # Its own circuit: a failing record must not pause cache reads or writes.
        self._guard = RedisGuard("redis hit records")
        self._record = client.register_script(_RECORD)

    def _base(self, model_version: str) -> str:
        h = hashlib.sha256(model_version.encode("utf-8")).hexdigest()[:16]
        return f"{self._prefix}{{hits:{h}}}:"

    async def record(self, model_version: str, digest: KeyDigest, request: bytes) -> None:
        """ZINCRBY + SET PX + trim, atomically."""
        base = self._base(model_version)
        member = digest.hex()
        async with self._guard(self._timeout_s):
            await self._record(
                keys=[base + "rank", base + "q:" + member],
                args=[member, request, self._ttl_ms, self._max, base + "q:"],
            )

    async def top(self, model_version: str, k: int) -> list[HotRequest]:
        """ZREVRANGE WITHSCORES, then MGET of the requests."""
        if k <= 0:
            return []
        base = self._base(model_version)
        async with self._guard(self._timeout_s):
            ranked = cast(
                list[tuple[bytes, float]],
                await self._client.zrevrange(base + "rank", 0, k - 1, withscores=True),
            )
            if not ranked:
                return []
            requests = cast(
                list[bytes | None],
                await self._client.mget([base + "q:" + m.decode() for m, _ in ranked]),
            )
        return [
            HotRequest(KeyDigest(bytes.fromhex(m.decode())), int(score), req)
            for (m, score), req in zip(ranked, requests, strict=True)
        ]

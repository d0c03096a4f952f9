"""HitStore on Redis, shared by the fleet (so a v2 pod sees what v1 pods recorded).

Layout per model version V (h = first 16 hex digits of SHA-256(V), in a hash tag
so that one version's keys share a Cluster slot):
    {prefix}{hits:h}:rank        sorted set, member = key digest hex, score = counted hits
    {prefix}{hits:h}:q:<digest>  tag 32 B | the hit record (JSON: key + model-server
                                 request), written by attach (SET PX), its expiry refreshed
                                 by each merge that counts a hit of it
The tag is the keyed BLAKE3 of (model version, digest, record) under the fleet's
"hit-record" key: a record planted or altered without the fleet secret, or moved under
another digest or version, reads as absent (prewarm skips it as not replayable) and is
counted in `rejected_records`. The ranking's counts are not authenticated: a writer can
reorder which authentic records are replayed first, not what is replayed.
One Lua script adds a merge batch's counts, refreshes and trims (one call per batch of at
most hits.MERGE_BATCH digests: bounded work per call). A record lives as long as its stored
result until a counted hit extends it to the record TTL; records outlive a trim of their
digest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import cast

import structlog

from sidecar.backends.redis.backend import RedisBackend
from sidecar.backends.redis.client import RedisGuard
from sidecar.keys import KeyDigest
from sidecar.macs import LOCAL, TAG_LEN, FleetKeys
from sidecar.prewarm.hits import HotRequest

log = structlog.get_logger("infercache.prewarm.hits")

# KEYS[1] = ranking, KEYS[2..] = records; ARGV = ttl_ms, keep, then digest, count pairs.
_MERGE = """
local ttl, keep = ARGV[1], tonumber(ARGV[2])
for i = 3, #ARGV, 2 do
  redis.call('ZINCRBY', KEYS[1], ARGV[i + 1], ARGV[i])
  redis.call('PEXPIRE', KEYS[(i - 1) / 2 + 1], ttl)
end
redis.call('PEXPIRE', KEYS[1], ttl)
local n = redis.call('ZCARD', KEYS[1])
if n > keep + math.floor(keep / 4) then
  -- A cut digest keeps its record until it expires: it is attached only by a Store.
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - keep - 1)
end
return n
"""


class RedisHitStore:
    """HitStore on the warm tier's Redis backend (one server or a cluster)."""

    def __init__(
        self,
        client: RedisBackend,
        *,
        key_prefix: str,
        max_per_version: int,
        ttl_ms: int,
        timeout_s: float,
        keys: FleetKeys = LOCAL,
    ) -> None:
        """`keys`: the fleet's MAC keys, which seal and verify every record."""
        self._keys = keys
        self.rejected_records = 0
        """Records read back that failed their tag (treated as absent)."""
        self._client = client.redis
        self._prefix = key_prefix
        self._max = max_per_version
        self._ttl_ms = ttl_ms
        self._timeout_s = timeout_s
        # Its own circuit: a failing record must not pause cache reads or writes.
        self._guard = RedisGuard("redis hit records")
        self._merge = client.register_script(_MERGE)

    def _base(self, model_version: str) -> str:
        h = hashlib.sha256(model_version.encode("utf-8")).hexdigest()[:16]
        return f"{self._prefix}{{hits:{h}}}:"

    async def merge(self, model_version: str, counts: Sequence[tuple[KeyDigest, int]]) -> None:
        """ZINCRBY of each count + PEXPIRE of the ranking and the records + trim, atomically."""
        if not counts:
            return
        base = self._base(model_version)
        members = [digest.hex() for digest, _ in counts]
        args: list[int | str] = [self._ttl_ms, self._max]
        for member, (_, n) in zip(members, counts, strict=True):
            args += [member, n]
        async with self._guard(self._timeout_s):
            await self._merge(keys=[base + "rank", *(base + "q:" + m for m in members)], args=args)

    async def attach(
        self, model_version: str, digest: KeyDigest, request: bytes, ttl_ms: int
    ) -> None:
        """SET PX of the record, for min(ttl_ms, the record TTL)."""
        key = self._base(model_version) + "q:" + digest.hex()
        tag = self._keys.sign("hit-record", model_version.encode(), digest, request)
        async with self._guard(self._timeout_s):
            await self._client.set(key, tag + request, px=max(1, min(ttl_ms, self._ttl_ms)))

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
        out = []
        for (m, score), value in zip(ranked, requests, strict=True):
            digest = KeyDigest(bytes.fromhex(m.decode()))
            out.append(HotRequest(digest, int(score), self._open(model_version, digest, value)))
        return out

    async def record(self, model_version: str, digest: KeyDigest) -> bytes | None:
        """GET of the record, its tag verified (shadow verification of gRPC hits)."""
        key = self._base(model_version) + "q:" + digest.hex()
        async with self._guard(self._timeout_s):
            value = cast(bytes | None, await self._client.get(key))
        return self._open(model_version, digest, value)

    def _open(self, model_version: str, digest: KeyDigest, value: bytes | None) -> bytes | None:
        """The record a stored value holds if its tag verifies for this version and digest."""
        if value is None:
            return None
        tag, record = value[:TAG_LEN], value[TAG_LEN:]
        if len(value) > TAG_LEN and self._keys.verify(
            "hit-record", tag, model_version.encode(), digest, record
        ):
            return record
        self.rejected_records += 1
        log.warning("hit_record_rejected", digest=digest.hex(), reason="forged")
        return None

"""The Redis warm tier: shared by every sidecar of a fleet, batched with MGET and pipelines.

Failure policy: every call has a deadline (short for reads, longer for writes).
A failure opens a small circuit for a growing pause (capped at one second) during
which calls fail at once instead of each paying the deadline; the first call
after the pause probes Redis again, so the tier heals without a restart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError

from sidecar.errors import TierTimeout, TierUnavailable
from sidecar.keys import KeyDigest
from sidecar.tiers.base import WarmItem

_MIN_PAUSE_S = 0.05
_MAX_PAUSE_S = 1.0


class RedisWarmTier:
    """WarmTier on one Redis (or a Redis-compatible proxy) via redis.asyncio + hiredis."""

    name = "redis"

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = "ic:v1:",
        read_timeout_s: float = 0.05,
        write_timeout_s: float = 0.5,
        max_connections: int = 64,
    ) -> None:
        self._prefix = key_prefix.encode()
        self._read_timeout = read_timeout_s
        self._write_timeout = write_timeout_s
        # One quick retry covers a connection that Redis closed while idle; the
        # deadline below bounds the whole attempt anyway.
        self._redis = aioredis.Redis.from_url(
            url,
            socket_connect_timeout=max(read_timeout_s, 0.05),
            socket_timeout=write_timeout_s,
            retry=Retry(ExponentialBackoff(cap=0.02, base=0.002), 1),
            max_connections=max_connections,
            health_check_interval=0,
        )
        self._pause_until = 0.0
        self._pause_s = _MIN_PAUSE_S
        self.failures = 0

    def redis_key(self, digest: KeyDigest) -> bytes:
        """The Redis key under which a digest's entry lives."""
        return self._prefix + b"r:" + digest.hex().encode()

    @asynccontextmanager
    async def _guard(self, deadline_s: float) -> AsyncIterator[None]:
        """Map Redis errors and deadline overruns to TierUnavailable, and run the circuit."""
        now = time.monotonic()
        if now < self._pause_until:
            raise TierUnavailable("redis: recently failed; pausing before the next attempt")
        try:
            async with asyncio.timeout(deadline_s):
                yield
        except TimeoutError as exc:
            self._trip()
            raise TierTimeout(f"redis: no answer within {deadline_s * 1000:.0f} ms") from exc
        except (RedisError, OSError) as exc:
            self._trip()
            raise TierUnavailable(f"redis: {type(exc).__name__}: {exc}") from exc
        self._pause_s = _MIN_PAUSE_S

    def _trip(self) -> None:
        self.failures += 1
        self._pause_until = time.monotonic() + self._pause_s
        self._pause_s = min(self._pause_s * 2, _MAX_PAUSE_S)

    async def get_many(self, digests: Sequence[KeyDigest]) -> list[bytes | None]:
        """MGET in one round trip."""
        if not digests:
            return []
        async with self._guard(self._read_timeout):
            values: list[bytes | None] = await self._redis.mget(  # type: ignore[assignment]
                [self.redis_key(d) for d in digests]
            )
        return values

    async def put_many(self, items: Sequence[WarmItem]) -> None:
        """SET PX for each item in one pipelined round trip."""
        if not items:
            return
        async with self._guard(self._write_timeout):
            pipe = self._redis.pipeline(transaction=False)
            for it in items:
                pipe.set(self.redis_key(it.digest), it.value, px=max(it.ttl_ms, 1))
            await pipe.execute()

    async def delete_many(self, digests: Sequence[KeyDigest]) -> None:
        """UNLINK (non-blocking delete on the Redis side)."""
        if not digests:
            return
        async with self._guard(self._write_timeout):
            await self._redis.unlink(*[self.redis_key(d) for d in digests])

    async def ping(self) -> None:
        """PING within the read deadline."""
        async with self._guard(max(self._read_timeout, 0.2)):
            await self._redis.ping()

    async def close(self) -> None:
        """Close the pool."""
        await self._redis.aclose()

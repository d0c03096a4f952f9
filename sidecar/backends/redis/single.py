"""RedisBackend on one Redis server (or a Redis-compatible proxy)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import redis.asyncio as aioredis
import structlog
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from sidecar.backends.redis.link import RedisLink

log = structlog.get_logger("infercache.redis")


def pack_args(args: Sequence[bytes]) -> bytes:
    """RESP for one command of bytes arguments: what redis-py's pack_command makes of
    them, cheaper."""
    parts = [b"*%d\r\n" % len(args)]
    parts += [b"$%d\r\n%s\r\n" % (len(a), a) for a in args]
    return b"".join(parts)


def pack_mget(keys: list[bytes]) -> bytes:
    """RESP for `MGET keys...`."""
    return pack_args([b"MGET", *keys])


def wait_command(replicas: int, local_aof: bool, timeout_ms: int) -> tuple[str | int, ...]:
    """WAITAOF 1 N T (the primary's AOF and N replicas'), else WAIT N T."""
    if local_aof:
        return ("WAITAOF", 1, replicas, timeout_ms)
    return ("WAIT", replicas, timeout_ms)


def parse_acks(reply: Any, local_aof: bool) -> tuple[int, int]:
    """(local fsyncs, replicas) from wait_command's reply (local is 1 for WAIT)."""
    if local_aof:
        local, remote = (int(x) for x in reply)
        return local, remote
    return 1, int(reply)


class ConnectionReader:
    """One command at a time on a connection of its own, bypassing the client's per-call
    machinery (the warm tier's hot path: its MGETs, and its read-and-hold script): a
    RedisLink (link.py), which redis-py opens and authenticates.

    The caller bounds each call (the connection has no socket timeout of its own). Any
    error or cancellation mid-call drops the connection, so a late reply can never be
    taken for the next read's. A connection found closed (e.g. by Redis after an idle
    timeout) is replaced once, within the same deadline.
    """

    def __init__(self, redis: aioredis.Redis) -> None:
        self._redis = redis
        self._link: RedisLink | None = None

    async def get(self, keys: list[bytes]) -> list[bytes | None]:
        """MGET keys (atomic: one server)."""
        return cast(list[bytes | None], await self.call(pack_mget(keys)))

    async def call(self, packed: bytes) -> Any:
        """Send one packed command, return its reply (a ResponseError is raised)."""
        for attempt in range(2):
            link = self._link
            reused = link is not None and link.usable
            try:
                if link is None or not reused:
                    if link is not None:
                        link.close()
                    self._link = None
                    conn = self._redis.connection_pool.make_connection()  # type: ignore[no-untyped-call]
                    link = self._link = await RedisLink.open(conn)
                reply = await link.call(packed)
            except BaseException as exc:
                if link is not None:
                    link.close()
                self._link = None
                if attempt == 0 and reused and isinstance(exc, RedisConnectionError):
                    continue
                raise
            if isinstance(reply, ResponseError):
                raise reply
            return reply
        raise AssertionError("unreachable")

    async def close(self) -> None:
        """Close the reader's connection."""
        link, self._link = self._link, None
        if link is not None:
            link.close()


class SingleRedis:
    """RedisBackend on one server: MGET, SCAN, WAIT and PUBLISH as they are."""

    cluster = False
    publish_command = "PUBLISH"

    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis

    def register_script(self, script: str) -> AsyncScript:
        """EVALSHA (loaded on NOSCRIPT)."""
        return self.redis.register_script(script)

    def reader(self) -> ConnectionReader:
        """A reader on its own connection."""
        return ConnectionReader(self.redis)

    async def get_many(self, keys: Sequence[bytes | str]) -> list[bytes | None]:
        """One MGET."""
        if not keys:
            return []
        return cast(list[bytes | None], await self.redis.mget(list(keys)))

    async def scan(self, cursor: int, match: str, count: int) -> tuple[int, list[bytes]]:
        """SCAN as is."""
        cursor, found = cast(
            tuple[int, list[bytes]], await self.redis.scan(cursor=cursor, match=match, count=count)
        )
        return int(cursor), found

    async def dbsize(self) -> int:
        """DBSIZE."""
        return int(await self.redis.dbsize())

    async def wait_replicas(
        self, probe_key: str, replicas: int, local_aof: bool, timeout_ms: int
    ) -> tuple[int, int]:
        """SET then WAIT / WAITAOF in one pipeline (one connection)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(probe_key, "1")
        pipe.execute_command(*wait_command(replicas, local_aof, timeout_ms))
        return parse_acks((await pipe.execute())[1], local_aof)

    async def messages(self, channel: str) -> AsyncIterator[bytes]:
        """SUBSCRIBE; ends (to be restarted) on any error."""
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(channel)
            while True:
                msg = await pubsub.get_message(timeout=1.0)
                if msg is not None and msg.get("type") == "message":
                    yield msg["data"]
        finally:
            try:
                await cast(Any, pubsub).aclose()
            except Exception:  # closing a broken connection may fail; nothing to do
                log.debug("pubsub_close_failed")

    async def aclose(self) -> None:
        """Close the pool."""
        await self.redis.aclose()

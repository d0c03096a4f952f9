"""What backends/redis/link.py takes from redis-py's private insides, checked against the
installed redis-py and a real redis-server.

RedisLink lets redis-py open and authenticate a connection, then drives its transport
itself through `AbstractConnection._writer` (a StreamWriter whose `.transport` it takes
over), `._reader` (a StreamReader whose `._buffer` must be empty after the handshake) and
`._close()`. None of these is public API: a redis-py release may rename or reshape them
(pyproject pins `redis<9`). These tests fail, naming the attribute, when the installed
release no longer has them, before the hot path breaks in production.
"""

from __future__ import annotations

import asyncio

import pytest
import redis
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection

from sidecar.backends.redis.link import RedisLink
from tests.support.processes import RedisServer

pytestmark = pytest.mark.redis


async def test_a_connected_connection_has_the_streams_the_link_takes_over(
    redis_server: RedisServer,
) -> None:
    client = Redis.from_url(redis_server.url)
    conn = client.connection_pool.make_connection()  # type: ignore[no-untyped-call]
    try:
        assert isinstance(conn, AbstractConnection)
        await conn.connect()  # type: ignore[no-untyped-call]
        writer = getattr(conn, "_writer", None)
        reader = getattr(conn, "_reader", None)
        assert isinstance(writer, asyncio.StreamWriter), (
            f"redis {redis.__version__}: AbstractConnection._writer is {writer!r}"
        )
        assert isinstance(reader, asyncio.StreamReader), (
            f"redis {redis.__version__}: AbstractConnection._reader is {reader!r}"
        )
        assert isinstance(getattr(reader, "_buffer", None), bytearray), (
            "asyncio.StreamReader._buffer is gone"
        )
        assert writer.transport is not None
        assert callable(getattr(conn, "_close", None)), (
            f"redis {redis.__version__}: AbstractConnection._close is gone"
        )
    finally:
        await conn.disconnect()
        await client.aclose()


async def test_the_link_answers_commands_on_a_connection_redis_py_opened(
    redis_server: RedisServer,
) -> None:
    """End to end through the private path: replies in order, an error reply as a
    ResponseError instance, and close() failing what is still awaited."""
    client = Redis.from_url(redis_server.url)
    conn = client.connection_pool.make_connection()  # type: ignore[no-untyped-call]
    link = await RedisLink.open(conn)
    try:
        pong, missing, error = await asyncio.gather(
            link.call(b"*1\r\n$4\r\nPING\r\n"),
            link.call(b"*2\r\n$3\r\nGET\r\n$7\r\nmissing\r\n"),
            link.call(b"*1\r\n$11\r\nNOT-A-VERB!\r\n"),
        )
        assert pong == b"PONG"
        assert missing is None
        assert isinstance(error, redis.exceptions.ResponseError)
        assert link.usable
        hanging = link.call(b"*3\r\n$5\r\nBLPOP\r\n$5\r\nnokey\r\n$1\r\n5\r\n")
        link.close()
        with pytest.raises(redis.exceptions.ConnectionError):
            await hanging
        assert not link.usable
    finally:
        link.close()
        await client.aclose()

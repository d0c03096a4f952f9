"""One Redis connection driven directly: commands written to the transport, replies parsed
by hiredis as they arrive, for the hot path's one-command-at-a-time calls (ConnectionReader).

Why not redis-py's connection calls: per round trip they cost more CPU than the round
trip itself takes (at concurrency 1 through the gateway: 65 us in send_packed_command's
writelines and drain, 90 us to read a reply Redis sent in about 20 us, against ~10 us
to write a transport and a parse in the protocol's own callback).

Why the connection is still opened by redis-py: it knows every way the sidecar may be
configured to reach Redis (TCP or a unix socket, TLS, AUTH with or without a user,
SELECT, a client name, a credential provider). Once its handshake is done, the
transport is taken over: the link installs itself as the transport's protocol, keeps
redis-py's connection object alive (its stream writer would close the transport when
collected), and from then on nothing of redis-py reads or writes on it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, cast

import hiredis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, NoScriptError, ResponseError


def _reply_error(message: str) -> ResponseError:
    # What the hot path tells apart: a script Redis does not know (load it, send again);
    # every other error reply is a failed call (the guard maps any RedisError).
    if message.startswith("NOSCRIPT"):
        return NoScriptError(message)
    return ResponseError(message)


class RedisLink(asyncio.Protocol):
    """A connected, authenticated Redis connection taken over from redis-py (see the
    module docstring). Replies come back in the order the commands went out."""

    def __init__(self, conn: AbstractConnection, transport: asyncio.Transport) -> None:
        self._conn = conn  # kept: its stream writer closes the transport when collected
        self._transport = transport
        self._parser = hiredis.Reader(protocolError=InvalidResponse, replyError=_reply_error)
        self._waiting: deque[asyncio.Future[Any]] = deque()
        self._lost: BaseException | None = None

    @classmethod
    async def open(cls, conn: AbstractConnection) -> RedisLink:
        """Let redis-py connect `conn` (handshake included), then take its transport."""
        await conn.connect()  # type: ignore[no-untyped-call]
        writer = conn._writer
        reader = conn._reader
        if writer is None or reader is None:
            raise RedisConnectionError("redis-py connected without a stream")
        if reader.at_eof() or len(cast(Any, reader)._buffer):
            # Bytes nobody asked for (or the server gone) right after the handshake.
            conn._close()  # type: ignore[no-untyped-call]
            raise RedisConnectionError("unexpected bytes after the handshake")
        # uvloop's transports are not asyncio.Transport subclasses; they behave as one.
        transport = cast(asyncio.Transport, writer.transport)
        link = cls(conn, transport)
        transport.set_protocol(link)
        return link

    @property
    def usable(self) -> bool:
        """Open, as far as the loop has seen."""
        return self._lost is None and not self._transport.is_closing()

    def call(self, packed: bytes) -> asyncio.Future[Any]:
        """Write one packed command; the future gets its reply (an error reply as a
        ResponseError instance, which the caller raises)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self._lost is not None:
            future.set_exception(self._lost)
            return future
        self._waiting.append(future)
        self._transport.write(packed)
        return future

    def close(self) -> None:
        """Close the connection; replies still awaited fail."""
        self._fail(RedisConnectionError("connection closed by the sidecar"))

    # asyncio.Protocol

    def data_received(self, data: bytes) -> None:
        self._parser.feed(data)
        while True:
            try:
                reply = self._parser.gets()
            except InvalidResponse as exc:
                self._fail(RedisConnectionError(f"malformed reply: {exc}"))
                return
            if reply is False:
                return
            if not self._waiting:
                self._fail(RedisConnectionError("a reply nobody asked for"))
                return
            future = self._waiting.popleft()
            if not future.done():
                future.set_result(reply)

    def eof_received(self) -> bool:
        return False  # close: Redis never half-closes a connection it keeps serving

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f"{type(exc).__name__}: {exc}" if exc else "closed by the server"
        self._fail(RedisConnectionError(f"connection lost ({reason})"))

    def pause_writing(self) -> None:
        pass  # one command at a time: the reply cannot come before the command is out

    def resume_writing(self) -> None:
        pass

    def _fail(self, exc: BaseException) -> None:
        """The link's end, whatever the reason: closed, and known closed to redis-py (an
        open connection object warns when collected)."""
        if self._lost is None:
            self._lost = exc
        # Through redis-py's stream writer, which closes the transport.
        self._conn._close()  # type: ignore[no-untyped-call]
        self._transport.close()
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_exception(exc)

"""HTTP/1.1 to the model server on kept-alive connections: the request written in one
piece, the answer parsed by httptools (the parser uvicorn serves the gateway with) and
handed over as it arrives.

Why not a general client: at concurrency 1 against a model server with a fixed 20 ms
latency, aiohttp's client added 0.3-0.7 ms per call over a bare socket on this machine
(scratch/clientlat, 3 x 150 calls each: raw socket 20.6-21.1 ms p50, aiohttp 21.1-21.8,
httpx 22.0-22.5), and a proxy on it cost 1.0 ms against 0.26 ms for the same proxy on
this module's approach. The gateway forwards every miss, with a goal of 1 ms in all.
The gateway needs only this much: one base URL, POST and GET, a body known in advance,
an answer read in order.

What an answer may be: Content-Length, chunked, or (no length, not chunked) until the
server closes. A connection is used again only after a complete answer the server did
not mark `Connection: close`; one that is idle past `keepalive_s` is dropped. A kept
connection the server had closed meanwhile (nothing of the answer arrived) is replaced
once and the request sent again. Reading stops (TCP backpressure) while more than
HIGH_WATER bytes of the answer wait for the caller.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import cast
from urllib.parse import urlsplit

import httptools

HIGH_WATER = 1024 * 1024
LOW_WATER = 256 * 1024


class UpstreamClosed(ConnectionError):
    """The connection ended before the answer was complete (or could not be made)."""


class BadAnswer(ValueError):
    """The server's bytes are not an HTTP/1.1 answer."""


class Exchange(asyncio.Protocol):
    """One connection and the answer being read on it (one request at a time)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._head: asyncio.Future[None] | None = None
        self._wake = asyncio.Event()
        self._pieces: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.complete = False
        self._keep = False
        self.error: BaseException | None = None
        self.received = False
        """Some of the answer arrived (a request that got none may be sent again)."""
        self.idle_since = time.monotonic()

    @property
    def usable(self) -> bool:
        """Open and between answers (fit to carry the next request)."""
        return self.transport is not None and not self.transport.is_closing() and not self.error

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; they behave as one.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(BadAnswer(f"malformed answer: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.complete:
            return
        if exc is None and self._head is None and self._until_close():
            # An answer without length or chunking ends where the connection does.
            self.on_message_complete()
            return
        self._fail(UpstreamClosed(f"connection closed mid-answer: {exc or 'EOF'}"))

    def pause_writing(self) -> None:  # the request is written once; nothing to pause
        pass

    def resume_writing(self) -> None:
        pass

    # httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        # Asked here: after the message the parser has reset and says False.
        self._keep = self._parser.should_keep_alive()
        if self._head is not None and not self._head.done():
            self._head.set_result(None)
        self._head = None

    def on_body(self, body: bytes) -> None:
        self._pieces.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake.set()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake.set()

    # the caller's side

    def send(self, request: bytes) -> asyncio.Future[None]:
        """Write a whole request; the future is done when the answer's head arrived."""
        assert self.transport is not None
        self._parser = httptools.HttpResponseParser(self)
        self.headers, self.status, self.complete, self.received = {}, 0, False, False
        self._keep = False
        self._pieces.clear()
        self._buffered = 0
        self._head = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self._head

    async def pieces(self) -> AsyncIterator[bytes]:
        """The answer's body as it arrives; raises the connection's failure."""
        while True:
            while self._pieces:
                piece = self._pieces.popleft()
                self._buffered -= len(piece)
                if self._paused and self._buffered < LOW_WATER and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                yield piece
            if self.complete:
                return
            if self.error is not None:
                raise self.error
            self._wake.clear()
            await self._wake.wait()

    @property
    def drained(self) -> bool:
        """The whole answer arrived and every piece of it was handed over."""
        return self.complete and not self._pieces

    @property
    def keep_alive(self) -> bool:
        """May carry another request after this complete answer."""
        return self.complete and self._keep and self.usable

    def close(self) -> None:
        """Drop the connection (an answer not read to its end cannot be reused)."""
        if self.transport is not None:
            self.transport.close()

    def _until_close(self) -> bool:
        return (
            b"content-length" not in self.headers
            and b"chunked" not in self.headers.get(b"transfer-encoding", b"").lower()
            and self.status not in (204, 304)
            and self.status >= 200
        )

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        if self._head is not None and not self._head.done():
            self._head.set_exception(exc)
            self._head = None
        self._wake.set()


class ConnectionPool:
    """Kept-alive connections to one origin, at most `max_connections` at once."""

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int,
        connect_timeout_s: float,
        keepalive_s: float = 30.0,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        default_port = self.port == (443 if self._ssl else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.authority = host if default_port else f"{host}:{self.port}"
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: list[Exchange] = []
        self._connect_timeout_s = connect_timeout_s
        self._keepalive_s = keepalive_s

    async def acquire(self, fresh: bool = False) -> tuple[Exchange, bool]:
        """A connection for one request and whether it was kept from an earlier one."""
        await self._slots.acquire()
        try:
            now = time.monotonic()
            while self._idle and not fresh:
                conn = self._idle.pop()
                if conn.usable and now - conn.idle_since < self._keepalive_s:
                    return conn, True
                conn.close()
            return await self._connect(), False
        except BaseException:
            self._slots.release()
            raise

    def release(self, conn: Exchange) -> None:
        """Give a connection back: kept if its answer was complete, else closed."""
        self._slots.release()
        if conn.keep_alive:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()

    async def _connect(self) -> Exchange:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _, conn = await loop.create_connection(
                    Exchange,
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl else None,
                )
        except TimeoutError as exc:
            raise UpstreamClosed(f"no connection within {self._connect_timeout_s:g} s") from exc
        except OSError as exc:
            raise UpstreamClosed(f"cannot connect: {exc}") from exc
        return conn

    def close(self) -> None:
        """Close the kept connections."""
        for conn in self._idle:
            conn.close()
        self._idle.clear()

"""The model server behind the gateway (OpenAI-compatible HTTP), through kept-alive
connections (upstream_conn.py): each call bounded by the caller's overall deadline,
failures mapped to 502 / 504.

Why not a general HTTP client: the gateway forwards every miss, and its goal is <= 1 ms
of overhead per miss. httpx cost 0.75-1.7 ms of client CPU per call and aiohttp 0.3-0.7
ms of latency at concurrency 1 (docs/benchmarks.md, gateway); upstream_conn.py says why
this is enough for the one origin the gateway talks to.

Bodies are asked for uncompressed (`Accept-Encoding: identity`): the gateway forwards and
stores the bytes as they come, so an upstream that compresses anyway is decoded here
(gzip, deflate) and one whose encoding cannot be decoded is a 502, never bytes passed on
without the header that says how to read them.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sidecar.gateway.errors import HttpError
from sidecar.gateway.upstream_conn import BadAnswer, ConnectionPool, Exchange, UpstreamClosed

_GZIP = frozenset({"gzip", "x-gzip"})
_COMPRESSED = _GZIP | {"deflate"}
_DECODED = _COMPRESSED | {"", "identity"}


PASSED_HEADERS = frozenset({b"retry-after", b"retry-after-ms", b"x-request-id"})
"""End-to-end headers of the model server's answer a forwarded response carries (with
every x-ratelimit-*): what a client schedules its retries by, and the id to quote to
the model server's operator. Nothing hop-by-hop (RFC 9110 7.6.1), nothing else."""


@dataclass(frozen=True, slots=True)
class UpstreamReply:
    """An open upstream response: its status, content type and body as it arrives."""

    status: int
    content_type: str
    _conn: Exchange
    _encoding: str

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body, piece by piece as it arrives (decoded if it came compressed)."""
        decoder = _Decoder(self._encoding) if self._encoding in _COMPRESSED else None
        try:
            async for piece in self._conn.pieces():
                if decoder is None:
                    yield piece
                elif out := decoder.feed(piece):
                    yield out
            if decoder is not None and (tail := decoder.end()):
                yield tail
        except (UpstreamClosed, BadAnswer, zlib.error) as exc:
            # Cut off, malformed framing or a bad compressed stream.
            raise _unreachable(exc) from exc

    def passed_headers(self) -> list[tuple[bytes, bytes]]:
        """The answer's PASSED_HEADERS and x-ratelimit-* headers, as they came."""
        return [
            (name, value)
            for name, value in self._conn.headers.items()
            if name in PASSED_HEADERS or name.startswith(b"x-ratelimit-")
        ]

    def ended(self) -> bool:
        """Whether the body has arrived whole: the piece `pieces` gave last was its end.

        True only when the framing said so (Content-Length reached, the last chunk, a
        close-delimited body closed) and nothing is left to hand over; a body cut off
        is an error that `pieces` raises instead. A compressed body says False (its
        decoder may still hold a tail). A caller can then send the last piece as the
        end of its own response: one write to the client, not two.
        """
        return self._encoding not in _COMPRESSED and self._conn.drained


class _Decoder:
    """gzip or deflate (zlib-wrapped as RFC 9110 says, or raw as some servers send it)."""

    def __init__(self, encoding: str) -> None:
        self._gzip = encoding in _GZIP
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS if self._gzip else zlib.MAX_WBITS)
        self._started = False

    def feed(self, data: bytes) -> bytes:
        if not self._started and not self._gzip:
            self._started = True
            try:
                return self._z.decompress(data)
            except zlib.error:
                self._z = zlib.decompressobj(-zlib.MAX_WBITS)
        self._started = True
        return self._z.decompress(data)

    def end(self) -> bytes:
        tail = self._z.flush()
        if not self._z.eof:
            raise zlib.error("the compressed answer ends early")
        return tail


class Upstream:
    """Pooled connections to the model server at `base_url`."""

    def __init__(
        self, base_url: str, *, timeout_s: float, max_connections: int, api_key: str = ""
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._max_connections = max_connections
        self._api_key = api_key
        self._pool: ConnectionPool | None = None
        self._heads: dict[tuple[str, str], bytes] = {}
        self.in_flight = 0
        """Calls open now (shadow verification yields to them: sidecar/shadow)."""

    def _connections(self) -> ConnectionPool:
        # Made on first use: its semaphore belongs to the running event loop.
        if self._pool is None:
            self._pool = ConnectionPool(
                self.base_url,
                max_connections=self._max_connections,
                # Connecting must be quick; the answer itself may take the whole deadline
                # (the caller's asyncio.timeout bounds the call as a whole).
                connect_timeout_s=min(10.0, self.timeout_s),
            )
        return self._pool

    def _request(self, method: str, path: str, body: bytes | None) -> bytes:
        pool = self._connections()
        head = self._heads.get((method, path))
        if head is None:
            lines = [
                f"{method} {pool.prefix}{path} HTTP/1.1",
                f"Host: {pool.authority}",
                "Accept: */*",
                "Accept-Encoding: identity",
            ]
            if self._api_key:
                lines.append(f"Authorization: Bearer {self._api_key}")
            head = self._heads[(method, path)] = "\r\n".join(lines).encode("latin-1")
        if body is None:
            return head + b"\r\n\r\n"
        return b"%s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
            head,
            len(body),
            body,
        )

    async def _send(self, request: bytes) -> Exchange:
        """The connection whose answer's head arrived (a kept one found closed is
        replaced once: the server never saw the request)."""
        pool = self._connections()
        for attempt in range(2):
            try:
                conn, kept = await pool.acquire(fresh=attempt > 0)
            except UpstreamClosed as exc:
                raise _unreachable(exc) from exc
            try:
                await conn.send(request)
                return conn
            except (UpstreamClosed, BadAnswer) as exc:
                pool.release(conn)
                if attempt == 0 and kept and not conn.received:
                    continue
                raise _unreachable(exc) from exc
            except BaseException:
                conn.close()
                pool.release(conn)
                raise
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def call(
        self, method: str, path: str, body: bytes | None = None
    ) -> AsyncIterator[UpstreamReply]:
        """An open response to one request; HttpError 502/504 on failure.

        The caller reads it (`pieces`) inside the block and bounds the whole call with
        `timeout_s`. Leaving the block early (an error, a client gone) closes the
        connection instead of returning a half-read one to the pool.
        """
        self.in_flight += 1
        try:
            conn = await self._send(self._request(method, path, body))
        except BaseException:
            self.in_flight -= 1
            raise
        try:
            encoding = conn.headers.get(b"content-encoding", b"").decode("latin-1")
            encoding = encoding.strip().lower()
            if encoding not in _DECODED:
                raise HttpError(
                    502,
                    f"the model server answered in an encoding the gateway cannot read: {encoding}",
                    kind="server_error",
                    code="upstream_encoding",
                )
            kind = conn.headers.get(b"content-type", b"application/json").decode("latin-1")
            yield UpstreamReply(conn.status, kind, conn, encoding)
        finally:
            self.in_flight -= 1
            if not conn.complete:
                conn.close()
            self._connections().release(conn)

    async def close(self) -> None:
        """Close the kept connections."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def _timeout(timeout_s: float) -> HttpError:
    return HttpError(
        504,
        f"the model server did not answer within {timeout_s:g} s "
        "(INFERCACHE_GATEWAY_UPSTREAM_TIMEOUT_S)",
        kind="timeout_error",
        code="upstream_timeout",
    )


def _unreachable(exc: BaseException) -> HttpError:
    return HttpError(
        502,
        f"the model server could not be reached: {type(exc).__name__}",
        kind="server_error",
        code="upstream_unreachable",
    )

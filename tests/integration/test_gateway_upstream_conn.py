"""The gateway's HTTP/1.1 client (sidecar/gateway/upstream_conn.py, through Upstream)
against a real socket server whose bytes each test writes itself: the framings an
answer may have, connection reuse, a kept connection the server closed, and answers
that are cut off or not HTTP (502, never a complete-looking body)."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from sidecar.gateway.errors import HttpError
from sidecar.gateway.upstream import Upstream

Answer = Callable[[bytes], list[bytes]]
"""From a request's bytes, the writes that answer it (b"" = close the connection)."""


@dataclass
class RawServer:
    """A TCP server answering each request with the writes `answer` gives."""

    answer: Answer
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                for piece in self.answer(request):
                    if piece == b"":
                        writer.close()
                        return
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.01)  # separate reads on the client's side
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


Serve = Callable[[Answer], Awaitable[tuple["RawServer", Upstream]]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Start a RawServer with an answer, and an Upstream in front of it (closed after)."""
    servers: list[asyncio.Server] = []
    clients: list[Upstream] = []

    async def start(answer: Answer) -> tuple[RawServer, Upstream]:
        raw = RawServer(answer)
        server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
        raw.port = server.sockets[0].getsockname()[1]
        servers.append(server)
        up = Upstream(f"http://127.0.0.1:{raw.port}/base", timeout_s=5, max_connections=4)
        clients.append(up)
        return raw, up

    yield start
    for up in clients:
        await up.close()
    for server in servers:
        server.close()


async def _get(up: Upstream, body: bytes = b'{"q": 1}') -> tuple[int, str, bytes, bool]:
    async with up.call("POST", "/v1/chat/completions", body) as reply:
        pieces = [p async for p in reply.pieces()]
        return reply.status, reply.content_type, b"".join(pieces), reply.ended()


def _length(body: bytes, extra: bytes = b"") -> list[bytes]:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    return [head + b"Content-Length: %d\r\n%s\r\n" % (len(body), extra), body]


async def test_a_request_is_sent_whole_to_the_base_path(serve: Serve) -> None:
    raw, up = await serve(lambda _: _length(b'{"ok": true}'))
    assert await _get(up) == (200, "application/json", b'{"ok": true}', True)
    request = raw.requests[0]
    assert request.startswith(b"POST /base/v1/chat/completions HTTP/1.1\r\n")
    assert b"\r\nContent-Length: 8\r\n" in request
    assert b"\r\nAccept-Encoding: identity\r\n" in request
    assert request.endswith(b'\r\n\r\n{"q": 1}')


async def test_chunked_and_close_delimited_answers_arrive_whole(serve: Serve) -> None:
    chunked = [
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"5\r\nhello\r\n",
        b"6\r\n world\r\n",
        b"0\r\n\r\n",
    ]
    _, up = await serve(lambda _: chunked)
    assert await _get(up) == (200, "text/event-stream", b"hello world", True)
    until_close = [b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", b"all of ", b"it", b""]
    _, up2 = await serve(lambda _: until_close)
    status, _, body, _ = await _get(up2)
    assert (status, body) == (200, b"all of it")


async def test_connections_are_kept_and_reused(serve: Serve) -> None:
    raw, up = await serve(lambda _: _length(b"{}"))
    for _ in range(3):
        assert (await _get(up))[2] == b"{}"
    assert raw.connections == 1


async def test_an_answer_marked_close_is_not_reused(serve: Serve) -> None:
    raw, up = await serve(lambda _: _length(b"{}", b"Connection: close\r\n"))
    for _ in range(2):
        assert (await _get(up))[2] == b"{}"
    assert raw.connections == 2


async def test_a_kept_connection_closed_by_the_server_is_replaced_once(serve: Serve) -> None:
    served: list[int] = []

    def answer(_: bytes) -> list[bytes]:
        served.append(1)
        # The first connection answers once, then the server closes it while it idles.
        return [*_length(b"{}"), b""] if len(served) == 1 else _length(b"{}")

    raw, up = await serve(answer)
    assert (await _get(up))[2] == b"{}"
    await asyncio.sleep(0.1)
    assert (await _get(up))[2] == b"{}"
    assert raw.connections == 2
    assert len(raw.requests) == 2  # the second request was sent once, on the new connection


@pytest.mark.parametrize(
    "writes",
    [
        pytest.param(
            [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", b"12345", b""], id="short-body"
        ),
        pytest.param(
            [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"5\r\nhello\r\n", b""],
            id="no-last-chunk",
        ),
        pytest.param([b"this is not HTTP at all\r\n\r\n"], id="not-http"),
        pytest.param([b""], id="closed-before-answering"),
    ],
)
async def test_a_cut_or_malformed_answer_is_a_502(serve: Serve, writes: list[bytes]) -> None:
    _, up = await serve(lambda _: writes)
    with pytest.raises(HttpError) as caught:
        await _get(up)
    assert caught.value.status == 502


async def test_a_gzip_answer_is_decoded_and_a_cut_one_is_a_502(serve: Serve) -> None:
    packed = gzip.compress(b'{"a": "' + b"x" * 1000 + b'"}')
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n"
    _, up = await serve(lambda _: [head % len(packed), packed])
    status, _, body, ended = await _get(up)
    assert (status, body, ended) == (200, b'{"a": "' + b"x" * 1000 + b'"}', False)
    cut = packed[: len(packed) // 2]
    _, up2 = await serve(lambda _: [head % len(cut), cut])
    with pytest.raises(HttpError) as caught:
        await _get(up2)
    assert caught.value.status == 502


async def test_nobody_listening_is_a_502() -> None:
    up = Upstream("http://127.0.0.1:1", timeout_s=5, max_connections=1)
    try:
        with pytest.raises(HttpError) as caught:
            await _get(up)
        assert caught.value.status == 502
    finally:
        await up.close()

"""The response being written, whatever the HTTP stack underneath (asgi.py adapts it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

Headers = list[tuple[bytes, bytes]]
Start = Callable[[int, Headers], Awaitable[None]]
Body = Callable[[bytes, bool], Awaitable[None]]

CACHE_HEADER = b"x-infercache-cache"
JSON = b"application/json"
SSE_HEADERS: Headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


class Reply:
    """The response being written: start once, then body pieces."""

    __slots__ = ("_body", "_start", "answered", "finished", "started")

    def __init__(self, start: Start, body: Body) -> None:
        self._start, self._body = start, body
        self.started = False
        self.finished = False
        """The last piece of the body went out: the client has the whole response."""
        self.answered = False
        """The client has the whole answer though the body is not ended: a stream's
        `data: [DONE]` went out. A client may close then (the OpenAI SDKs do) and that
        is not an abort."""

    async def start(self, status: int, headers: Headers) -> None:
        """Status line and headers."""
        self.started = True
        await self._start(status, headers)

    async def send(self, data: bytes, more: bool = True) -> None:
        """A piece of the body (`more=False`: the last one)."""
        if not more:
            self.finished = True
        await self._body(data, more)

    async def end(self) -> None:
        """End the body, unless its last piece already did (sent with `more=False`)."""
        if not self.finished:
            await self.send(b"", False)

    def retract(self) -> bool:
        """Take back a start no byte of which reached the client yet, so that an error
        can still answer with its own status; False when it did (always, here: a
        HeldReply, http10.py, holds some)."""
        return False

    async def whole(self, status: int, headers: Headers, body: bytes) -> None:
        """A complete response in one go, with its Content-Length (not chunked: an
        HTTP/1.0 client cannot read chunked framing, RFC 9112 7.1)."""
        if status not in (204, 304):
            headers = [*headers, (b"content-length", str(len(body)).encode())]
        await self.start(status, headers)
        await self.send(body, False)

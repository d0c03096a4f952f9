"""Answers an HTTP/1.0 client can read.

RFC 9112 6.1 forbids Transfer-Encoding on an answer to an HTTP/1.0 request: such a
client reads a body by its Content-Length or up to the close of the connection. uvicorn
chunks every response that starts without a Content-Length, whatever the request said,
so for a 1.0 request the gateway

- holds a whole answer (any content type but an event stream) until its last piece and
  sends it with its Content-Length (`HeldReply`); one larger than the cap is sent
  close-delimited from there on;
- sends an event stream close-delimited (`Http10Protocol`): its bytes go out as they
  come, unframed, and the close ends the body (uvicorn never keeps a 1.0 connection
  alive: it sends `Connection: close` and closes after the last piece).

A stream left unfinished (docs/gateway.md, "Once the response has started") ends with
the same close there: the protocol has no other way to say it. What tells a 1.0 client
that a stream is whole is its last event (`data: [DONE]`, `response.completed`,
`message_stop`), which such a stream lacks.
"""

from __future__ import annotations

from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from sidecar.gateway.reply import Body, Headers, Reply, Start

HTTP_10 = "1.0"
_EVENT_STREAM = b"text/event-stream"
_NO_BODY = (204, 304)


def _sized(status: int, headers: Headers) -> bool:
    """Whether a response's head frames its body: a Content-Length, or no body at all."""
    return status in _NO_BODY or any(name == b"content-length" for name, _ in headers)


def _streamed(headers: Headers) -> bool:
    """An event stream: sent as it comes (close-delimited), never held."""
    return any(n == b"content-type" and v.startswith(_EVENT_STREAM) for n, v in headers)


class HeldReply(Reply):
    """A Reply for an HTTP/1.0 request: a whole answer is held until its end (up to
    `cap` bytes) and sent with its Content-Length."""

    __slots__ = ("_cap", "_head", "_parts", "_size")

    def __init__(self, start: Start, body: Body, cap: int) -> None:
        super().__init__(start, body)
        self._cap = cap
        self._head: tuple[int, Headers] | None = None
        self._parts: list[bytes] = []
        self._size = 0

    async def start(self, status: int, headers: Headers) -> None:
        if _sized(status, headers) or _streamed(headers):
            await super().start(status, headers)
            return
        self.started = True
        self._head = (status, headers)

    async def send(self, data: bytes, more: bool = True) -> None:
        if self._head is None:
            await super().send(data, more)
            return
        self._parts.append(data)
        self._size += len(data)
        if more and self._size <= self._cap:
            return
        (status, headers), self._head = self._head, None
        body, self._parts = b"".join(self._parts), []
        if not more:
            headers = [*headers, (b"content-length", str(len(body)).encode())]
        # Past the cap: the head without a length, so the rest is close-delimited.
        await self._start(status, headers)
        await super().send(body, more)

    def retract(self) -> bool:
        if self._head is None:
            return False
        self._head, self._parts, self._size = None, [], 0
        self.started = False
        return True


class _CloseDelimitedCycle(RequestResponseCycle):
    """uvicorn's request cycle for an HTTP/1.0 request: a response started without a
    Content-Length goes out unframed instead of chunked."""

    _open_ended = False

    async def send(self, message: ASGISendEvent) -> None:
        if message["type"] == "http.response.start" and not self.response_started:
            headers = list(message.get("headers", []))
            if self.scope["method"] != "HEAD" and not _sized(message["status"], headers):
                # Decided here, before uvicorn's own check adds `transfer-encoding:
                # chunked` to a response with neither framing header.
                self.chunked_encoding = False
                self._open_ended = True
        elif (
            self._open_ended
            and message["type"] == "http.response.body"
            and not self.response_complete
        ):
            # uvicorn counts an unchunked body against its Content-Length; this one has
            # none, so each piece is exactly what is left.
            self.expected_content_length = len(message.get("body", b""))
        await super().send(message)


class Http10Protocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, whose HTTP/1.0 requests answer unchunked."""

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        # The request just parsed got a cycle of its own (none for an upgrade); its
        # task has not run yet, so its `send` is looked up on the new class.
        fresh = cycle is not None and cycle.scope is self.scope
        if fresh and self.scope.get("http_version") == HTTP_10:
            cycle.__class__ = _CloseDelimitedCycle

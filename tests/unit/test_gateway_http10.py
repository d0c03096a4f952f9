"""HeldReply (sidecar/gateway/http10.py), the Reply of an HTTP/1.0 request: what it
hands the server below for whole answers, event streams, answers past its cap, and an
error raised while it still holds the head. The framing itself is tested through a real
socket in tests/e2e/test_gateway_http10.py."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.gateway.http10 import HeldReply
from sidecar.gateway.reply import JSON, SSE_HEADERS, Headers

pytestmark = pytest.mark.timeout(10)


class _Wire:
    """What the server below was handed, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def start(self, status: int, headers: Headers) -> None:
        self.calls.append(("start", status, dict(headers)))

    async def body(self, data: bytes, more: bool) -> None:
        self.calls.append(("body", data, more))


def held(cap: int = 1024) -> tuple[HeldReply, _Wire]:
    wire = _Wire()
    return HeldReply(wire.start, wire.body, cap), wire


async def test_a_whole_answer_goes_out_at_its_end_with_its_length() -> None:
    """Relayed piece by piece, sent as one head with Content-Length and one body."""
    reply, wire = held()
    await reply.start(200, [(b"content-type", JSON)])
    await reply.send(b'{"a":')
    await reply.send(b"1}", False)
    head = {b"content-type": JSON, b"content-length": b"7"}
    assert wire.calls == [("start", 200, head), ("body", b'{"a":1}', False)]
    assert reply.finished


async def test_an_event_stream_goes_out_as_it_comes() -> None:
    """An event stream is never held: its head and each event at once, no length."""
    reply, wire = held()
    await reply.start(200, SSE_HEADERS)
    assert wire.calls == [("start", 200, dict(SSE_HEADERS))]
    await reply.send(b"data: 1\n\n")
    await reply.end()
    assert wire.calls[1:] == [("body", b"data: 1\n\n", True), ("body", b"", False)]


async def test_an_answer_past_the_cap_goes_on_without_a_length() -> None:
    """Past `cap` bytes the head goes out without a length (close-delimited below) with
    what was held, and the rest passes through."""
    reply, wire = held(cap=4)
    await reply.start(200, [(b"content-type", JSON)])
    await reply.send(b"abc")
    assert wire.calls == []
    await reply.send(b"def")
    await reply.send(b"g", False)
    assert wire.calls == [
        ("start", 200, {b"content-type": JSON}),
        ("body", b"abcdef", True),
        ("body", b"g", False),
    ]


async def test_a_held_head_can_be_taken_back_for_an_error() -> None:
    """An upstream cut while the head is held: nothing reached the client, so the
    error is answered with its own status; once the head is out, it cannot be."""
    reply, wire = held()
    await reply.start(200, [(b"content-type", JSON)])
    await reply.send(b'{"partial')
    assert reply.retract()
    assert not reply.started
    await reply.whole(502, [(b"content-type", JSON)], b"{}")
    head = {b"content-type": JSON, b"content-length": b"2"}
    assert wire.calls == [("start", 502, head), ("body", b"{}", False)]
    assert not reply.retract()

"""How a streamed miss ends, for every streaming API: a stream the model server ends
without its last event (`data: [DONE]`, `response.completed`, `message_stop`) ends
broken for the client (docs/gateway.md: the response is left unfinished, nothing
stored), however the model server frames its body. Until 2026-12 a body framed by
Content-Length, whose end arrives with its last event, was relayed with a clean end."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.support.gateway import API_KEYS, MODEL, GatewayPod
from tests.support.messages import messages_body

pytestmark = pytest.mark.e2e

Body = Callable[[str], dict[str, Any]]
FINISHED = b'"finish_reason": "stop"'
APIS: dict[str, tuple[str, Body, str, bytes]] = {
    "chat": (
        "/v1/chat/completions",
        lambda p: {"model": MODEL, "messages": [{"role": "user", "content": p}]},
        "[[no-done]]",
        FINISHED,
    ),
    "completions": (
        "/v1/completions",
        lambda p: {"model": MODEL, "prompt": p},
        "[[no-done]]",
        FINISHED,
    ),
    "responses": (
        "/v1/responses",
        lambda p: {"model": MODEL, "input": p},
        "[[no-end]]",
        b"event: response.output_item.done",
    ),
    "messages": ("/v1/messages", messages_body, "[[no-end]]", b'"stop_reason":"end_turn"'),
}
"""Route, a body for a prompt, the marker that drops the stream's last event, and what
the event before it says (the answer is whole but for that last event)."""


@pytest.fixture(scope="module")
def pod() -> Iterator[GatewayPod]:
    p = GatewayPod()
    yield p
    p.stop()


def streamed(pod: GatewayPod, path: str, doc: dict[str, Any]) -> tuple[str, bool, bytes]:
    """(x-infercache-cache, whether the response ended cleanly, what arrived)."""
    headers = {"authorization": f"Bearer {API_KEYS['acme']}"}
    url = f"http://127.0.0.1:{pod.port}{path}"
    with httpx.stream("POST", url, json=doc | {"stream": True}, headers=headers) as resp:
        assert resp.status_code == 200
        outcome = resp.headers["x-infercache-cache"]
        got = b""
        try:
            for piece in resp.iter_raw():
                got += piece
        except httpx.RemoteProtocolError:
            return outcome, False, got
    return outcome, True, got


@pytest.mark.parametrize("framing", ["[[framed]]", "close"])
@pytest.mark.parametrize("api", sorted(APIS))
def test_a_stream_without_its_last_event_ends_broken(
    pod: GatewayPod, api: str, framing: str
) -> None:
    """Every event (the finish_reason or stop reason included) but the last: relayed as
    it came, then left unfinished, and not stored (the same request misses again);
    whether the model server frames its body by length or ends it by closing."""
    path, body, marker, finished = APIS[api]
    doc = body(f"{marker} {framing} {uuid.uuid4().hex}")
    before = pod.upstream_calls()
    for _ in range(2):
        outcome, clean, got = streamed(pod, path, doc)
        assert (outcome, clean) == ("miss", False)
        assert finished in got
    assert pod.upstream_calls() == before + 2


@pytest.mark.parametrize("api", sorted(APIS))
def test_a_whole_stream_framed_by_length_ends_cleanly_and_is_stored(
    pod: GatewayPod, api: str
) -> None:
    """The same framing with the last event: a clean end, stored, replayed as a hit."""
    path, body, _, _ = APIS[api]
    doc = body(f"[[framed]] {uuid.uuid4().hex}")
    first = streamed(pod, path, doc)
    second = streamed(pod, path, doc)
    assert (first[:2], second[:2]) == (("miss", True), ("hit", True))

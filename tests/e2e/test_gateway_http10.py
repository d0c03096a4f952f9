"""HTTP/1.0 clients through the gateway, read with a strict HTTP/1.0 reader over a raw
socket: no answer carries `Transfer-Encoding: chunked` (RFC 9112 6.1), which such a
client cannot parse. Whole answers (misses, hits, the proxied model list) carry their
Content-Length; streams (misses and hits) are close-delimited. Until 2026-12 every
answer but a whole hit or a refusal came chunked."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.gateway import API_KEYS, MODEL, GatewayPod
from tests.support.messages import messages_body
from tests.support.raw_http import Http10Response, request_http10

pytestmark = pytest.mark.e2e

Body = Callable[[str], dict[str, Any]]
ROUTES: dict[str, tuple[str, Body, bytes]] = {
    "chat": (
        "/v1/chat/completions",
        lambda p: {"model": MODEL, "messages": [{"role": "user", "content": p}]},
        b"data: [DONE]\n\n",
    ),
    "completions": (
        "/v1/completions",
        lambda p: {"model": MODEL, "prompt": p},
        b"data: [DONE]\n\n",
    ),
    "responses": ("/v1/responses", lambda p: {"model": MODEL, "input": p}, b"response.completed"),
    "messages": ("/v1/messages", messages_body, b"message_stop"),
}
"""Route, a body for a prompt, and what the last event of its stream holds."""
AUTH = [("Authorization", f"Bearer {API_KEYS['acme']}"), ("Content-Type", "application/json")]


@pytest.fixture(scope="module")
def pod() -> Iterator[GatewayPod]:
    p = GatewayPod()
    yield p
    p.stop()


def post10(pod: GatewayPod, path: str, doc: dict[str, Any]) -> Http10Response:
    return request_http10(pod.port, "POST", path, AUTH, json.dumps(doc).encode())


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_http10_whole_answers_carry_their_content_length(pod: GatewayPod, route: str) -> None:
    """A whole miss (relayed from the model server as it arrives) and its hit: each
    framed by Content-Length, never chunked; the miss's body was chunked before."""
    path, body, _ = ROUTES[route]
    doc = body(f"http10 whole {uuid.uuid4().hex}")
    outcomes = []
    for _ in range(2):
        resp = post10(pod, path, doc)
        assert resp.status == 200, resp.body
        assert resp.framing == "length", resp.headers
        assert json.loads(resp.body)["model"] == MODEL
        outcomes.append(resp.header("x-infercache-cache"))
    assert outcomes == ["miss", "hit"]


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_http10_streams_are_close_delimited(pod: GatewayPod, route: str) -> None:
    """A streamed miss and its streamed hit: no chunk framing, `Connection: close`, the
    body is the SSE events themselves up to the close, its last event the stream's end."""
    path, body, last = ROUTES[route]
    doc = body(f"http10 stream {uuid.uuid4().hex}") | {"stream": True}
    outcomes = []
    for _ in range(2):
        resp = post10(pod, path, doc)
        assert resp.status == 200, resp.body
        assert resp.framing == "close", resp.headers
        assert resp.header("connection") == "close", resp.headers
        assert (resp.header("content-type") or "").startswith("text/event-stream")
        # The events from the first byte (a chunk size line would come first) to the
        # stream's end, and nothing after it (no last chunk `0\r\n\r\n`).
        assert resp.body.startswith((b"data: ", b"event: ")), resp.body[:40]
        events = [e for e in resp.body.split(b"\n\n") if e]
        assert last.strip() in events[-1], events[-1]
        assert resp.body.endswith(b"\n\n"), resp.body[-40:]
        outcomes.append(resp.header("x-infercache-cache"))
    assert outcomes == ["miss", "hit"]


def test_http10_proxied_model_list_carries_its_content_length(pod: GatewayPod) -> None:
    """GET /v1/models (relayed piece by piece from the model server) is framed by
    Content-Length for an HTTP/1.0 client too."""
    resp = request_http10(pod.port, "GET", "/v1/models", AUTH)
    assert resp.status == 200, resp.body
    assert resp.framing == "length", resp.headers
    assert json.loads(resp.body)["data"][0]["id"] == MODEL


def test_http10_refusals_and_health_keep_their_content_length(pod: GatewayPod) -> None:
    """What was already framed by length stays so: a refusal and /health."""
    refused = request_http10(pod.port, "POST", "/v1/chat/completions", [], b"{}")
    assert (refused.status, refused.framing) == (401, "length")
    assert json.loads(refused.body)["error"]["code"] == "invalid_api_key"
    health = request_http10(pod.port, "GET", "/health", [])
    assert (health.status, health.framing, health.body) == (200, "length", b'{"status":"ok"}')

"""The gateway's HTTP surface against a real gateway process and model server, for what
a review of 2026-12-02 found: streams with keep-alive comments, the model server's
retry headers, slow and oversized requests, combined cache controls, header values
and the `param` of a 400. Each test failed on the code before its fix."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.gateway import API_KEYS, MODEL, GatewayPod
from tests.support.raw_http import RawResponse, parse, refused, request

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
AUTH = ("Authorization", f"Bearer {API_KEYS['acme']}")
JSON_TYPE = ("Content-Type", "application/json")
BODY_TIMEOUT_S = 1


@pytest.fixture(scope="module")
def pod() -> Iterator[GatewayPod]:
    p = GatewayPod(gateway_body_timeout_s=BODY_TIMEOUT_S)
    yield p
    p.stop()


def chat(prompt: str, **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": prompt}]} | fields


def post(pod: GatewayPod, doc: dict[str, Any], *extra: tuple[str, str]) -> RawResponse:
    return request(pod.port, "POST", CHAT, [AUTH, JSON_TYPE, *extra], json.dumps(doc).encode())


def test_a_stream_with_keepalive_comments_is_stored_without_them_and_served(
    pod: GatewayPod,
) -> None:
    """The comments reach the client live; what is stored is the answer's events, so the
    next ask is a hit (before: stored, then refused on every hit and recomputed)."""
    doc = chat(f"[[keepalive]] {uuid.uuid4().hex}", stream=True)
    before = pod.upstream_calls()
    first, second = post(pod, doc), post(pod, doc)
    assert first.header("x-infercache-cache") == "miss"
    assert b": ping\n\n" in first.body
    assert second.header("x-infercache-cache") == "hit"
    assert b": ping" not in second.body
    assert pod.upstream_calls() == before + 1

    def contents(raw: bytes) -> list[str]:
        out = []
        for line in raw.split(b"\n"):
            if line.startswith(b"data: {"):
                delta = json.loads(line[6:])["choices"][0].get("delta", {})
                out.append(delta.get("content") or "")
        return out

    assert contents(first.body) == contents(second.body)
    assert second.body.endswith(b"data: [DONE]\n\n")


def test_the_model_servers_retry_headers_reach_the_client_and_nothing_is_stored(
    pod: GatewayPod,
) -> None:
    doc = chat(f"[[rate-limited]] {uuid.uuid4().hex}")
    for _ in range(2):
        resp = post(pod, doc)
        assert resp.status == 429
        assert resp.header("x-infercache-cache") == "miss"
        assert resp.header("retry-after") == "7"
        assert resp.header("x-request-id") == "req-429"
        assert resp.header("x-ratelimit-remaining-requests") == "0"
        assert resp.header("x-other") is None  # not on the list: kept back


def test_a_body_that_does_not_arrive_in_time_is_408_and_the_connection_closes(
    pod: GatewayPod,
) -> None:
    body = json.dumps(chat(uuid.uuid4().hex)).encode()
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: x\r\n{AUTH[0]}: {AUTH[1]}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body) + 10}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", pod.port), timeout=20) as sock:
        started = time.monotonic()
        sock.sendall(head + body)  # ten bytes short: the body never completes
        data = b""
        while piece := sock.recv(65536):  # until the gateway closes the connection
            data += piece
        waited = time.monotonic() - started
    resp = parse(data)
    refused(resp, 408, code="request_timeout")
    assert resp.header("connection") == "close"
    assert BODY_TIMEOUT_S * 0.8 < waited < BODY_TIMEOUT_S + 10


def test_request_headers_over_the_limit_are_431(pod: GatewayPod) -> None:
    big = ("x-padding", "a" * (70 * 1024))
    resp = post(pod, chat(uuid.uuid4().hex), big)
    refused(resp, 431, code="request_header_fields_too_large")
    assert post(pod, chat(uuid.uuid4().hex), ("x-padding", "a" * 1024)).status == 200


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ([("Cache-Control", "no-cache, no-store")], "no-cache, no-store"),
        (
            [("x-infercache-cache-mode", "read-only"), ("Cache-Control", "no-cache")],
            "cache mode read-only, no-cache",
        ),
        ([("x-infercache-cache-mode", "off")], "cache mode off"),
    ],
)
def test_controls_that_leave_neither_read_nor_write_say_why(
    pod: GatewayPod, headers: list[tuple[str, str]], reason: str
) -> None:
    resp = post(pod, chat(uuid.uuid4().hex), *headers)
    assert resp.status == 200
    assert resp.header("x-infercache-cache") == "bypass"
    assert resp.header("x-infercache-bypass-reason") == reason


def test_max_age_of_any_length_counts_as_two_to_the_31(pod: GatewayPod) -> None:
    doc = chat(uuid.uuid4().hex)
    assert post(pod, doc).header("x-infercache-cache") == "miss"
    resp = post(pod, doc, ("Cache-Control", "max-age=" + "9" * 80))
    assert resp.header("x-infercache-cache") == "hit"


def test_an_empty_replay_pace_header_is_400(pod: GatewayPod) -> None:
    doc = chat(uuid.uuid4().hex, stream=True)
    refused(post(pod, doc, ("x-infercache-replay-pace", "")), 400, code="invalid_header")


@pytest.mark.parametrize(
    ("path", "doc", "param"),
    [
        ("/v1/embeddings", {"model": MODEL, "input": "x", "dimensions": 10**20}, "dimensions"),
        ("/v1/completions", {"model": MODEL, "prompt": [10**20]}, "prompt"),
        ("/v1/embeddings", {"model": MODEL, "input": [-1]}, "input"),
        ("/v1/chat/completions", chat("x", logit_bias={"5": 1e308}), "logit_bias.5"),
    ],
)
def test_a_400_about_a_keyed_field_names_the_body_field(
    pod: GatewayPod, path: str, doc: dict[str, Any], param: str
) -> None:
    resp = request(pod.port, "POST", path, [AUTH, JSON_TYPE], json.dumps(doc).encode())
    assert refused(resp, 400, code="invalid_value")["param"] == param


def test_a_huge_number_is_not_echoed_whole(pod: GatewayPod) -> None:
    resp = httpx.post(
        pod.base_url + "/chat/completions",
        json=chat("x", seed=1e300),
        headers={"Authorization": AUTH[1]},
        timeout=30,
    )
    assert resp.status_code == 400
    assert len(resp.json()["error"]["message"]) < 300


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"stop": [f"s{i}" for i in range(65)]}, "stop"),
        ({f"field_{i}": i for i in range(70)}, "extra"),
        ({"logit_bias": {str(i): 1 for i in range(1025)}}, "logit_bias"),
    ],
)
def test_a_request_too_large_to_key_is_forwarded_uncached_not_refused(
    pod: GatewayPod, fields: dict[str, Any], where: str
) -> None:
    """The key's limits are this cache's, not the model server's: such a request is
    answered by the model server every time (before: a 400)."""
    doc = chat(uuid.uuid4().hex, **fields)
    before = pod.upstream_calls()
    for _ in range(2):
        resp = post(pod, doc)
        assert resp.status == 200, resp.body
        assert resp.header("x-infercache-cache") == "bypass"
        reason = resp.header("x-infercache-bypass-reason") or ""
        assert reason.startswith(f"too large to key: {where} "), reason
    assert pod.upstream_calls() == before + 2


def test_whole_answers_carry_a_content_length(pod: GatewayPod) -> None:
    """A hit, an error and /health are sent with Content-Length, not chunked (an
    HTTP/1.0 client cannot read chunked framing)."""
    doc = chat(uuid.uuid4().hex)
    post(pod, doc)
    hit = post(pod, doc)
    assert hit.header("x-infercache-cache") == "hit"
    assert hit.header("content-length") == str(len(hit.body))
    assert hit.header("transfer-encoding") is None
    error = post(pod, chat(uuid.uuid4().hex, temperature="hot"))
    assert error.status == 400
    assert error.header("content-length") == str(len(error.body))
    health = request(pod.port, "GET", "/health")
    assert health.header("content-length") == str(len(health.body))

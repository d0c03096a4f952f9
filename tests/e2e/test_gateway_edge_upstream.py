"""A real gateway in front of a model server that misbehaves (tests.support.bad_upstream):
nothing it answers wrongly is stored, and the client gets a faithful answer or a
502/504. Clients that go away free the lease at once."""

from __future__ import annotations

import gzip
import json
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.bad_upstream import BadUpstream
from tests.support.gateway import API_KEYS, MODEL, GatewayPod
from tests.support.raw_http import request, request_http10

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
AUTH = ("Authorization", f"Bearer {API_KEYS['acme']}")
JSON_TYPE = ("Content-Type", "application/json")
STORE_LIMIT = 256 * 1024
TIMEOUT_S = 2
WAIT_MS = 20_000


@pytest.fixture(scope="module")
def bad() -> Iterator[BadUpstream]:
    """The misbehaving model server (slower than the gateway's deadline on [[slow]])."""
    up = BadUpstream(slow_s=TIMEOUT_S + 2, huge_bytes=2 * STORE_LIMIT)
    yield up
    up.stop()


@pytest.fixture(scope="module")
def pod(bad: BadUpstream) -> Iterator[GatewayPod]:
    """A gateway whose model server is `bad`."""
    p = GatewayPod(
        model_server_url=bad.url,
        gateway_upstream_timeout_s=str(TIMEOUT_S),
        max_payload_bytes=str(STORE_LIMIT),
        gateway_wait_ms=str(WAIT_MS),
    )
    yield p
    p.stop()


def body(marker: str, **fields: Any) -> dict[str, Any]:
    """A chat body with a unique prompt holding `marker`."""
    content = f"{marker} {uuid.uuid4().hex}"
    return {"model": MODEL, "messages": [{"role": "user", "content": content}]} | fields


INCOMPLETE = b"<incomplete>"


def send(pod: GatewayPod, doc: dict[str, Any]) -> tuple[int, httpx.Headers, bytes]:
    """POST through httpx without decoding (status, headers, the bytes as sent;
    INCOMPLETE when the response broke off before its end)."""
    with (
        httpx.Client(timeout=30) as c,
        c.stream(
            "POST",
            f"http://127.0.0.1:{pod.port}{CHAT}",
            json=doc,
            headers=dict([AUTH]),
        ) as resp,
    ):
        try:
            raw = b"".join(resp.iter_raw())
        except httpx.HTTPError:
            raw = INCOMPLETE
        return resp.status_code, resp.headers, raw


def calls(bad: BadUpstream) -> int:
    return int(bad.stats()["completions"])


def assert_not_stored(pod: GatewayPod, bad: BadUpstream, doc: dict[str, Any]) -> None:
    """The same request again reaches the model server: nothing was stored."""
    before = calls(bad)
    status, headers, _ = send(pod, doc)
    assert headers.get("x-infercache-cache") != "hit", (status, headers)
    assert calls(bad) == before + 1


@pytest.mark.parametrize("marker", ["[[not-json]]", "[[no-choices]]"])
def test_a_200_that_is_no_answer_is_passed_on_not_stored(
    pod: GatewayPod, bad: BadUpstream, marker: str
) -> None:
    """A 200 whose body is not an OpenAI answer reaches the client as it came, unstored."""
    doc = body(marker)
    status, _, raw = send(pod, doc)
    assert status == 200
    assert (b"<html>" in raw) if marker == "[[not-json]]" else ("choices" not in json.loads(raw))
    assert_not_stored(pod, bad, doc)


def test_upstream_closing_mid_body_is_not_stored(pod: GatewayPod, bad: BadUpstream) -> None:
    """The model server closes after half its body: the client never receives a
    complete-looking 200, and nothing is stored."""
    doc = body("[[cut-body]]")
    status, _, raw = send(pod, doc)
    # Either refused before the status, or the response breaks off (not a clean end).
    assert status == 502 or raw == INCOMPLETE, (status, raw)
    assert_not_stored(pod, bad, doc)


def test_http10_upstream_closing_mid_body_is_a_502(pod: GatewayPod, bad: BadUpstream) -> None:
    """For an HTTP/1.0 client a whole answer is held until its end (to send its
    Content-Length), so one the model server cuts mid-body has sent nothing yet: the
    client gets the 502 with its length, never a truncated 200 (it was chunked)."""
    doc = body("[[cut-body]]")
    resp = request_http10(pod.port, "POST", CHAT, [AUTH, JSON_TYPE], json.dumps(doc).encode())
    assert (resp.status, resp.framing) == (502, "length"), (resp.status, resp.body)
    assert json.loads(resp.body)["error"]["code"] == "upstream_unreachable"
    assert_not_stored(pod, bad, doc)


def test_upstream_stream_cut_is_not_stored(pod: GatewayPod, bad: BadUpstream) -> None:
    """A stream whose connection closes after one event: nothing stored."""
    doc = body("[[stream-cut]]", stream=True)
    status, _, raw = send(pod, doc)
    assert status == 200
    assert raw == INCOMPLETE  # the client sees the stream break, not a clean end
    assert_not_stored(pod, bad, doc)


def test_slow_upstream_is_504(pod: GatewayPod, bad: BadUpstream) -> None:
    """An answer slower than the deadline: 504 OpenAI-style within about the deadline."""
    doc = body("[[slow]]")
    t0 = time.monotonic()
    status, headers, raw = send(pod, doc)
    assert status == 504, raw
    assert time.monotonic() - t0 < TIMEOUT_S + 1.5
    assert json.loads(raw)["error"]["code"] == "upstream_timeout"
    assert headers["content-type"] == "application/json"


def test_huge_answer_is_forwarded_not_stored(pod: GatewayPod, bad: BadUpstream) -> None:
    """An answer over the store limit reaches the client whole and is not stored."""
    doc = body("[[huge]]")
    status, _, raw = send(pod, doc)
    assert status == 200
    assert len(json.loads(raw)["choices"][0]["message"]["content"]) == 2 * STORE_LIMIT
    assert_not_stored(pod, bad, doc)


@pytest.mark.parametrize("marker", ["[[gzip]]", "[[gzip-always]]"])
def test_compressed_upstream_answers_are_never_forwarded_without_their_header(
    pod: GatewayPod, bad: BadUpstream, marker: str
) -> None:
    """An upstream that compresses when allowed (or always): the client gets bytes it
    can read (plain, or gzip with Content-Encoding), and a plain answer is cached."""
    doc = body(marker)
    status, headers, raw = send(pod, doc)
    assert status == 200
    if headers.get("content-encoding") == "gzip":
        raw = gzip.decompress(raw)
    assert json.loads(raw)["choices"]
    status, headers, again = send(pod, doc)
    assert headers["x-infercache-cache"] == "hit"
    assert json.loads(again)["choices"] == json.loads(raw)["choices"]


# -- clients that go away ----------------------------------------------------------


def _open_and_leave(pod: GatewayPod, doc: dict[str, Any], after: bytes | None) -> None:
    """Send `doc`, read until `after` appears (None: read nothing), then close."""
    data = json.dumps(doc).encode()
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: x\r\n{AUTH[0]}: {AUTH[1]}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", pod.port), timeout=10) as sock:
        sock.sendall(head + data)
        got = b""
        while after is not None and after not in got:
            piece = sock.recv(65536)
            if not piece:
                break
            got += piece
        if after is None:
            time.sleep(0.5)  # the gateway is waiting on the model server


def test_client_gone_mid_wait_frees_the_lease(pod: GatewayPod, bad: BadUpstream) -> None:
    """A client that leaves while its miss is computed: its lease is released, so the
    next identical request is not held for the single-flight wait."""
    doc = body("[[slow]]")
    _open_and_leave(pod, doc, None)
    t0 = time.monotonic()
    status, _, _ = send(pod, doc)
    elapsed = time.monotonic() - t0
    assert status == 504  # computed itself (and timed out), not a wait on the gone one
    assert elapsed < TIMEOUT_S + 1.5, elapsed


def test_client_gone_mid_body_sends_nothing_upstream(pod: GatewayPod, bad: BadUpstream) -> None:
    """A client that leaves halfway through its request body: nothing is forwarded."""
    before = calls(bad)
    data = json.dumps(body("plain")).encode()
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: x\r\n{AUTH[0]}: {AUTH[1]}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", pod.port), timeout=10) as sock:
        sock.sendall(head + data[: len(data) // 2])
    time.sleep(0.5)
    assert calls(bad) == before
    resp = request(pod.port, "GET", "/health")
    assert resp.status == 200

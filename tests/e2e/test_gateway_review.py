"""Fixes from the gateway review (docs/gateway.md), each shown end to end against a real
`infercache serve --gateway-listen` and the stand-in model server over raw sockets:
unknown field names in a response header, finish reasons that are no complete answer,
the replay pace header on streamed misses and non-streamed hits, and a replay cut at
INFERCACHE_REPLAY_MAX_DURATION_MS."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.gateway import API_KEYS, GatewayPod, chat_body
from tests.support.raw_http import RawResponse, refused, request

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
AUTH = ("Authorization", f"Bearer {API_KEYS['acme']}")
JSON_TYPE = ("Content-Type", "application/json")
PACE = "x-infercache-replay-pace"
MAX_DURATION_MS = 1500
UNKNOWN = "x-infercache-unknown-fields"
OMITTED = "x-infercache-unknown-fields-omitted"


@pytest.fixture(scope="module")
def pod() -> Iterator[GatewayPod]:
    """One model server and one gateway sidecar; replays are capped at 1.5 s."""
    p = GatewayPod(replay_max_duration_ms=str(MAX_DURATION_MS))
    yield p
    p.stop()


def body(**fields: Any) -> dict[str, Any]:
    """A chat body with a unique prompt, `fields` added."""
    return chat_body("review", **fields)


def post(pod: GatewayPod, doc: dict[str, Any], *headers: tuple[str, str]) -> RawResponse:
    """A POST of `doc` to the chat route with acme's key, JSON and `headers`."""
    return request(pod.port, "POST", CHAT, [AUTH, JSON_TYPE, *headers], json.dumps(doc).encode())


# -- #6: unknown field names in x-infercache-unknown-fields --------------------------


def test_unknown_field_name_with_crlf_is_percent_encoded(pod: GatewayPod) -> None:
    """A body key with CR/LF used to break the response after the upstream call (an
    empty reply): now a 200 whose header carries the name percent-encoded, no header
    injected."""
    doc = body(temperature=0) | {"x\r\nset-cookie: a=b": 1, "plain_knob": 2}
    first = post(pod, doc)
    assert first.status == 200, first
    assert first.header(UNKNOWN) == "plain_knob,x%0D%0Aset-cookie%3A%20a%3Db"  # sorted
    assert first.header("set-cookie") is None
    assert first.header(OMITTED) is None
    assert first.header("x-infercache-cache") == "miss"
    assert json.loads(first.body)["choices"][0]["finish_reason"] == "stop"
    second = post(pod, doc)
    assert (second.status, second.header("x-infercache-cache")) == (200, "hit")
    assert second.header(UNKNOWN) == first.header(UNKNOWN)


def test_unknown_field_names_header_is_capped_at_1_kib(pod: GatewayPod) -> None:
    """A 20 000-character name (bypass: never length-checked) and 40 more: the header
    keeps the first names that fit in 1 KiB and counts the rest in ...-omitted."""
    names = [f"knob_{i:02d}_" + "k" * 30 for i in range(40)]
    doc = body() | dict.fromkeys(names, 1) | {"z" * 20_000: 1}
    resp = post(pod, doc, ("x-infercache-cache-mode", "off"))
    assert resp.status == 200, resp
    listed = resp.header(UNKNOWN)
    assert listed is not None
    # 38 characters a name, 39 with its comma: 26 fit in 1024 bytes (26 * 39 - 1 = 1013).
    assert listed == ",".join(names[:26])
    assert resp.header(OMITTED) == str(40 - 26 + 1)


# -- #8: only allow-listed finish reasons are stored ----------------------------------


@pytest.mark.parametrize("reason", ["abort", "error", "content_filter"])
@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_a_finish_reason_that_is_no_complete_answer_is_not_stored(
    pod: GatewayPod, reason: str, stream: bool
) -> None:
    """vLLM's abort/error (and content_filter, by choice) come in a 200: forwarded as
    they are, never stored, so the repeat is a miss that reaches the model server."""
    doc = body(temperature=0, stream=stream)
    doc["messages"][0]["content"] += f" [[finish={reason}]]"
    before = pod.upstream_calls()
    for _ in range(2):
        resp = post(pod, doc)
        assert (resp.status, resp.header("x-infercache-cache")) == (200, "miss")
        assert f'"finish_reason": "{reason}"'.encode() in resp.body
    assert pod.upstream_calls() == before + 2


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_an_allow_listed_finish_reason_is_still_stored(pod: GatewayPod, stream: bool) -> None:
    """The allow-list keeps what was stored before: length here, stop everywhere else."""
    doc = body(temperature=0, stream=stream)
    doc["messages"][0]["content"] += " [[finish=length]]"
    assert post(pod, doc).header("x-infercache-cache") == "miss"
    assert post(pod, doc).header("x-infercache-cache") == "hit"


# -- #9: the pace header on streamed misses and non-streamed hits ----------------------


def test_bad_pace_on_a_streamed_miss_is_400_before_the_upstream_call(pod: GatewayPod) -> None:
    """A streamed request with a bad pace: 400 on the miss as on the hit, nothing
    forwarded, nothing stored."""
    doc = body(temperature=0, stream=True)
    before = pod.upstream_calls()
    refused(post(pod, doc, (PACE, "warp")), 400, PACE, "invalid_header")
    assert pod.upstream_calls() == before
    assert post(pod, doc).header("x-infercache-cache") == "miss"
    refused(post(pod, doc, (PACE, "warp")), 400, PACE, "invalid_header")
    assert post(pod, doc, (PACE, "fastest")).header("x-infercache-cache") == "hit"


def test_pace_is_ignored_on_a_non_streamed_request_miss_and_hit(pod: GatewayPod) -> None:
    """Not streamed: the pace header is not read, so a bad one is 200 on both."""
    doc = body(temperature=0)
    first = post(pod, doc, (PACE, "bogus"))
    second = post(pod, doc, (PACE, "bogus"))
    assert (first.status, first.header("x-infercache-cache")) == (200, "miss")
    assert (second.status, second.header("x-infercache-cache")) == (200, "hit")
    assert json.loads(second.body)["choices"] == json.loads(first.body)["choices"]


# -- #10: a replay cut at the duration cap ---------------------------------------------


def _raw_stream(pod: GatewayPod, doc: dict[str, Any], *headers: tuple[str, str]) -> bytes:
    """Every byte of the response to `doc`, read until the gateway closes."""
    data = json.dumps(doc).encode()
    lines = [f"POST {CHAT} HTTP/1.1", "Host: x", "Connection: close", f"{AUTH[0]}: {AUTH[1]}"]
    lines += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    lines += [f"{k}: {v}" for k, v in headers]
    got = b""
    with socket.create_connection(("127.0.0.1", pod.port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
        while piece := sock.recv(65536):
            got += piece
    return got


def test_replay_cut_at_the_duration_cap_is_a_broken_response(pod: GatewayPod) -> None:
    """At 1 token/s a stored stream of ~5 events needs ~4 s, over the 1.5 s cap: the
    replay sends the events due within the cap, then leaves the chunked body unfinished
    (no last chunk, no [DONE]), so no client takes the cut answer as whole."""
    doc = body(temperature=0, stream=True)
    whole = _raw_stream(pod, doc)
    assert b"x-infercache-cache: miss" in whole.lower()
    assert whole.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    cut = _raw_stream(pod, doc, (PACE, "1"))
    head, _, chunked = cut.partition(b"\r\n\r\n")
    assert b"x-infercache-cache: hit" in head.lower()
    assert b"transfer-encoding: chunked" in head.lower()
    assert b"[DONE]" not in chunked
    assert not chunked.endswith(b"0\r\n\r\n"), chunked[-40:]
    events = chunked.count(b"data: ")
    # Sent at 0 s and 1 s (2 s is past the cap); a stored stream has more than that.
    assert events == 2, chunked
    assert whole.count(b"data: ") > events + 1

"""The gateway's keyed fields, credentials and control headers probed with wrong and
borderline values over raw sockets against a real gateway process: a 400 naming the
field or header, a 401, or a correct answer; never a 500 and never a wrong hit."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.gateway import API_KEYS, MODEL, GatewayPod, chat_body
from tests.support.raw_http import RawResponse, refused, request

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
KEY = API_KEYS["acme"]
AUTH = ("Authorization", f"Bearer {KEY}")
JSON_TYPE = ("Content-Type", "application/json")


@pytest.fixture(scope="module")
def pod() -> Iterator[GatewayPod]:
    """One model server and one gateway sidecar for the module."""
    p = GatewayPod()
    yield p
    p.stop()


def body(**fields: Any) -> dict[str, Any]:
    """A chat body with a unique prompt, `fields` added."""
    return chat_body("field", **fields)


def post(
    pod: GatewayPod, doc: dict[str, Any], headers: list[tuple[str, str]] | None = None
) -> RawResponse:
    """A POST of `doc` to the chat route (acme's key and JSON unless `headers`)."""
    hdrs = [AUTH, JSON_TYPE] if headers is None else headers
    return request(pod.port, "POST", CHAT, hdrs, json.dumps(doc).encode())


# -- fields -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"temperature": "0"}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"max_tokens": "5"}, "max_tokens"),
        ({"n": "2"}, "n"),
        ({"n": True}, "n"),
        ({"stream": "true"}, "stream"),
        ({"stream": 1}, "stream"),
        ({"echo": 1}, "echo"),
        ({"ignore_eos": 0}, "ignore_eos"),
        ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"messages": "hello"}, "messages"),
        ({"messages": {"role": "user", "content": "x"}}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": [{"content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": 1, "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [5]}]}, "messages[0].content[0]"),
        ({"stop": 5}, "stop"),
        ({"tools": {"type": "function"}}, "tools"),
        ({"logit_bias": {"x": 1}}, "logit_bias"),
        ({"stream_options": "usage"}, "stream_options"),
        ({"temperature": -1}, "temperature"),
        ({"temperature": 1000}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"n": 0}, "n"),
        ({"n": -3}, "n"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"seed": 2**64}, "seed"),
        ({"top_k": -5}, "top_k"),
    ],
    ids=lambda x: json.dumps(x)[:40] if isinstance(x, dict) else str(x),
)
def test_wrong_field_values_are_400_naming_the_field(
    pod: GatewayPod, fields: dict[str, Any], param: str
) -> None:
    """Wrong types, bools given as 0/1 (or the other way), out-of-range values: 400
    naming the field, nothing forwarded (never keyed as if it were a valid value)."""
    before = pod.upstream_calls()
    refused(post(pod, body(**fields)), 400, param)
    assert pod.upstream_calls() == before


def test_unknown_part_type_is_keyed_apart(pod: GatewayPod) -> None:
    """A content part of a type the gateway does not know is keyed whole: the same
    text without it is another request (the stand-in ignores it: same answer text)."""
    text = f"parts {uuid.uuid4().hex}"
    parts = [{"type": "text", "text": text}]
    plain = {"model": MODEL, "messages": [{"role": "user", "content": parts}]}
    odd = json.loads(json.dumps(plain))
    odd["messages"][0]["content"].append({"type": "hologram", "hologram": {"x": 1}})
    assert post(pod, plain).header("x-infercache-cache") == "miss"
    assert post(pod, plain).header("x-infercache-cache") == "hit"
    assert post(pod, odd).header("x-infercache-cache") == "miss"


@pytest.mark.parametrize("stream", [False, True])
def test_n_above_one_is_cached_whole(pod: GatewayPod, stream: bool) -> None:
    """n=2 (streamed or not): miss, then a hit with both choices; n=1 is another key."""
    doc = body(n=2, temperature=0, stream=stream)
    first = post(pod, doc)
    assert first.status == 200, first
    assert first.header("x-infercache-cache") == "miss"
    again = post(pod, doc)
    assert again.header("x-infercache-cache") == "hit"
    if not stream:
        assert [c["index"] for c in json.loads(again.body)["choices"]] == [0, 1]
        assert json.loads(again.body)["choices"] == json.loads(first.body)["choices"]
    assert post(pod, doc | {"n": 1}).header("x-infercache-cache") == "miss"


@pytest.mark.parametrize(("field", "value"), [("logprobs", True), ("echo", True)])
def test_logprobs_and_echo_are_keyed(pod: GatewayPod, field: str, value: Any) -> None:
    """logprobs / echo change the answer's shape: never served from the plain answer."""
    doc = body(temperature=0)
    assert post(pod, doc).status == 200
    assert post(pod, doc).header("x-infercache-cache") == "hit"
    resp = post(pod, doc | {field: value})
    assert resp.header("x-infercache-cache") in ("miss", "bypass"), resp


# -- credentials --------------------------------------------------------------------


def _auth(pod: GatewayPod, headers: list[tuple[str, str]]) -> RawResponse:
    return post(pod, body(), [JSON_TYPE, *headers])


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [("Authorization", "Bearer sk-wrong-0123456789abcdef")],
        [("Authorization", f"Basic {KEY}")],
        [("Authorization", KEY)],
        [("Authorization", "Bearer")],
        [("Authorization", f"Bearer {KEY[:-1]}")],
        [("Authorization", f"Bearer {KEY}x")],
        [("Authorization", "Bearer " + KEY.replace("a", "\u0430"))],
        [("x-api-key", KEY)],
        [("api-key", "sk-wrong-0123456789abcdef")],
    ],
    ids=[
        "none",
        "wrong",
        "basic",
        "no-scheme",
        "scheme-only",
        "prefix",
        "suffix",
        "cyrillic-lookalike",
        "x-api-key",
        "wrong-api-key",
    ],
)
def test_bad_credentials_are_401_with_www_authenticate(
    pod: GatewayPod, headers: list[tuple[str, str]]
) -> None:
    """No key, a wrong or look-alike key, another scheme: 401 with WWW-Authenticate,
    the key presented never echoed back."""
    raw = [(k, v.encode().decode("latin-1")) for k, v in headers]
    resp = _auth(pod, raw)
    err = refused(resp, 401, code="invalid_api_key")
    assert err["type"] == "authentication_error"
    assert (resp.header("www-authenticate") or "").startswith("Bearer")
    for _, value in headers:
        secret = value.split(" ")[-1]
        if len(secret) > 8:
            assert secret.encode() not in resp.body


@pytest.mark.parametrize(
    "headers",
    [
        [("Authorization", f"bearer {KEY}")],
        [("Authorization", f"BEARER {KEY}")],
        [("Authorization", f"Bearer   {KEY}  ")],
        [("api-key", KEY)],
    ],
    ids=["lowercase", "uppercase", "extra-spaces", "api-key"],
)
def test_accepted_credential_spellings(pod: GatewayPod, headers: list[tuple[str, str]]) -> None:
    """The scheme is case-insensitive (RFC 9110) and spaces around the key are not part of it."""
    resp = _auth(pod, headers)
    assert resp.status == 200, resp


def test_two_authorization_headers_are_400(pod: GatewayPod) -> None:
    """Two Authorization lines (even one valid): 400 naming the header, nothing forwarded."""
    wrong = ("Authorization", "Bearer sk-globex-0123456789abcdef")
    for headers in ([AUTH, wrong], [wrong, AUTH], [AUTH, AUTH]):
        refused(_auth(pod, headers), 400, "authorization", "duplicate_header")


def test_keys_are_never_logged(pod: GatewayPod) -> None:
    """Neither a valid nor a refused key appears in the sidecar's log."""
    wrong = "sk-never-logged-0123456789"
    _auth(pod, [("Authorization", f"Bearer {wrong}")])
    _auth(pod, [AUTH, AUTH])
    post(pod, body(), [AUTH, JSON_TYPE, ("Cache-Control", "max-age=\xb2")])
    assert pod.sidecar is not None
    log = pod.sidecar.stderr()
    assert wrong not in log
    assert KEY not in log


# -- control headers ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Cache-Control", "max-age=abc"),
        ("Cache-Control", "max-age=-1"),
        ("Cache-Control", "max-age=1.5"),
        ("Cache-Control", "max-age="),
        ("Cache-Control", "max-age=\xb2"),
        ("Cache-Control", "max-age=\u0661".encode().decode("latin-1")),
        ("x-infercache-cache-mode", "sometimes"),
        ("x-infercache-cache-mode", ""),
        ("x-infercache-prompt-version", "v1\tv2"),
        ("x-infercache-prompt-version", "v1\u2028".encode().decode("latin-1")),
        ("x-infercache-prompt-version", "v" * 257),
        ("x-infercache-prompt-version", "\xff\xfe"),
        ("x-infercache-replay-pace", "warp"),
        ("x-infercache-replay-pace", "nan"),
    ],
    ids=lambda x: x[:24],
)
def test_bad_control_headers_are_400_naming_the_header(
    pod: GatewayPod, name: str, value: str
) -> None:
    """A malformed control header: 400 naming it, nothing forwarded."""
    before = pod.upstream_calls()
    resp = post(pod, body(), [AUTH, JSON_TYPE, (name, value)])
    if name == "x-infercache-replay-pace":
        assert resp.status == 200  # not read on a request that does not stream
        return
    refused(resp, 400, name.lower(), "invalid_header")
    assert pod.upstream_calls() == before


def test_bad_replay_pace_is_400_on_a_streamed_hit(pod: GatewayPod) -> None:
    """A streamed hit with a bad pace header: 400 naming it (a streamed miss too)."""
    doc = body(temperature=0, stream=True)
    assert post(pod, doc).status == 200
    resp = post(pod, doc, [AUTH, JSON_TYPE, ("x-infercache-replay-pace", "warp")])
    refused(resp, 400, "x-infercache-replay-pace", "invalid_header")


def test_huge_max_age_counts_as_the_largest(pod: GatewayPod) -> None:
    """max-age beyond 2**31 is the largest age (RFC 9111 1.2.2): a hit, not an error."""
    doc = body(temperature=0)
    assert post(pod, doc).status == 200
    resp = post(pod, doc, [AUTH, JSON_TYPE, ("Cache-Control", "max-age=" + "9" * 40)])
    assert resp.header("x-infercache-cache") == "hit", resp


@pytest.mark.parametrize(
    "name", ["x-infercache-cache-mode", "x-infercache-prompt-version", "Content-Type"]
)
def test_single_value_headers_given_twice_are_400(pod: GatewayPod, name: str) -> None:
    """A one-value header on two lines: 400 naming it (which one counts is a guess)."""
    values = {
        "x-infercache-cache-mode": ("read-only", "off"),
        "x-infercache-prompt-version": ("v1", "v2"),
        "Content-Type": ("application/json", "application/json"),
    }[name]
    headers = [AUTH, *((name, v) for v in values)]
    if name != "Content-Type":
        headers.append(JSON_TYPE)
    refused(post(pod, body(), headers), 400, name.lower(), "duplicate_header")


def test_cache_control_lines_are_joined(pod: GatewayPod) -> None:
    """Cache-Control on two lines is one list: no-store on the second line counts."""
    doc = body(temperature=0)
    headers = [AUTH, JSON_TYPE, ("Cache-Control", "max-age=60"), ("Cache-Control", "no-store")]
    assert post(pod, doc, headers).header("x-infercache-cache") == "miss"
    assert post(pod, doc).header("x-infercache-cache") == "miss"  # nothing was stored


# -- clients that go away ----------------------------------------------------------


def _first_event(pod: GatewayPod, doc: dict[str, Any]) -> tuple[float, bytes]:
    """Send `doc` (a stream), read until its first event; seconds taken, bytes read."""
    data = json.dumps(doc).encode()
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: x\r\n{AUTH[0]}: {AUTH[1]}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode()
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", pod.port), timeout=60) as sock:
        sock.sendall(head + data)
        got = b""
        while b"data: " not in got and (piece := sock.recv(65536)):
            got += piece
    return time.monotonic() - t0, got


def test_client_gone_mid_stream_frees_the_lease(pod: GatewayPod) -> None:
    """A client that leaves mid-stream: nothing stored, and the next identical request
    starts its own stream at once instead of waiting out the single-flight wait."""
    doc = body(stream=True, temperature=0)
    doc["messages"][0]["content"] += " [[trickle]]"
    _, first = _first_event(pod, doc)  # then the socket closes mid-stream
    assert b"x-infercache-cache: miss" in first.lower()
    elapsed, second = _first_event(pod, doc)
    assert b"x-infercache-cache: miss" in second.lower()
    assert elapsed < 3.0, elapsed  # the wait is INFERCACHE_GATEWAY_WAIT_MS = 30 s


def test_two_different_credentials_are_refused_and_two_equal_ones_accepted(
    pod: GatewayPod,
) -> None:
    """Authorization and api-key naming different keys: 400, never "Authorization wins"
    (a proxy in front may have checked the other one); the same key twice is one key."""
    other = "sk-other-0123456789abcdef"
    resp = _auth(pod, [("Authorization", f"Bearer {KEY}"), ("api-key", other)])
    refused(resp, 400, code="conflicting_credentials")
    assert other.encode() not in resp.body
    assert KEY.encode() not in resp.body
    assert _auth(pod, [("Authorization", f"Bearer {KEY}"), ("api-key", KEY)]).status == 200


def test_stream_options_without_stream_is_400_whether_or_not_an_answer_is_cached(
    pod: GatewayPod,
) -> None:
    """As OpenAI and vLLM answer it; before, a cached answer made it a 200 hit."""
    doc = body()
    assert post(pod, doc, [JSON_TYPE, AUTH]).status == 200  # now cached
    with_options = doc | {"stream_options": {"include_usage": True}}
    for _ in range(2):
        err = refused(post(pod, with_options, [JSON_TYPE, AUTH]), 400, code="invalid_value")
        assert err["param"] == "stream_options"

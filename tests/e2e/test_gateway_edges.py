"""The gateway's HTTP surface probed like an attacker would: methods and paths, odd
bodies, odd headers and credentials, over raw sockets against a real
`infercache serve --gateway-listen` and the stand-in model server. Every refusal is
an OpenAI-style error with the right status; nothing reaches the model server."""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.gateway import API_KEYS, GatewayPod, chat_body
from tests.support.raw_http import RawResponse, refused, request

pytestmark = pytest.mark.e2e

MAX_BODY = 64 * 1024
CHAT = "/v1/chat/completions"
AUTH = ("Authorization", f"Bearer {API_KEYS['acme']}")
JSON_TYPE = ("Content-Type", "application/json")


@pytest.fixture(scope="module")
def pod() -> Iterator[GatewayPod]:
    """One model server and one gateway sidecar for the module."""
    p = GatewayPod(gateway_max_body_bytes=str(MAX_BODY))
    yield p
    p.stop()


def body(**fields: Any) -> dict[str, Any]:
    """A chat body with a unique prompt, `fields` added."""
    return chat_body("edge", **fields)


def post(
    pod: GatewayPod,
    raw: bytes | dict[str, Any],
    headers: list[tuple[str, str]] | None = None,
    **kw: Any,
) -> RawResponse:
    """A POST to the chat route with the acme key and a JSON content type."""
    data = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
    hdrs = [AUTH, JSON_TYPE] if headers is None else headers
    return request(pod.port, "POST", CHAT, hdrs, data, **kw)


# -- methods and paths ------------------------------------------------------------


def test_get_on_a_post_route_is_405_with_allow(pod: GatewayPod) -> None:
    """GET on a completion route: 405 naming the allowed methods in Allow."""
    resp = request(pod.port, "GET", CHAT, [AUTH])
    refused(resp, 405, code="method_not_allowed")
    assert resp.header("allow") == "POST, OPTIONS"


def test_post_on_models_is_405_with_allow(pod: GatewayPod) -> None:
    """POST on /v1/models: 405 with Allow: GET, HEAD, OPTIONS."""
    resp = request(pod.port, "POST", "/v1/models", [AUTH, JSON_TYPE], b"{}")
    refused(resp, 405, code="method_not_allowed")
    assert resp.header("allow") == "GET, HEAD, OPTIONS"


def test_unknown_path_is_404(pod: GatewayPod) -> None:
    """A path the gateway does not serve: 404 OpenAI-style, with or without a key."""
    for headers in ([AUTH], []):
        refused(request(pod.port, "GET", "/v1/nothing", headers), 404, code="not_found")
        refused(request(pod.port, "POST", "/v2/chat/completions", headers), 404)


def test_head_is_answered_like_get_without_a_body(pod: GatewayPod) -> None:
    """HEAD /health and HEAD /v1/models: the GET status and headers, no body."""
    health = request(pod.port, "HEAD", "/health")
    assert health.status == 200
    assert health.body == b""
    models = request(pod.port, "HEAD", "/v1/models", [AUTH])
    assert models.status == 200, models
    assert models.body == b""
    assert request(pod.port, "HEAD", "/v1/models").status == 401


def test_options_answers_allow_without_credentials(pod: GatewayPod) -> None:
    """OPTIONS on any route: 204 with Allow (no CORS), no key needed, nothing forwarded."""
    before = pod.upstream_calls()
    for path, allow in [(CHAT, "POST, OPTIONS"), ("/v1/models", "GET, HEAD, OPTIONS")]:
        resp = request(pod.port, "OPTIONS", path)
        assert resp.status == 204, resp
        assert resp.header("allow") == allow
        assert resp.body == b""
    assert pod.upstream_calls() == before


# -- bodies ------------------------------------------------------------------------

_VALID = json.dumps(body()).encode()


@pytest.mark.parametrize(
    ("raw", "param", "code"),
    [
        (b"", None, "invalid_json"),
        (b"   ", None, "invalid_json"),
        (b"\x00\x01", None, "invalid_json"),
        (b'"just a string"', "body", None),
        (b"null", "body", None),
        (b"[]", "body", None),
        (_VALID.replace(b'"model"', b'"temperature": Infinity, "model"'), None, "invalid_json"),
        (_VALID.replace(b'"model"', b'"temperature": -Infinity, "model"'), None, "invalid_json"),
        (_VALID.replace(b'"model"', b'"temperature": 1e400, "model"'), None, "invalid_json"),
        (_VALID.replace(b'"model"', b'"x_huge": -1e400, "model"'), None, "invalid_json"),
        (_VALID.replace(b'"model"', b'"max_tokens": ' + b"9" * 5000 + b', "model"'), None, None),
        (
            _VALID.replace(b'"model"', b'"temperature": ' + b"9" * 4000 + b', "model"'),
            "temperature",
            None,
        ),
        (_VALID.replace(b'"model"', b'"seed": ' + b"9" * 40 + b', "model"'), "seed", None),
        (_VALID.replace(b"edge", b"\xff\xfe bad utf-8"), None, "invalid_json"),
        (_VALID.replace(b"edge", b"\xed\xa0\x80"), None, "invalid_json"),
        (b"\xef\xbb\xbf" + _VALID, None, "invalid_json"),
        (_VALID.decode().encode("utf-16"), None, "invalid_json"),
        (_VALID.replace(b"edge", b"\\ud800"), None, "invalid_json"),
        (_VALID.replace(b'"model"', b'"x_tag": "\\udfff", "model"'), None, "invalid_json"),
        (_VALID.replace(b'"model"', b'"user": "\\ud83d", "model"'), None, "invalid_json"),
        (b"[" * 30_000 + b"]" * 30_000, None, "invalid_json"),
        (
            _VALID.replace(b'"model"', b'"x_deep": ' + b"[" * 20_000 + b"]" * 20_000 + b',"model"'),
            None,
            "invalid_json",
        ),
    ],
    ids=[
        "empty",
        "blank",
        "binary",
        "string",
        "null",
        "array",
        "infinity",
        "minus-infinity",
        "1e400",
        "1e400-unknown-field",
        "int-5000-digits",
        "int-4000-digits-as-float",
        "int-beyond-int64",
        "invalid-utf8",
        "encoded-surrogate",
        "bom",
        "utf16",
        "lone-surrogate-escape",
        "lone-low-surrogate-unknown-field",
        "lone-surrogate-excluded-field",
        "deep-array",
        "deep-field",
    ],
)
def test_bad_bodies_are_400(
    pod: GatewayPod, raw: bytes, param: str | None, code: str | None
) -> None:
    """Bodies that are not one clean JSON object: 400 naming the problem, never 500,
    nothing forwarded."""
    before = pod.upstream_calls()
    refused(post(pod, raw), 400, param, code)
    assert pod.upstream_calls() == before


@pytest.mark.parametrize(
    ("template", "param"),
    [
        ('{{"model": "tiny", "temperature": 0, "temperature": 1, "messages": {m}}}', "temperature"),
        ('{{"model": "tiny", "model": "other", "messages": {m}}}', "model"),
        (
            '{{"model": "tiny", "messages": [{{"role": "user", "content": "{t}", '
            '"content": "other"}}]}}',
            "content",
        ),
        (
            '{{"model": "tiny", "messages": {m}, "response_format": {{"type": "json_schema", '
            '"json_schema": {{"name": "a", "schema": {{"type": "object", "type": "array"}}}}}}}}',
            "type",
        ),
        ('{{"model": "tiny", "messages": {m}, "x_unknown": {{"a": 1, "a": 2}}}}', "a"),
        ('{{"model": "tiny", "messages": {m}, "user": "a", "user": "b"}}', "user"),
    ],
    ids=["top-level", "model", "message", "schema", "unknown-field", "excluded-field"],
)
def test_duplicate_keys_are_400_naming_the_key(pod: GatewayPod, template: str, param: str) -> None:
    """A key given twice in one object (at any depth): two parsers could read two
    requests from one body, so it is refused with 400 naming the key."""
    messages = json.dumps([{"role": "user", "content": f"dup {uuid.uuid4().hex}"}])
    raw = template.format(m=messages, t=f"dup {uuid.uuid4().hex}").encode()
    before = pod.upstream_calls()
    err = refused(post(pod, raw), 400, code="duplicate_key")
    assert param in err["message"]
    assert err["param"] is not None
    assert err["param"].endswith(param)
    assert pod.upstream_calls() == before


def test_body_over_the_limit_with_and_without_content_length(pod: GatewayPod) -> None:
    """413 whether the size is declared, chunked, or only known once read (no framing:
    read until the client half-closes)."""
    big = json.dumps(body(pad="x" * MAX_BODY)).encode()
    refused(post(pod, big), 413, code="request_too_large")
    refused(post(pod, b"", chunks=[big[:1000], big[1000:]]), 413, code="request_too_large")
    lying = request(pod.port, "POST", CHAT, [AUTH, JSON_TYPE, ("Content-Length", "10")], big)
    assert lying.status in (400, 413), lying  # the extra bytes are a second (bad) request


def test_chunked_body_is_read_whole(pod: GatewayPod) -> None:
    """A chunked request body is reassembled: the same answer, then a hit."""
    raw = json.dumps(body(temperature=0)).encode()
    first = post(pod, b"", chunks=[raw[:7], raw[7:20], raw[20:]])
    assert first.status == 200, first
    assert first.header("x-infercache-cache") == "miss"
    again = post(pod, raw)
    assert again.header("x-infercache-cache") == "hit"
    assert json.loads(again.body)["choices"] == json.loads(first.body)["choices"]


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "gzip, identity"])
def test_content_encoded_bodies_are_415(pod: GatewayPod, encoding: str) -> None:
    """A compressed request body is not decoded: 415 naming Content-Encoding."""
    raw = gzip.compress(json.dumps(body()).encode())
    headers = [AUTH, JSON_TYPE, ("Content-Encoding", encoding)]
    refused(post(pod, raw, headers), 415, "content-encoding", "unsupported_content_encoding")


def test_identity_content_encoding_is_accepted(pod: GatewayPod) -> None:
    """Content-Encoding: identity is no encoding."""
    resp = post(pod, body(), [AUTH, JSON_TYPE, ("Content-Encoding", "identity")])
    assert resp.status == 200, resp


@pytest.mark.parametrize(
    "kind", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x"]
)
def test_non_json_content_types_are_415(pod: GatewayPod, kind: str) -> None:
    """A body declared as something else than JSON: 415 naming Content-Type."""
    refused(
        post(pod, body(), [AUTH, ("Content-Type", kind)]),
        415,
        "content-type",
        "unsupported_media_type",
    )


@pytest.mark.parametrize(
    "kind", [None, "application/json", "application/json; charset=utf-8", "Application/JSON"]
)
def test_json_content_types_are_accepted(pod: GatewayPod, kind: str | None) -> None:
    """No Content-Type, or JSON (any case, UTF-8 charset): served."""
    headers = [AUTH] + ([("Content-Type", kind)] if kind else [])
    resp = post(pod, body(), headers)
    assert resp.status == 200, resp


def test_json_with_another_charset_is_415(pod: GatewayPod) -> None:
    """A JSON body declared in another charset: 415 (JSON is UTF-8, RFC 8259)."""
    headers = [AUTH, ("Content-Type", "application/json; charset=latin-1")]
    refused(post(pod, body(), headers), 415, "content-type", "unsupported_media_type")

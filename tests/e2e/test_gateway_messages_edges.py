"""Refusals on /v1/messages in Anthropic's error form and status codes, credentials by
x-api-key as well as Authorization, and output-shaping fields kept apart through the
gateway (the whole table: tests/unit/test_messages_keys.py)."""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.support.gateway import API_KEYS, MODEL, GatewayPod
from tests.support.messages import anthropic_error, messages_body, post_messages

pytestmark = pytest.mark.e2e

MAX_BODY = 32 * 1024


@pytest.fixture(scope="module")
def pod() -> Iterator[GatewayPod]:
    p = GatewayPod(
        model_server_model=MODEL,
        gateway_max_body_bytes=str(MAX_BODY),
        gateway_upstream_timeout_s="1",
        slow_s=3.0,
    )
    yield p
    p.stop()


def unique(text: str = "edge") -> str:
    return f"{text} {uuid.uuid4().hex}"


def test_x_api_key_names_the_tenant(pod: GatewayPod) -> None:
    """x-api-key (the SDK's header) and Authorization: Bearer are the same key: a hit."""
    body = messages_body(unique())
    s1, h1, _ = post_messages(pod, body)
    s2, h2, _ = pod.post("/v1/messages", body, tenant="acme")
    assert (s1, s2) == (200, 200)
    assert (h1["x-infercache-cache"], h2["x-infercache-cache"]) == ("miss", "hit")


@pytest.mark.parametrize(
    ("headers", "status", "kind"),
    [
        ({}, 401, "authentication_error"),
        ({"x-api-key": "sk-nobody-0123456789abcdef"}, 401, "authentication_error"),
        (
            {"x-api-key": API_KEYS["acme"], "authorization": f"Bearer {API_KEYS['globex']}"},
            400,
            "invalid_request_error",
        ),
        (
            {"x-api-key": API_KEYS["acme"], "api-key": API_KEYS["globex"]},
            400,
            "invalid_request_error",
        ),
    ],
)
def test_credentials_refused_in_anthropic_form(
    pod: GatewayPod, headers: dict[str, str], status: int, kind: str
) -> None:
    """Missing, unknown or two different keys: Anthropic's error body and status."""
    code, _, raw = pod.post("/v1/messages", messages_body(unique()), headers, tenant="")
    assert code == status
    assert anthropic_error(raw)[0] == kind


def test_the_same_key_twice_is_one_key(pod: GatewayPod) -> None:
    headers = {"x-api-key": API_KEYS["acme"], "authorization": f"Bearer {API_KEYS['acme']}"}
    assert pod.post("/v1/messages", messages_body(unique()), headers, tenant="")[0] == 200


def test_the_sdk_raises_its_own_errors(pod: GatewayPod) -> None:
    """Anthropic's SDK reads the gateway's refusals as it reads Anthropic's."""
    url = f"http://127.0.0.1:{pod.port}"
    with anthropic.Anthropic(base_url=url, api_key="sk-nobody-0123456789abcdef") as c:
        with pytest.raises(anthropic.AuthenticationError) as err:
            c.messages.create(
                model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "x"}]
            )
        assert err.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    with anthropic.Anthropic(base_url=url, api_key=API_KEYS["acme"], max_retries=0) as c:
        bad_turn: Any = {"role": "user", "content": 3}
        with pytest.raises(anthropic.BadRequestError) as bad:
            c.messages.create(model=MODEL, max_tokens=8, messages=[bad_turn])
        assert "messages[0].content" in bad.value.message


BAD: list[tuple[Any, dict[str, str], int, str]] = [
    (b"{not json", {}, 400, "invalid_request_error"),
    (b'{"model": "tiny", "model": "tiny"}', {}, 400, "invalid_request_error"),
    (b"[]", {}, 400, "invalid_request_error"),
    (
        {"model": MODEL, "messages": [{"role": "user", "content": "x"}]},
        {},
        400,
        "invalid_request_error",
    ),
    (messages_body("x", max_tokens=-1), {}, 400, "invalid_request_error"),
    (messages_body("x", temperature="hot"), {}, 400, "invalid_request_error"),
    (messages_body("x", messages={"role": "user"}), {}, 400, "invalid_request_error"),
    (messages_body("x", tool_choice="any"), {}, 400, "invalid_request_error"),
    (messages_body("x", system=[{"no": "type"}]), {}, 400, "invalid_request_error"),
    (messages_body("x"), {"content-type": "text/plain"}, 415, "invalid_request_error"),
    (messages_body("x"), {"content-encoding": "gzip"}, 415, "invalid_request_error"),
    (messages_body("x" * (MAX_BODY + 1)), {}, 413, "request_too_large"),
    (messages_body("x", top_p=7.0), {}, 400, "invalid_request_error"),
]


@pytest.mark.parametrize(("body", "headers", "status", "kind"), BAD)
def test_bad_input_is_a_4xx_in_anthropic_form(
    pod: GatewayPod, body: Any, headers: dict[str, str], status: int, kind: str
) -> None:
    """Never a 5xx for bad input, never OpenAI's error form on /v1/messages."""
    code, got, raw = post_messages(pod, body, headers)
    assert code == status, raw
    assert got["content-type"] == "application/json"
    assert anthropic_error(raw)[0] == kind


def test_routes_and_methods_in_anthropic_form(pod: GatewayPod) -> None:
    """An unknown route under /v1/messages is Anthropic's 404; GET is 405."""
    code, _, raw = pod.post("/v1/messages/count_tokens", messages_body("x"), tenant="acme")
    assert (code, anthropic_error(raw)[0]) == (404, "not_found_error")
    req = urllib.request.Request(f"http://127.0.0.1:{pod.port}/v1/messages", method="GET")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    with err.value as resp:
        assert resp.code == 405
        assert anthropic_error(resp.read())[0] == "invalid_request_error"


def test_upstream_timeout_is_anthropic_timeout_error(pod: GatewayPod) -> None:
    """The model server past INFERCACHE_GATEWAY_UPSTREAM_TIMEOUT_S: 504 timeout_error."""
    code, _, raw = post_messages(pod, messages_body(unique("[[slow]]")))
    assert (code, anthropic_error(raw)[0]) == (504, "timeout_error")


def test_openai_routes_keep_openai_errors(pod: GatewayPod) -> None:
    code, _, raw = pod.post("/v1/chat/completions", b"{not json", tenant="acme")
    assert code == 400
    assert b'"type":"error"' not in raw.replace(b" ", b"")
    assert b'"error"' in raw


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": 0.0},
        {"temperature": None},
        {"top_k": 3},
        {"stop_sequences": ["zz"]},
        {"system": "be brief"},
        {"max_tokens": 65},
        {"thinking": {"type": "disabled"}},
        {"tools": [{"name": "f", "input_schema": {"type": "object"}}]},
        {"new_field": 1},
    ],
)
def test_each_field_separates_through_the_gateway(pod: GatewayPod, change: dict[str, Any]) -> None:
    """The same prompt with one field added is a miss with another key, never a hit."""
    base = messages_body(unique("field"))
    _, h1, _ = post_messages(pod, base)
    _, h2, _ = post_messages(pod, base | change)
    assert h2["x-infercache-cache"] == "miss"
    assert h1["x-infercache-key"] != h2["x-infercache-key"]
    if "new_field" in change:
        assert h2["x-infercache-unknown-fields"] == "new_field"


def test_cache_control_and_metadata_share_the_answer(pod: GatewayPod) -> None:
    """Hints and metadata do not shape vLLM's answer: the hinted request is a hit."""
    text = unique("hinted")
    plain = messages_body(
        "x", messages=[{"role": "user", "content": [{"type": "text", "text": text}]}]
    )
    hinted = messages_body(
        "x",
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}],
            }
        ],
        metadata={"user_id": "u-7"},
    )
    _, h1, _ = post_messages(pod, plain)
    _, h2, _ = post_messages(pod, hinted)
    _, h3, _ = post_messages(pod, hinted, tenant="globex")
    assert [h["x-infercache-cache"] for h in (h1, h2, h3)] == ["miss", "hit", "miss"]

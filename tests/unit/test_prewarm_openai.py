"""Prewarm's model-server call: the attached request sent byte for byte, and answers back
to payloads."""

from __future__ import annotations

import json

import httpx
import pytest

from sidecar.prewarm.item import replay_call
from sidecar.prewarm.records import ReplayRequest
from sidecar.prewarm.upstream import HttpModelServer, UpstreamFailure
from sidecar.wire.openai.answers import BadAnswer, PayloadFormat, UpstreamCall, parse_answer
from sidecar.wire.openai.routes import CHAT_PATH, COMPLETIONS_PATH

TEXT = PayloadFormat.TEXT
# Odd spacing, key order and a field prewarm knows nothing about: all must survive.
BODY = b'{"prompt": "q",  "model":"m", "tools":[{"type":"function"}], "x_vendor": 1}'
CALL = UpstreamCall(COMPLETIONS_PATH, "application/json", BODY)


def _body(**doc: object) -> bytes:
    return json.dumps(doc).encode()


def test_the_call_is_the_attached_request_unchanged() -> None:
    """replay_call keeps path, media type and body bytes as attached."""
    call = replay_call(ReplayRequest(CHAT_PATH, "application/json", BODY))
    assert (call.path, call.content_type, call.body) == (CHAT_PATH, "application/json", BODY)


async def _requests_sent(call: UpstreamCall, api_key: str = "") -> list[httpx.Request]:
    """The requests HttpModelServer sends for `call` (answered with a small completion)."""
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"model": "m", "choices": [{"text": "a"}]})

    server = HttpModelServer(
        "http://model",
        timeout_s=5,
        max_connections=1,
        max_response_bytes=1 << 20,
        transport=httpx.MockTransport(answer),
        api_key=api_key,
    )
    try:
        await server.complete(call)
    finally:
        await server.close()
    return seen


async def test_the_model_server_receives_the_body_byte_for_byte() -> None:
    """HttpModelServer POSTs the body as given (no JSON re-encoding) with its media type."""
    (request,) = await _requests_sent(CALL)
    assert request.url.path == COMPLETIONS_PATH
    assert request.content == BODY
    assert request.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("api_key", "sent"), [("", None), ("sk-model-server", "Bearer sk-model-server")]
)
async def test_the_model_servers_key_is_sent_as_the_gateway_sends_it(
    api_key: str, sent: str | None
) -> None:
    """INFERCACHE_GATEWAY_UPSTREAM_API_KEY (vLLM --api-key) goes with prewarm's calls too:
    before 2026-12-02 prewarm sent none, and every call to such a server was a 401."""
    (request,) = await _requests_sent(CALL, api_key)
    assert request.headers.get("authorization") == sent


def test_parse_answer_extracts_text_and_usage() -> None:
    """The first choice's text is the payload; usage becomes the cost."""
    body = _body(
        model="m", choices=[{"text": "ans"}], usage={"prompt_tokens": 4, "completion_tokens": 2}
    )
    answer = parse_answer(CALL, "m", body, TEXT)
    assert (answer.payload, answer.prompt_tokens, answer.completion_tokens) == (b"ans", 4, 2)
    assert parse_answer(CALL, "m", body, PayloadFormat.OPENAI_JSON).payload == body


def test_chat_answers_are_read_from_the_message() -> None:
    """A chat call's payload is the first choice's message content."""
    call = UpstreamCall(CHAT_PATH, "application/json", b"{}")
    body = _body(model="m", choices=[{"message": {"role": "assistant", "content": "hi"}}])
    assert parse_answer(call, "m", body, TEXT).payload == b"hi"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"<html>", "upstream_bad_response"),
        (_body(model="other", choices=[{"text": "a"}]), "wrong_model"),
        (_body(model="m", choices=[]), "upstream_bad_response"),
        (_body(model="m", choices=[{"message": {"content": "a"}}]), "upstream_bad_response"),
    ],
)
def test_unusable_answers_are_refused(body: bytes, reason: str) -> None:
    """Not JSON, another model, no choices or the wrong shape: BadAnswer with a reason."""
    with pytest.raises(BadAnswer) as err:
        parse_answer(CALL, "m", body, TEXT)
    assert err.value.reason == reason


@pytest.mark.parametrize(
    "path",
    [
        "http://evil/v1/completions",
        "//evil/v1/completions",
        "evil/v1/completions",
        "/v1@evil/completions",
        "/v1/../../completions",
        "/v1/./completions",
        "/v1/completions?x=1",
        "/v1/completions#f",
        "/v1/%2e%2e/completions",
        "/v1/completions\r\nHost: evil",
        "/v1\\completions",
        "/v1/completions ",
    ],
)
async def test_a_call_never_leaves_the_model_servers_origin(path: str) -> None:
    """Whatever path a call names (a record read from a shared store), the model server's
    client sends nothing (and so not its key) anywhere but the configured origin."""
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"model": "m", "choices": [{"text": "a"}]})

    server = HttpModelServer(
        "http://model",
        timeout_s=5,
        max_connections=1,
        max_response_bytes=1 << 20,
        transport=httpx.MockTransport(answer),
        api_key="secret",
    )
    try:
        with pytest.raises(UpstreamFailure) as err:
            await server.complete(UpstreamCall(path, "application/json", BODY))
        assert err.value.reason == "bad_path"
        assert seen == []
        await server.complete(UpstreamCall(COMPLETIONS_PATH, "application/json", BODY))
        assert [str(r.url) for r in seen] == ["http://model/v1/completions"]
    finally:
        await server.close()

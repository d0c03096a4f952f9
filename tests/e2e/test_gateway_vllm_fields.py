"""Requests vLLM answers differently though the gateway once keyed them alike, against a
real gateway process and model server: the second of each pair is a miss (its own
answer from upstream), never the first's answer; requests the gateway cannot key
safely are forwarded uncached (bypass) every time. The unit tests in
tests/unit/test_gateway_vllm_fields.py hold the reasons, field by field."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.gateway import API_KEYS, MODEL, GatewayPod
from tests.support.raw_http import RawResponse, request

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
HEADERS = [("Authorization", f"Bearer {API_KEYS['acme']}"), ("Content-Type", "application/json")]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


@pytest.fixture(scope="module")
def pod() -> Iterator[GatewayPod]:
    p = GatewayPod()
    yield p
    p.stop()


def post(pod: GatewayPod, doc: dict[str, Any]) -> RawResponse:
    resp = request(pod.port, "POST", CHAT, HEADERS, json.dumps(doc).encode())
    assert resp.status == 200, resp.body
    return resp


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"tools": [TOOL]}, {"tools": [TOOL], "tool_choice": None}),
        ({"logprobs": True}, {"logprobs": True, "top_logprobs": None}),
        ({}, {"echo": None}),
        ({"structured_outputs": {"json": SCHEMA}}, {"guided_json": SCHEMA}),
        ({"structured_outputs": {"regex": "[0-9]+"}}, {"guided_regex": "[0-9]+"}),
        (
            {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "f"}}},
            {"tools": [TOOL], "tool_choice": '{"type":"function","function":{"name":"f"}}'},
        ),
        ({}, {"cache_salt": "a/b"}),
        ({}, {"priority": 3}),
    ],
)
def test_a_pair_vllm_answers_differently_is_two_misses(
    pod: GatewayPod, first: dict[str, Any], second: dict[str, Any]
) -> None:
    prompt = f"vllm-fields {uuid.uuid4().hex}"
    base = {"model": MODEL, "messages": [{"role": "user", "content": prompt}]}
    before = pod.upstream_calls()
    a, b = post(pod, base | first), post(pod, base | second)
    assert (a.header("x-infercache-cache"), b.header("x-infercache-cache")) == ("miss", "miss")
    assert a.header("x-infercache-key") != b.header("x-infercache-key")
    assert pod.upstream_calls() == before + 2
    # And each is stored under its own key: asked again, each is a hit.
    assert post(pod, base | first).header("x-infercache-cache") == "hit"
    assert post(pod, base | second).header("x-infercache-cache") == "hit"


@pytest.mark.parametrize(
    "extra",
    [
        {"kv_transfer_params": {"do_remote_decode": True}},
        {"kv_transfer_params": {"do_remote_prefill": True, "prompt_token_ids": [1, 2]}},
        {"media": {"type": "audio_url", "audio_url": {"url": "https://example.com/a.wav"}}},
        {"media": {"type": "input_image", "image_url": "https://example.com/a.png"}},
    ],
)
def test_a_request_that_cannot_be_keyed_safely_is_forwarded_every_time(
    pod: GatewayPod, extra: dict[str, Any]
) -> None:
    content: Any = f"vllm-fields {uuid.uuid4().hex}"
    fields = dict(extra)
    if "media" in fields:
        content = [{"type": "text", "text": content}, fields.pop("media")]
    doc = {"model": MODEL, "messages": [{"role": "user", "content": content}]} | fields
    before = pod.upstream_calls()
    for _ in range(2):
        resp = post(pod, doc)
        assert resp.header("x-infercache-cache") == "bypass"
        assert resp.header("x-infercache-bypass-reason")
    assert pod.upstream_calls() == before + 2


def test_an_empty_stream_options_without_stream_is_answered_as_vllm_answers_it(
    pod: GatewayPod,
) -> None:
    doc = {"model": MODEL, "messages": [{"role": "user", "content": uuid.uuid4().hex}]}
    assert post(pod, doc | {"stream_options": {}}).header("x-infercache-cache") == "miss"

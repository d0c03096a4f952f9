"""Request fields whose meaning on vLLM the gateway's key must follow exactly: null is
not absent, vLLM's removed `guided_*` fields, fields vLLM validates though they do not
shape the answer, disaggregated-serving requests, media named by URL in part types
the gateway does not know, and hits converted between whole and streamed answers
(review of 2026-12-02; each case merged two requests, or answered approximately,
before)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sidecar.wire.openai.keys import CHAT, EMBEDDINGS, keyed_request
from sidecar.wire.openai.render import Renewal, body_from_events, events_from_body
from sidecar.wire.values import dumps
from tests.support.gateway import key_digest

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


def chat_body(**kw: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]} | kw


def digest(body: dict[str, Any], endpoint: str = CHAT) -> bytes:
    return key_digest(endpoint, body)


def uncacheable(body: dict[str, Any]) -> str:
    kr = keyed_request(CHAT, body, "acme", "p1")
    assert kr.key is None
    return kr.uncacheable


@pytest.mark.parametrize(
    ("base", "field"),
    [
        # vLLM: tools without tool_choice is "auto"; tool_choice null is none at all.
        ({"tools": [TOOL]}, "tool_choice"),
        # vLLM builds logprobs only when top_logprobs is not None.
        ({"logprobs": True}, "top_logprobs"),
        # Fields vLLM refuses null for (a 400 there, never a cached 200 here).
        ({}, "echo"),
        ({}, "add_generation_prompt"),
        ({}, "skip_special_tokens"),
        ({}, "min_tokens"),
        ({}, "length_penalty"),
        ({}, "bad_words"),
        ({}, "temperature"),
    ],
)
def test_a_known_field_sent_null_keys_apart_from_absent(base: dict[str, Any], field: str) -> None:
    assert digest(chat_body(**base, **{field: None})) != digest(chat_body(**base))


def test_null_inside_structured_outputs_and_a_null_request_id_key_apart() -> None:
    assert digest(chat_body(structured_outputs={"regex": None})) != digest(
        chat_body(structured_outputs={})
    )
    # request_id is excluded as a string only: vLLM refuses null or a number.
    assert digest(chat_body(request_id="r1")) == digest(chat_body(request_id="r2"))
    assert digest(chat_body(request_id=None)) != digest(chat_body())
    assert digest(chat_body(request_id=7)) != digest(chat_body())


def test_embeddings_encoding_format_null_is_not_absent() -> None:
    body = {"model": "tiny", "input": "hi"}
    assert digest(body | {"encoding_format": None}, EMBEDDINGS) != digest(body, EMBEDDINGS)


@pytest.mark.parametrize(
    ("legacy", "current"),
    [
        ({"guided_json": SCHEMA}, {"structured_outputs": {"json": SCHEMA}}),
        ({"guided_regex": "[0-9]+"}, {"structured_outputs": {"regex": "[0-9]+"}}),
        ({"guided_choice": ["a", "b"]}, {"structured_outputs": {"choice": ["a", "b"]}}),
        ({"structural_tag": "{}"}, {"structured_outputs": {"structural_tag": "{}"}}),
    ],
)
def test_removed_guided_fields_never_key_like_structured_outputs(
    legacy: dict[str, Any], current: dict[str, Any]
) -> None:
    """vLLM >= 0.12 ignores guided_* (unconstrained answer); structured_outputs
    constrains it."""
    kr = keyed_request(CHAT, chat_body(**legacy), "acme", "p1")
    assert kr.unknown == ()  # known names, keyed by the extra rule
    assert digest(chat_body(**legacy)) != digest(chat_body(**current))


def test_guided_json_as_a_string_and_as_an_object_key_apart() -> None:
    compact = dumps(SCHEMA)  # the text the key field holds for the object
    assert digest(chat_body(guided_json=compact)) != digest(chat_body(guided_json=SCHEMA))


def test_tool_choice_as_the_json_text_of_an_object_keys_apart_from_the_object() -> None:
    choice = {"type": "function", "function": {"name": "f"}}
    spelled = dumps(choice)  # the text the key field holds for the object
    assert digest(chat_body(tools=[TOOL], tool_choice=spelled)) != digest(
        chat_body(tools=[TOOL], tool_choice=choice)
    )
    assert digest(chat_body(tools=[TOOL], tool_choice="auto")) != digest(
        chat_body(tools=[TOOL], tool_choice={"auto": True})
    )


def test_structural_tag_as_a_string_and_as_an_object_key_apart() -> None:
    tag = {"a": 1}
    spelled = dumps(tag)  # the text the key field holds for the object
    assert digest(chat_body(structured_outputs={"structural_tag": spelled})) != digest(
        chat_body(structured_outputs={"structural_tag": tag})
    )


def test_priority_and_cache_salt_are_keyed() -> None:
    """They do not change the answer, but vLLM refuses some values of each."""
    base = digest(chat_body())
    assert digest(chat_body(priority=3)) != base
    assert digest(chat_body(cache_salt="a/b")) != base
    assert digest(chat_body(cache_salt="s1")) != digest(chat_body(cache_salt="s2"))


def test_stream_options_empty_without_stream_passes_as_on_vllm() -> None:
    kr = keyed_request(CHAT, chat_body(stream_options={}), "acme", "p1")
    assert kr.key is not None


def test_a_disaggregated_prefill_or_decode_request_is_not_cached() -> None:
    for params in (
        {"do_remote_decode": True},
        {"do_remote_prefill": True, "prompt_token_ids": [1]},
    ):
        assert "kv_transfer_params" in uncacheable(chat_body(kv_transfer_params=params))
    assert digest(chat_body(kv_transfer_params=None)) == digest(chat_body())


@pytest.mark.parametrize(
    "part",
    [
        {"type": "audio_url", "audio_url": {"url": "https://example.com/a.wav"}},
        {"type": "input_image", "image_url": "https://example.com/a.png"},
        {"type": "video", "video": {"source": " s3://bucket/v.mp4"}},
        {"type": "input_file", "file_url": "file:///etc/passwd"},
    ],
)
def test_a_part_type_the_gateway_does_not_know_naming_a_url_is_not_cached(
    part: dict[str, Any],
) -> None:
    """The model server fetches it; its content can change under the same text."""
    body = chat_body(messages=[{"role": "user", "content": [{"type": "text", "text": "x"}, part]}])
    assert "URL" in uncacheable(body)


def test_an_unknown_part_with_inline_data_is_still_keyed_whole() -> None:
    def with_part(url: str) -> dict[str, Any]:
        part = {"type": "audio_url", "audio_url": {"url": url}}
        return chat_body(messages=[{"role": "user", "content": [part]}])

    assert digest(with_part("data:audio/wav;base64,AAAA")) != digest(
        with_part("data:audio/wav;base64,AAAB")
    )


def test_a_tool_call_without_type_keys_apart_from_type_function() -> None:
    def turn(call: dict[str, Any]) -> dict[str, Any]:
        return chat_body(
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
            ]
        )

    fn = {"name": "f", "arguments": "{}"}
    assert digest(turn({"id": "c1", "function": fn})) != digest(
        turn({"id": "c1", "type": "function", "function": fn})
    )


def test_tool_call_id_null_keys_apart_from_absent() -> None:
    def tool_turn(**kw: Any) -> dict[str, Any]:
        return chat_body(messages=[{"role": "tool", "content": "42", **kw}])

    assert digest(tool_turn(tool_call_id=None)) != digest(tool_turn())


def vllm_body(**extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", "content": "4"}}
    choice |= {"logprobs": None, "finish_reason": "stop", "stop_reason": None}
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "tiny"}
    body |= {"choices": [choice], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    # vLLM sends these as null when not asked for: they must not block a conversion.
    body |= {"prompt_logprobs": None, "prompt_token_ids": None, "kv_transfer_params": None}
    return body | extra


def test_a_whole_answer_with_fields_a_stream_cannot_carry_is_not_converted() -> None:
    renewal = Renewal(CHAT)
    plain = events_from_body(json.dumps(vllm_body()).encode(), CHAT, False, renewal)
    assert plain is not None
    with_ids = vllm_body(prompt_token_ids=[1, 2, 3])
    assert events_from_body(json.dumps(with_ids).encode(), CHAT, False, renewal) is None
    tokens = vllm_body()
    tokens["choices"][0]["token_ids"] = [19, 271]
    assert events_from_body(json.dumps(tokens).encode(), CHAT, False, renewal) is None


def test_a_converted_stream_keeps_the_stop_reason() -> None:
    body = vllm_body()
    body["choices"][0]["stop_reason"] = "\n\n"
    events = events_from_body(json.dumps(body).encode(), CHAT, False, Renewal(CHAT))
    assert events is not None
    last = json.loads(events[-1][len(b"data: ") :])
    assert last["choices"][0]["stop_reason"] == "\n\n"
    assert last["choices"][0]["finish_reason"] == "stop"


def test_a_stream_whose_first_chunk_carries_prompt_ids_is_not_joined() -> None:
    def event(doc: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(doc).encode() + b"\n\n"

    head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "tiny"}
    first = {"index": 0, "delta": {"role": "assistant", "content": "4"}, "finish_reason": None}
    last = {"index": 0, "delta": {}, "finish_reason": "stop"}
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    plain = [
        event(head | {"choices": [first]}),
        event(head | {"choices": [last]}),
        event(head | {"choices": [], "usage": usage}),
    ]
    assert body_from_events(plain, CHAT, Renewal(CHAT)) is not None
    nulls = [event(head | {"choices": [first], "prompt_token_ids": None}), *plain[1:]]
    assert body_from_events(nulls, CHAT, Renewal(CHAT)) is not None
    ids = [event(head | {"choices": [first], "prompt_token_ids": [1, 2]}), *plain[1:]]
    assert body_from_events(ids, CHAT, Renewal(CHAT)) is None


def test_a_joined_tool_call_stream_has_content_null_like_the_whole_answer() -> None:
    def event(doc: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(doc).encode() + b"\n\n"

    head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "tiny"}
    call = {"index": 0, "id": "call_1", "type": "function"}
    call |= {"function": {"name": "f", "arguments": "{}"}}
    first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
    calls = {"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": "tool_calls"}
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    events = [
        event(head | {"choices": [first]}),
        event(head | {"choices": [calls]}),
        event(head | {"choices": [], "usage": usage}),
    ]
    whole = body_from_events(events, CHAT, Renewal(CHAT))
    assert whole is not None
    message = json.loads(whole)["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"][0]["function"]["name"] == "f"

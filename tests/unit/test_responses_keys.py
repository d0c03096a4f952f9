"""/v1/responses bodies as keys (wire/openai/responses.py): every output-shaping field
separates, null is not absent, transport fields do not, and requests that depend on the
model server's stored state are not cached."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.keys import build_key
from sidecar.wire.errors import WireError
from sidecar.wire.openai.keys import CHAT, keyed_request
from sidecar.wire.openai.responses import responses_request

FP = "fp1-test"
TOOL = {"type": "function", "name": "f", "parameters": {"type": "object"}}
IMAGE = "data:image/png;base64,iVBORw0KGgo="
CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "42"}
REASONING = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "t"}]}


def body(**kw: Any) -> dict[str, Any]:
    return {"model": "tiny", "input": "hi"} | kw


def digest(doc: dict[str, Any], tenant: str = "acme") -> bytes:
    kr = responses_request(doc, tenant, "p1")
    assert kr.key is not None, kr.uncacheable
    return build_key(kr.key, default_model_version=FP).digest


def test_transport_and_routing_fields_do_not_change_the_key() -> None:
    """stream, stream_options, prompt_cache_key, safety_identifier, session_id, a string
    request_id, store false: the same key."""
    base = digest(body(temperature=0))
    for extra in (
        {"stream": True},
        {"stream": True, "stream_options": {"include_obfuscation": False}},
        {"prompt_cache_key": "k", "prompt_cache_retention": "24h"},
        {"safety_identifier": "s", "session_id": "sess", "request_id": "r1"},
        {"store": False},
    ):
        assert digest(body(temperature=0, **extra)) == base, extra


@pytest.mark.parametrize(
    "change",
    [
        {"instructions": "be brief"},
        {"input": "hi!"},
        {"input": [{"role": "user", "content": "hi"}]},
        {"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]},
        {"input": [{"type": "message", "role": "user", "content": "hi"}]},
        {"input": [{"role": "user", "content": "hi"}, CALL, OUTPUT]},
        {"input": [{"role": "user", "content": "hi"}, REASONING]},
        {"tools": [TOOL]},
        {"tools": [TOOL], "tool_choice": "required"},
        {"tool_choice": {"type": "function", "name": "f"}},
        {"parallel_tool_calls": False},
        {"text": {"format": {"type": "json_object"}}},
        {"text": {"verbosity": "low"}},
        {"reasoning": {"effort": "low"}},
        {"max_output_tokens": 16},
        {"temperature": 0.5},
        {"top_p": 0.9},
        {"top_k": 5},
        {"seed": 1},
        {"stop": ["x"]},
        {"truncation": "auto"},
        {"include": ["message.output_text.logprobs"]},
        {"top_logprobs": 2},
        {"max_tool_calls": 1},
        {"metadata": {"a": "b"}},
        {"user": "u1"},
        {"service_tier": "flex"},
        {"background": False},
        {"chat_template_kwargs": {"enable_thinking": False}},
        {"structured_outputs": {"regex": "a+"}},
        {"vllm_xargs": {"k": 1}},
        {"cache_salt": "s"},
        {"some_new_field": 1},
    ],
)
def test_each_output_shaping_field_changes_the_key(change: dict[str, Any]) -> None:
    """A request differing in any of these fields is another answer."""
    assert digest(body(**change)) != digest(body())


@pytest.mark.parametrize(
    "name",
    [
        *("instructions", "temperature", "top_p", "max_output_tokens", "tools"),
        *("tool_choice", "parallel_tool_calls", "text", "reasoning", "include"),
        *("truncation", "metadata"),
    ],
)
def test_null_is_not_absent(name: str) -> None:
    """A field sent as null keys apart from the same field left out (vLLM applies
    defaults only to absent fields, and echoes what was sent)."""
    assert digest(body(**{name: None})) != digest(body())


def test_empty_is_not_absent() -> None:
    """tools: [] and include: [] are keyed apart from absent."""
    for name in ("tools", "include"):
        assert digest(body(**{name: []})) != digest(body()), name


def test_items_never_key_like_messages() -> None:
    """A function_call item and a message with the same role and content are apart; so
    are output_text and input_text parts, and a string content and one text part."""
    as_message = {"role": "function_call", "content": None}
    assert digest(body(input=[CALL])) != digest(body(input=[as_message]))
    out = {"role": "assistant", "content": [{"type": "output_text", "text": "x"}]}
    inp = {"role": "assistant", "content": [{"type": "input_text", "text": "x"}]}
    assert digest(body(input=[out])) != digest(body(input=[inp]))
    assert digest(body(input=[inp])) != digest(body(input=[{"role": "assistant", "content": "x"}]))
    assert digest(body(input=[{"role": "user", "content": "x"}])) != digest(body(input="x"))


def test_inline_media_is_keyed_by_its_bytes() -> None:
    """An inline image keys by its bytes and head; detail separates."""
    image = {"type": "input_image", "image_url": IMAGE}
    one = digest(body(input=[{"role": "user", "content": [image]}]))
    again = digest(body(input=[{"role": "user", "content": [dict(image)]}]))
    low = digest(body(input=[{"role": "user", "content": [image | {"detail": "low"}]}]))
    assert one == again != low


def test_a_responses_key_never_equals_a_chat_key() -> None:
    """The endpoint is part of the key: the same conversation asked of chat completions
    is another answer."""
    messages = [{"role": "user", "content": "hi"}]
    kr = keyed_request(CHAT, {"model": "tiny", "messages": messages}, "acme", "p1")
    assert kr.key is not None
    chat = build_key(kr.key, default_model_version=FP).digest
    assert digest(body(input=messages)) != chat


def test_tenants_never_share_a_key() -> None:
    """The tenant comes from authentication and separates."""
    assert digest(body(), "acme") != digest(body(), "globex")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"background": True}, "background"),
        ({"store": True}, "store"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"kv_transfer_params": {"a": 1}}, "kv_transfer_params"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "item_reference"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "file",
        ),
        (
            {
                "input": [
                    {
                        "role": "user",
                        "content": [{"type": "input_image", "image_url": "https://x/y.png"}],
                    }
                ]
            },
            "fetched",
        ),
        (
            {
                "input": [
                    {"role": "user", "content": [{"type": "input_file", "file_url": "https://x"}]}
                ]
            },
            "file",
        ),
        ({"input": []}, "empty"),
        ({"infercache_key_rules": "x"}, "infercache_key_rules"),
    ],
)
def test_what_depends_on_stored_state_is_not_cached(change: dict[str, Any], reason: str) -> None:
    """Forwarded uncached, with a reason naming why."""
    kr = responses_request(body(**change), "acme", "p1")
    assert kr.key is None
    assert reason in kr.uncacheable


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"input": 5}, "input"),
        ({"input": None}, "input"),
        ({"model": ""}, "model"),
        ({"temperature": "0"}, "temperature"),
        ({"max_output_tokens": 1.5}, "max_output_tokens"),
        ({"stream": "yes"}, "stream"),
        ({"store": "yes"}, "store"),
        ({"input": [{"type": "function_call", "call_id": 1}]}, "input[0]"),
        ({"input": [{"content": "x"}]}, "input[0].role"),
        ({"tool_choice": 3}, "tool_choice"),
    ],
)
def test_bad_bodies_are_refused_naming_the_field(change: dict[str, Any], param: str) -> None:
    """A wrong type is a WireError naming the body field (a 400 at the gateway)."""
    with pytest.raises(WireError) as err:
        responses_request(body(**change), "acme", "p1")
    assert err.value.field == param


def test_unknown_fields_are_reported() -> None:
    """A field the table does not know is keyed and listed; known ones are not."""
    kr = responses_request(body(zzz=1, instructions="x", text=None), "acme", "p1")
    assert kr.unknown == ("zzz",)

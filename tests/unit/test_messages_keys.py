"""A Messages API body's key (sidecar/wire/anthropic/keys.py, docs/keys.md "Messages"):
every field vLLM reads into the answer separates, null is not absent, cache_control
hints and the fields vLLM never reads do not, media it would fetch is not cached."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from sidecar.keys import build_key
from sidecar.wire.anthropic.keys import keyed_message_request
from sidecar.wire.errors import WireError
from sidecar.wire.openai.keys import CHAT, keyed_request

PNG = base64.b64encode(b"\x89PNG fake image bytes").decode()
HINT = {"type": "ephemeral"}


def body(**kw: Any) -> dict[str, Any]:
    return {"model": "tiny", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]} | kw


def blocks(*content: dict[str, Any], role: str = "user") -> list[dict[str, Any]]:
    return [{"role": role, "content": list(content)}]


def image(data: str = PNG) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


def digest(doc: dict[str, Any], tenant: str = "acme") -> bytes:
    kr = keyed_message_request(doc, tenant, "p1")
    assert kr.key is not None, kr.uncacheable
    return build_key(kr.key, default_model_version="fp").digest


TOOL = {"name": "lookup", "description": "d", "input_schema": {"type": "object"}}
VARIANTS: dict[str, dict[str, Any]] = {
    "base": body(),
    "model": body(model="other"),
    "content": body(messages=[{"role": "user", "content": "hi!"}]),
    "role": body(messages=[{"role": "assistant", "content": "hi"}]),
    "text block": body(messages=blocks({"type": "text", "text": "hi"})),
    "two text blocks": body(
        messages=blocks({"type": "text", "text": "h"}, {"type": "text", "text": "i"})
    ),
    "text block citations": body(messages=blocks({"type": "text", "text": "hi", "citations": []})),
    "image": body(messages=blocks(image())),
    "other image": body(messages=blocks(image(base64.b64encode(b"other").decode()))),
    "image media type": body(
        messages=blocks(
            {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": PNG}}
        )
    ),
    "tool_use": body(
        messages=blocks(
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}, role="assistant"
        )
    ),
    "tool_use input": body(
        messages=blocks(
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 2}}, role="assistant"
        )
    ),
    "text then tool_use": body(
        messages=blocks(
            {"type": "text", "text": "x"},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
            role="assistant",
        )
    ),
    "tool_use then text": body(
        messages=blocks(
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
            {"type": "text", "text": "x"},
            role="assistant",
        )
    ),
    "tool_result": body(
        messages=blocks({"type": "tool_result", "tool_use_id": "t1", "content": "4"})
    ),
    "tool_result other": body(
        messages=blocks({"type": "tool_result", "tool_use_id": "t1", "content": "5"})
    ),
    "tool_result error": body(
        messages=blocks(
            {"type": "tool_result", "tool_use_id": "t1", "content": "4", "is_error": True}
        )
    ),
    "thinking": body(
        messages=blocks({"type": "thinking", "thinking": "hm", "signature": "s"}, role="assistant")
    ),
    "message field": body(messages=[{"role": "user", "content": "hi", "name": "bob"}]),
    "system": body(system="be brief"),
    "system other": body(system="be long"),
    "system blocks": body(system=[{"type": "text", "text": "be brief"}]),
    "tools": body(tools=[TOOL]),
    "tools other": body(tools=[TOOL | {"description": "e"}]),
    "tool_choice": body(tools=[TOOL], tool_choice={"type": "any"}),
    "tool_choice auto": body(tools=[TOOL], tool_choice={"type": "auto"}),
    "tool_choice no parallel": body(
        tools=[TOOL], tool_choice={"type": "auto", "disable_parallel_tool_use": True}
    ),
    "stop_sequences": body(stop_sequences=["a", "b"]),
    "stop_sequences order": body(stop_sequences=["b", "a"]),
    "max_tokens": body(max_tokens=65),
    "temperature": body(temperature=0),
    "temperature other": body(temperature=0.5),
    "top_p": body(top_p=0.9),
    "top_k": body(top_k=5),
    "thinking enabled": body(thinking={"type": "enabled", "budget_tokens": 1024}),
    "thinking budget": body(thinking={"type": "enabled", "budget_tokens": 2048}),
    "thinking disabled": body(thinking={"type": "disabled"}),
    "output_config": body(output_config={"effort": "low"}),
    "chat_template_kwargs": body(chat_template_kwargs={"enable_thinking": False}),
    "vllm_xargs": body(vllm_xargs={"k": 1}),
    "cache_salt": body(cache_salt="s1"),
    "watermarking": body(watermarking=True),
    "unknown field": body(service_tier="auto"),
    "unknown field other": body(service_tier="standard_only"),
}


def test_every_output_shaping_field_separates() -> None:
    """No two of the variants (each one field apart from another) share a key."""
    digests = {name: digest(doc) for name, doc in VARIANTS.items()}
    seen: dict[bytes, str] = {}
    for name, d in digests.items():
        assert d not in seen, f"{name!r} keys like {seen[d]!r}"
        seen[d] = name


@pytest.mark.parametrize(
    "field",
    [
        *("system", "temperature", "top_p", "top_k", "stop_sequences", "tools", "tool_choice"),
        *("thinking", "output_config", "chat_template_kwargs", "cache_salt", "kv_transfer_params"),
    ],
)
def test_null_is_not_absent(field: str) -> None:
    """A field sent as null keys apart from the same body without it."""
    assert digest(body(**{field: None})) != digest(body())


@pytest.mark.parametrize("field", ["stop_sequences", "tools"])
def test_empty_is_not_absent(field: str) -> None:
    assert digest(body(**{field: []})) != digest(body())


def test_fields_vllm_never_reads_are_excluded() -> None:
    """metadata (user_id), stream and a top-level cache_control share the key."""
    base = digest(body())
    assert digest(body(metadata={"user_id": "u-1"})) == base
    assert digest(body(stream=True)) == base
    assert digest(body(stream=False)) == base
    assert digest(body(cache_control=HINT)) == base


def _hinted(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with cache_control on every system block, message block and tool."""
    out = copy.deepcopy(doc)
    for block in out.get("system") or ():
        block["cache_control"] = HINT
    for m in out["messages"]:
        for block in m["content"] if isinstance(m["content"], list) else ():
            block["cache_control"] = HINT
    for tool in out.get("tools") or ():
        tool["cache_control"] = HINT
    return out


def test_cache_control_hints_do_not_split_identical_requests() -> None:
    """vLLM's pydantic models drop cache_control on system blocks, message blocks and
    tools: the same prompt with and without hints is one key."""
    doc = body(
        system=[{"type": "text", "text": "be brief"}],
        messages=blocks({"type": "text", "text": "hi"}, image()),
        tools=[TOOL],
    )
    assert digest(_hinted(doc)) == digest(doc)


def test_cache_control_never_merges_tenants_or_prompts() -> None:
    """Hints are dropped, nothing else: two tenants, or two prompts, stay apart."""
    doc = _hinted(body(messages=blocks({"type": "text", "text": "hi"})))
    other = _hinted(body(messages=blocks({"type": "text", "text": "ho"})))
    assert digest(doc, "acme") != digest(doc, "globex")
    assert digest(doc) != digest(other)
    assert digest(body(cache_control=HINT), "acme") != digest(body(cache_control=HINT), "globex")


def test_cache_control_inside_tool_result_content_is_keyed() -> None:
    """vLLM renders an assistant turn's tool_result content with str(): hints included."""
    item = {"type": "text", "text": "4"}
    plain = body(messages=blocks({"type": "tool_result", "tool_use_id": "t", "content": [item]}))
    hinted = body(
        messages=blocks(
            {"type": "tool_result", "tool_use_id": "t", "content": [item | {"cache_control": HINT}]}
        )
    )
    assert digest(plain) != digest(hinted)


def test_a_messages_answer_never_answers_chat() -> None:
    """The endpoint is keyed: the same messages on /v1/chat/completions key otherwise."""
    chat = keyed_request(
        CHAT, {"model": "tiny", "max_tokens": 64, "messages": body()["messages"]}, "acme", "p1"
    )
    assert chat.key is not None
    assert build_key(chat.key, default_model_version="fp").digest != digest(body())


@pytest.mark.parametrize(
    "doc",
    [
        body(
            messages=blocks({"type": "image", "source": {"type": "url", "url": "https://x/y.png"}})
        ),
        body(messages=blocks({"type": "image", "source": {"type": "file", "file_id": "f1"}})),
        body(
            messages=blocks(
                {
                    "type": "tool_result",
                    "tool_use_id": "t",
                    "content": [{"type": "image", "source": {"type": "url", "url": "https://x"}}],
                }
            )
        ),
        body(kv_transfer_params={"do_remote_decode": True}),
        body(ec_transfer_params={"x": 1}),
        body(infercache_key_rules="x"),
    ],
)
def test_what_cannot_be_keyed_safely_is_not_cached(doc: dict[str, Any]) -> None:
    kr = keyed_message_request(doc, "acme", "p1")
    assert kr.key is None
    assert kr.uncacheable


def test_unknown_fields_are_keyed_and_reported() -> None:
    kr = keyed_message_request(body(speed="fast", container="c"), "acme", "p1")
    assert kr.unknown == ("container", "speed")
    assert kr.key is not None
    assert kr.key.extra["speed"] == '"fast"'


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}, "max_tokens"),
        (body(model=""), "model"),
        (body(max_tokens=0), "max_tokens"),
        (body(max_tokens="9"), "max_tokens"),
        (body(messages=[]), "messages"),
        (body(messages="hi"), "messages"),
        (body(messages=[{"content": "hi"}]), "messages[0].role"),
        (body(messages=[{"role": "user", "content": 3}]), "messages[0].content"),
        (body(messages=blocks({"text": "no type"})), "messages[0].content[0]"),
        (
            body(messages=blocks({"type": "image", "source": {"type": "base64", "data": "@@"}})),
            "messages[0].content[0].source.data",
        ),
        (body(temperature="hot"), "temperature"),
        (body(top_k=1.5), "top_k"),
        (body(stop_sequences="x"), "stop_sequences"),
        (body(tools={"name": "x"}), "tools"),
        (body(tool_choice="auto"), "tool_choice"),
        (body(system=3), "system"),
        (body(chat_template_kwargs=[1]), "chat_template_kwargs"),
    ],
)
def test_bad_bodies_name_the_field(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(WireError) as err:
        keyed_message_request(doc, "acme", "p1")
    assert err.value.field == field

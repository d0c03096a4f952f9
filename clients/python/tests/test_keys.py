"""make_key keys what it is given and refuses what it would otherwise drop or split: a lone
string for a list field, a message, part or tool-call field it has no key field for."""

from __future__ import annotations

from typing import Any

import pytest
from infercache.v1 import cache_pb2 as pb
from infercache_client import make_key


def _key(**kw: Any) -> pb.CacheKey:
    return make_key(tenant="acme", model_version="m", prompt_version="p", **kw)


def test_output_modalities_stay_a_list() -> None:
    # They were JSON-encoded like the JSON options, then split into characters.
    assert list(_key(text="x", output={"modalities": ["text", "audio"]}).output.modalities) == [
        "text",
        "audio",
    ]


def test_a_stop_string_is_a_list_of_one() -> None:
    # protobuf took its characters: stop="ab" was stop=["a", "b"], another request.
    assert list(_key(text="x", stop="ab").sampling.stop) == ["ab"]
    assert _key(text="x", stop="ab") == _key(text="x", stop=["ab"])


@pytest.mark.parametrize(
    "kw",
    [
        {"output": {"modalities": "text"}},
        {"bad_words": "darn"},
        {"guided": {"choice": "yes"}},
        {"stop_token_ids": b"\x01"},
    ],
)
def test_a_lone_string_for_another_list_is_refused(kw: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="takes a list"):
        _key(text="x", **kw)


def test_tools_must_be_a_list() -> None:
    with pytest.raises(TypeError, match="tools must be a list"):
        _key(text="x", tools={"type": "function"})


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"role": "assistant", "content": "x", "refusal": "no"}, r"messages\[0\]\.refusal"),
        (
            {"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {}}]},
            "cache_control",
        ),
        ({"role": "assistant", "tool_calls": [{"function": {"name": "f"}, "index": 0}]}, "index"),
        (
            {"role": "assistant", "tool_calls": [{"function": {"name": "f", "strict": True}}]},
            "strict",
        ),
    ],
)
def test_a_field_without_a_key_field_is_refused(message: dict[str, Any], field: str) -> None:
    # Dropped before: two requests differing only there were one key.
    with pytest.raises(ValueError, match=f"{field} is not a key field here: give it in extra"):
        _key(chat=[message])


def test_a_null_field_is_an_absent_one() -> None:
    assert _key(chat=[{"role": "user", "content": "x", "refusal": None}]) == _key(
        chat=[{"role": "user", "content": "x"}]
    )
    call = {"id": None, "type": None, "function": {"name": "f", "arguments": None}}
    assert _key(chat=[{"role": "assistant", "tool_calls": [call]}]).chat.messages[0].tool_calls[
        0
    ] == pb.ToolCall(type="function", name="f")


def test_vllm_reasoning_is_reasoning_content() -> None:
    a = _key(chat=[{"role": "assistant", "content": "x", "reasoning": "think"}])
    assert a == _key(chat=[{"role": "assistant", "content": "x", "reasoning_content": "think"}])
    with pytest.raises(ValueError, match="not both"):
        _key(chat=[{"role": "assistant", "reasoning": "a", "reasoning_content": "b"}])


def test_content_of_another_type_is_refused() -> None:
    with pytest.raises(TypeError, match="content must be a string, None or a list of parts"):
        _key(chat=[{"role": "user", "content": {"type": "text", "text": "x"}}])

"""The chat vectors of the golden key vectors (tests/support/key_vector_cases.py): messages,
content parts, tool calls, reasoning, and the chat template and output options."""

from __future__ import annotations

from typing import Any

SHA_A = bytes(range(32))
SHA_B = bytes(range(32, 64))
CALL = {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": '{"a":1}'}}


def user(content: Any, **fields: Any) -> dict[str, Any]:
    """make_key's chat argument of one user message."""
    return {"chat": [{"role": "user", "content": content, **fields}]}


def assistant(**fields: Any) -> dict[str, Any]:
    """make_key's chat argument of a user question and an assistant turn with `fields`."""
    return {"chat": [{"role": "user", "content": "q"}, {"role": "assistant", **fields}]}


CHAT_VECTORS: list[tuple[str, dict[str, Any], str | None]] = [
    # -- chat: content, parts, tool calls, reasoning
    ("chat", user("hello"), None),
    ("chat empty content", user(""), None),
    ("chat null content", user(None), None),
    ("chat absent content", {"chat": [{"role": "user"}]}, "chat null content"),
    ("chat one text part", user([{"type": "text", "text": "hello"}]), None),
    ("chat empty parts", user([]), "chat empty content"),
    (
        "chat parts",
        user(
            [
                {"type": "text", "text": "what is this?"},
                {"type": "image", "sha256": SHA_A, "detail": "low"},
                {"type": "audio", "sha256": SHA_B, "format": "wav"},
                {"type": "file", "sha256": SHA_A, "filename": "r\u00e9sum\u00e9.pdf"},
                {"type": "video", "sha256": SHA_B},
            ]
        ),
        None,
    ),
    ("chat image", user([{"type": "image", "sha256": SHA_A}]), None),
    ("chat image detail high", user([{"type": "image", "sha256": SHA_A, "detail": "high"}]), None),
    ("chat image other digest", user([{"type": "image", "sha256": SHA_B}]), None),
    ("chat image as a file", user([{"type": "file", "sha256": SHA_A}]), None),
    (
        "chat image null detail",
        user([{"type": "image", "sha256": SHA_A, "detail": None}]),
        "chat image",
    ),
    ("chat name", user("hello", name="alice"), None),
    ("chat empty name is none", user("hello", name=""), "chat"),
    (
        "chat system developer user",
        {
            "chat": [
                {"role": "system", "content": "be brief"},
                {"role": "developer", "content": "no emoji"},
                {"role": "user", "content": "hello"},
            ]
        },
        None,
    ),
    ("chat tool calls", assistant(content=None, tool_calls=[CALL]), None),
    (
        "chat tool calls, other arguments",
        assistant(
            content=None, tool_calls=[CALL | {"function": {"name": "get", "arguments": '{"a":2}'}}]
        ),
        None,
    ),
    (
        "chat tool call flat",
        assistant(content=None, tool_calls=[{"name": "get", "arguments": '{"a":1}'}]),
        None,
    ),
    (
        "chat tool call nested without id",
        assistant(content=None, tool_calls=[{"function": {"name": "get", "arguments": '{"a":1}'}}]),
        "chat tool call flat",
    ),
    (
        "chat tool call with content",
        assistant(content="calling", tool_calls=[CALL, CALL | {"id": "call_2"}]),
        None,
    ),
    ("chat tool call null id", assistant(tool_calls=[CALL | {"id": None}]), "chat tool call flat"),
    ("chat tool calls empty", assistant(content="a", tool_calls=[]), None),
    ("chat tool calls null", assistant(content="a", tool_calls=None), "chat tool calls empty"),
    (
        "chat tool result",
        {
            "chat": [
                {"role": "tool", "content": '{"t":21}', "tool_call_id": "call_1", "name": "get"}
            ]
        },
        None,
    ),
    ("chat reasoning_content", assistant(content="x", reasoning_content="think"), None),
    ("chat reasoning (vLLM)", assistant(content="x", reasoning="think"), "chat reasoning_content"),
    ("chat reasoning_content empty", assistant(content="x", reasoning_content=""), None),
    # -- chat template and output options
    (
        "chat_template every field",
        {
            **user("hello"),
            "chat_template": {
                "add_generation_prompt": True,
                "continue_final_message": False,
                "add_special_tokens": False,
                "chat_template": "{{ messages }}",
                "chat_template_kwargs": {"enable_thinking": False, "n": 2},
                "documents": [{"title": "a", "text": "b"}],
                "mm_processor_kwargs": {"num_crops": 4},
            },
        },
        None,
    ),
    (
        "chat_template enable_thinking true",
        {**user("hello"), "chat_template": {"chat_template_kwargs": {"enable_thinking": True}}},
        None,
    ),
    (
        "chat_template kwargs as text",
        {**user("hello"), "chat_template": {"chat_template_kwargs": '{"enable_thinking":true}'}},
        "chat_template enable_thinking true",
    ),
    (
        "chat_template add_generation_prompt false",
        {**user("hello"), "chat_template": {"add_generation_prompt": False}},
        None,
    ),
    ("chat_template empty", {**user("hello"), "chat_template": {}}, "chat"),
    (
        "output every field",
        {
            "text": "hello",
            "output": {
                "reasoning_effort": "low",
                "verbosity": "high",
                "modalities": ["text", "audio"],
                "audio": {"voice": "alloy", "format": "wav"},
                "prediction": {"type": "content", "content": "x"},
                "web_search_options": {"search_context_size": "low"},
                "suffix": "\n",
                "echo": True,
                "encoding_format": "base64",
                "dimensions": 256,
                "return_tokens_as_token_ids": False,
            },
        },
        None,
    ),
    (
        "output modalities other order",
        {"text": "hello", "output": {"modalities": ["audio", "text"]}},
        None,
    ),
    (
        "output dimensions 512",
        {"endpoint": "embeddings", "text": "hello", "output": {"dimensions": 512}},
        None,
    ),
    (
        "output dimensions 256",
        {"endpoint": "embeddings", "text": "hello", "output": {"dimensions": 256}},
        None,
    ),
    ("output empty", {"text": "hello", "output": {"dimensions": None}}, "text"),
]

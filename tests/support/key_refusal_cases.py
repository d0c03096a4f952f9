"""The refusals of the golden key vectors (tests/support/key_vectors.py): inputs the Python
client's make_key refuses, each with a regex the TypeScript makeKey's Error must match."""

from __future__ import annotations

from typing import Any

from tests.support.key_vector_chat import CALL, SHA_A, assistant, user

Refusal = tuple[str, dict[str, Any], str]

REFUSALS: list[Refusal] = [
    ("two inputs", {"text": "x", "token_ids": [1]}, "exactly one of"),
    ("no input", {}, "exactly one of"),
    ("tools named twice", {"text": "x", "tools": "v2", "extra": {"tools": "v1"}}, "not both"),
    ("tools an object", {"text": "x", "tools": {"type": "function"}}, "tools must be"),
    (
        "unknown sampling field",
        {"text": "x", "temprature": 0.0},
        "temprature is not a field of SamplingParams",
    ),
    ("top_k fractional", {"text": "x", "top_k": 1.5}, "topK must be an integer"),
    ("top_k beyond int32", {"text": "x", "top_k": 2**31}, "topK is out of range"),
    ("temperature a string", {"text": "x", "temperature": "0"}, "temperature must be a number"),
    ("seed beyond int64", {"text": "x", "seed": 2**63}, "seed is out of range"),
    ("ignore_eos a string", {"text": "x", "ignore_eos": "yes"}, "ignoreEos must be a boolean"),
    ("stop holds a number", {"text": "x", "stop": ["a", 1]}, r"stop\[1\] must be a string"),
    ("bad_words a string", {"text": "x", "bad_words": "darn"}, "badWords takes an array"),
    (
        "logit_bias key not an integer",
        {"text": "x", "logit_bias": {"abc": 1.0}},
        "is not an integer",
    ),
    ("logit_bias value a string", {"text": "x", "logit_bias": {5: "1"}}, "must be a number"),
    (
        "response_format unknown field",
        {"text": "x", "response_format": {"type": 3, "foo": "1"}},
        "foo is not a field of ResponseFormat",
    ),
    (
        "response_format short type name",
        {"text": "x", "response_format": {"type": "JSON_SCHEMA"}},
        "unknown ResponseFormatType name",
    ),
    (
        "response_format schema an object",
        {"text": "x", "response_format": {"type": 3, "schema": {"a": 1}}},
        "schema must be a string",
    ),
    (
        "guided unknown field",
        {"text": "x", "guided": {"jsn": "{}"}},
        "jsn is not a field of GuidedDecoding",
    ),
    ("guided choice a string", {"text": "x", "guided": {"choice": "yes"}}, "choice takes an array"),
    ("token id negative", {"token_ids": [-1]}, "out of range"),
    ("token id beyond uint32", {"token_ids": [2**32]}, "out of range"),
    ("token id fractional", {"token_ids": [1.5]}, "must be an integer"),
    ("input_sha256 as hex text", {"input_sha256": "00ff"}, "inputSha256 must be a Uint8Array"),
    ("lone surrogate in text", {"text": "a\ud800b"}, "text is not valid Unicode"),
    ("lone surrogate in tenant", {"tenant": "\udc00", "text": "x"}, "tenant is not valid Unicode"),
    ("lone surrogate in extra", {"text": "x", "extra": {"k": "\ud83d"}}, "not valid Unicode"),
    (
        "lone surrogate in a tool",
        {"text": "x", "tools": [{"d": "\udfff"}]},
        r"tools\[0\]\.d is not valid Unicode",
    ),
    ("lone surrogate in content", user("\ud800"), r"messages\[0\]\.content is not valid Unicode"),
    ("lone surrogate in stop", {"text": "x", "stop": ["\ud800"]}, "not valid Unicode"),
    ("extra value a number", {"text": "x", "extra": {"k": 1}}, "must be a string"),
    ("tenant a number", {"tenant": 5, "text": "x"}, "tenant must be a string"),
    (
        "parallel_tool_calls a string",
        {"text": "x", "parallel_tool_calls": "yes"},
        "parallelToolCalls must be a boolean",
    ),
    (
        "chat_template unknown field",
        {"text": "x", "chat_template": {"enable_thinking": False}},
        "enableThinking is not a field of ChatTemplateOptions",
    ),
    (
        "chat_template a string",
        {"text": "x", "chat_template": "{{ x }}"},
        "chatTemplate must be an object",
    ),
    (
        "output unknown field",
        {"text": "x", "output": {"voice": "alloy"}},
        "voice is not a field of OutputOptions",
    ),
    (
        "output modalities a string",
        {"text": "x", "output": {"modalities": "text"}},
        "modalities takes an array",
    ),
    (
        "output dimensions a string",
        {"text": "x", "output": {"dimensions": "256"}},
        "dimensions must be an integer",
    ),
    ("message without role", {"chat": [{"content": "x"}]}, r"messages\[0\]\.role is required"),
    ("message role a number", {"chat": [{"role": 1, "content": "x"}]}, r"role must be a string"),
    (
        "message refusal field",
        {"chat": [{"role": "assistant", "content": "x", "refusal": "no"}]},
        r"messages\[0\]\.refusal is not a key field",
    ),
    (
        "message function_call field",
        {"chat": [{"role": "assistant", "function_call": {"name": "f"}}]},
        "function_call is not a key field",
    ),
    (
        "message content an object",
        user({"type": "text", "text": "x"}),
        r"content must be a string, null or an array",
    ),
    ("message content a number", user(5), r"content must be a string, null or an array"),
    ("message name a number", user("x", name=5), r"name must be a string"),
    (
        "reasoning given twice",
        assistant(content="x", reasoning="a", reasoning_content="b"),
        "not both",
    ),
    (
        "part image_url",
        user([{"type": "image_url", "image_url": {"url": "https://x"}}]),
        r"content part type \"image_url\"",
    ),
    ("part without type", user([{"text": "x"}]), "content part type None"),
    ("part text missing", user([{"type": "text"}]), r"text is required"),
    (
        "part text with another field",
        user([{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]),
        "cache_control is not a key field",
    ),
    (
        "part image with a url",
        user([{"type": "image", "sha256": SHA_A, "url": "https://x"}]),
        "url is not a key field",
    ),
    (
        "part image digest as hex text",
        user([{"type": "image", "sha256": SHA_A.hex()}]),
        "sha256 must be a Uint8Array",
    ),
    ("part a string", user(["hello"]), r"content\[0\] must be a content part"),
    (
        "tool call without name",
        assistant(tool_calls=[{"id": "c", "function": {"arguments": "{}"}}]),
        r"function\.name is required",
    ),
    (
        "tool call arguments an object",
        assistant(tool_calls=[{"function": {"name": "f", "arguments": {"a": 1}}}]),
        "arguments must be a string",
    ),
    (
        "tool call streaming index",
        assistant(tool_calls=[CALL | {"index": 0}]),
        r"tool_calls\[0\]\.index is not a key field",
    ),
    (
        "tool call function extra field",
        assistant(tool_calls=[{"function": {"name": "f", "strict": True}}]),
        r"function\.strict is not a key field",
    ),
]

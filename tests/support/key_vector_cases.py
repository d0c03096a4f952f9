"""The requests of the golden key vectors (tests/support/key_vectors.py), as make_key calls.

Each vector is (name, make_key keyword arguments over BASE, same_as): same_as names an
earlier vector that must have the same digest (None: it must differ from every other).
JSON values hold only numbers that Python and JavaScript print alike (integers, 0.5, -2.25).
"""

from __future__ import annotations

from typing import Any

from tests.support.key_vector_chat import CHAT_VECTORS, SHA_A

BASE: dict[str, Any] = {"tenant": "acme", "model_version": "fp-golden", "prompt_version": "p1"}

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Wetter für eine Stadt \u2014 \U0001f326",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "maximum": 7}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TOOL_REORDERED = {"function": TOOL["function"], "type": "function"}
JSON_ODDITIES = {
    'quote"back\\slash/': "tab\tnl\ncr\rbs\bff\fnul\u0000ctl\u001fdel\u007f",
    "sep": "\u2028\u2029",
    "nums": [0, -1, 2**53 - 1, 0.5, -2.25, True, False, None],
    "nested": {"z": [], "a": {}},
}


Vector = tuple[str, dict[str, Any], str | None]

VECTORS: list[Vector] = [
    # -- inputs, and strings as their exact bytes
    ("text", {"text": "hello"}, None),
    ("text empty", {"text": ""}, None),
    ("text KELVIN SIGN look-alike", {"text": "\u212aey-corp"}, None),
    ("text Latin K", {"text": "Key-corp"}, None),
    ("text NFC e-acute", {"text": "caf\u00e9"}, None),
    ("text NFD e + combining acute", {"text": "cafe\u0301"}, None),
    ("text zero-width space", {"text": "a\u200bb"}, None),
    ("text astral and U+FFFD", {"text": "\U0001f600\ufffd"}, None),
    ("text fullwidth", {"text": "\uff28ello"}, None),
    ("tenant Cyrillic a", {"tenant": "\u0430cme", "text": "hello"}, None),
    ("adapter", {"adapter_version": "lora-fp1", "text": "hello"}, None),
    ("endpoint completions", {"endpoint": "completions", "text": "hello"}, None),
    ("endpoint embeddings", {"endpoint": "embeddings", "text": "hello"}, None),
    ("token ids", {"token_ids": [1, 0, 2**32 - 1, 42]}, None),
    ("token ids empty", {"token_ids": []}, None),
    ("input sha256", {"input_sha256": SHA_A}, None),
    # -- extra (a map: entry order is not part of the key)
    ("extra", {"text": "hello", "extra": {"corpus": "v7", "scope": "eng", "\u00e9": "1"}}, None),
    (
        "extra reordered",
        {"text": "hello", "extra": {"\u00e9": "1", "scope": "eng", "corpus": "v7"}},
        "extra",
    ),
    (
        "extra astral key vs U+FFFD key",
        {"text": "h", "extra": {"\U0001f600": "a", "\ufffd": "b"}},
        None,
    ),
    ("extra empty value", {"text": "hello", "extra": {"corpus": ""}}, None),
    # -- tools, as their JSON text (key order kept)
    ("tools", {"text": "hello", "tools": [TOOL]}, None),
    ("tools key order", {"text": "hello", "tools": [TOOL_REORDERED]}, None),
    ("tools two, in order", {"text": "hello", "tools": [TOOL, {"type": "code_interpreter"}]}, None),
    (
        "tools two, other order",
        {"text": "hello", "tools": [{"type": "code_interpreter"}, TOOL]},
        None,
    ),
    ("tools JSON oddities", {"text": "hello", "tools": [JSON_ODDITIES]}, None),
    ("tools a string element", {"text": "hello", "tools": ["web_search"]}, None),
    ("tools empty list", {"text": "hello", "tools": []}, "text"),
    ("tools schema version name", {"text": "hello", "tools": "schema-v3"}, None),
    ("tool_choice required", {"text": "hello", "tools": [TOOL], "tool_choice": "required"}, None),
    (
        "tool_choice object",
        {
            "text": "hello",
            "tools": [TOOL],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        },
        None,
    ),
    (
        "parallel_tool_calls false",
        {"text": "hello", "tools": [TOOL], "parallel_tool_calls": False},
        None,
    ),
    (
        "parallel_tool_calls true",
        {"text": "hello", "tools": [TOOL], "parallel_tool_calls": True},
        None,
    ),
    # -- sampling: unset is not a default
    ("temperature 0", {"text": "hello", "temperature": 0.0}, None),
    ("temperature -0.0 is 0.0", {"text": "hello", "temperature": -0.0}, "temperature 0"),
    ("temperature 1", {"text": "hello", "temperature": 1.0}, None),
    ("temperature 0.7", {"text": "hello", "temperature": 0.7}, None),
    ("sampling all unset", {"text": "hello", "temperature": None}, "text"),
    ("top_k -1", {"text": "hello", "top_k": -1}, None),
    ("top_k 0", {"text": "hello", "top_k": 0}, None),
    (
        "repetition_penalty 1.0",
        {"text": "hello", "temperature": 0.0, "repetition_penalty": 1.0},
        None,
    ),
    ("stop list", {"text": "hello", "stop": ["\n\n", "END"]}, None),
    ("stop other order", {"text": "hello", "stop": ["END", "\n\n"]}, None),
    ("stop one", {"text": "hello", "stop": ["ab"]}, None),
    ("stop string is a list of one", {"text": "hello", "stop": "ab"}, "stop one"),
    ("stop two chars", {"text": "hello", "stop": ["a", "b"]}, None),
    ("stop_token_ids", {"text": "hello", "stop_token_ids": [7, 3, 5]}, None),
    (
        "stop_token_ids as a set",
        {"text": "hello", "stop_token_ids": [5, 7, 3, 3]},
        "stop_token_ids",
    ),
    ("seed 0", {"text": "hello", "temperature": 0.7, "seed": 0}, None),
    ("seed 2**62 + 1", {"text": "hello", "temperature": 0.7, "seed": 2**62 + 1}, None),
    ("seed min int64", {"text": "hello", "temperature": 0.7, "seed": -(2**63)}, None),
    ("logit_bias", {"text": "hello", "logit_bias": {50256: -100.0, 11: 2.5, 0: 1.0}}, None),
    (
        "logit_bias reordered",
        {"text": "hello", "logit_bias": {0: 1.0, 11: 2.5, 50256: -100.0}},
        "logit_bias",
    ),
    (
        "logit_bias negative token ids",
        {"text": "hello", "logit_bias": {-3: 1.0, 5: -1.0, -1: 0.5}},
        None,
    ),
    (
        "sampling every scalar",
        {
            "text": "hello",
            "temperature": 0.2,
            "top_p": 0.9,
            "top_k": 40,
            "max_tokens": 256,
            "seed": 7,
            "presence_penalty": -0.5,
            "frequency_penalty": 0.25,
            "repetition_penalty": 1.125,
            "min_p": 0.05,
            "min_tokens": 1,
            "n": 2,
            "logprobs": 3,
            "ignore_eos": False,
            "top_logprobs": 4,
            "return_logprobs": True,
            "prompt_logprobs": 1,
            "length_penalty": 0.5,
            "bad_words": ["darn", "heck"],
            "allowed_token_ids": [9, 8],
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
            "spaces_between_special_tokens": True,
            "best_of": 3,
            "use_beam_search": False,
            "truncate_prompt_tokens": 512,
            "max_completion_tokens": 100,
        },
        None,
    ),
    ("max_tokens", {"text": "hello", "max_tokens": 100}, None),
    ("max_completion_tokens", {"text": "hello", "max_completion_tokens": 100}, None),
    ("response_format text", {"text": "hello", "response_format": {"type": 1}}, None),
    ("response_format unspecified", {"text": "hello", "response_format": {}}, None),
    (
        "response_format json_schema",
        {
            "text": "hello",
            "response_format": {
                "type": 3,
                "schema": '{"type":"object","properties":{"b":{},"a":{}}}',
                "name": "answer",
                "strict": True,
                "description": "the answer",
            },
        },
        None,
    ),
    (
        "response_format json_schema by name",
        {
            "text": "hello",
            "response_format": {
                "type": "RESPONSE_FORMAT_TYPE_JSON_SCHEMA",
                "schema": '{"type":"object","properties":{"b":{},"a":{}}}',
                "name": "answer",
                "strict": True,
                "description": "the answer",
            },
        },
        "response_format json_schema",
    ),
    (
        "response_format schema key order",
        {
            "text": "hello",
            "response_format": {
                "type": 3,
                "schema": '{"type":"object","properties":{"a":{},"b":{}}}',
            },
        },
        None,
    ),
    (
        "response_format regex",
        {"text": "hello", "response_format": {"type": 4, "schema": "[a-z]+"}},
        None,
    ),
    (
        "response_format grammar",
        {"text": "hello", "response_format": {"type": 5, "schema": "root ::= x"}},
        None,
    ),
    ("response_format json_object", {"text": "hello", "response_format": {"type": 2}}, None),
    (
        "guided every field",
        {
            "text": "hello",
            "guided": {
                "json": '{"type":"string"}',
                "regex": "\\d+",
                "choice": ["yes", "no"],
                "grammar": "root ::= y",
                "json_object": True,
                "structural_tag": '{"begin":"<a>"}',
                "whitespace_pattern": " ",
                "backend": "xgrammar",
                "disable_any_whitespace": True,
                "disable_additional_properties": False,
                "disable_fallback": True,
            },
        },
        None,
    ),
    ("guided choice other order", {"text": "hello", "guided": {"choice": ["no", "yes"]}}, None),
    ("guided choice", {"text": "hello", "guided": {"choice": ["yes", "no"]}}, None),
    *CHAT_VECTORS,
]

"""The pools key strategies draw from: equivalence classes of values per dimension.

Key strategies draw from small pools on purpose, so that two independent draws
collide often enough to test both "equal implies same digest" and "different
implies different digest". A pool's classes group values that mean the same to
*every* engine (-0.0 and 0.0, a set's members reordered or repeated, a map's
entries reordered); everything else is its own class: NFC and NFD spellings,
KELVIN SIGN and K, an unset field and its default, -1 and 0 for top_k, JSON
with other key order or whitespace.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sidecar.keys import (
    ChatTemplateOptions,
    ContentPart,
    FormatType,
    GuidedDecoding,
    OutputOptions,
    PartKind,
    ResponseFormat,
    ToolCall,
)

NFC_E = "caf\u00e9"  # precomposed é
NFD_E = "cafe\u0301"  # e + combining acute: NFC would make it NFC_E; keys keep them apart
KELVIN = "\u212aey-corp"  # KELVIN SIGN: NFC would make it "Key-corp"

Classes = tuple[tuple[Any, ...], ...]
"""Equivalence classes: members of one class mean the same; different classes differ."""


def singletons(*values: Any) -> Classes:
    """Classes of one member each: values that must all give different keys."""
    return tuple((v,) for v in values)


DIMENSION_CLASSES: Classes = singletons(
    "acme",
    "beta",
    "a:b",
    "a",
    "b:c",
    NFC_E,
    NFD_E,
    "x y",
    "Key-corp",
    KELVIN,
    "\u00c5",  # Å precomposed
    "\u212b",  # ANGSTROM SIGN
    "A\u030a",  # A + combining ring
)
ADAPTER_CLASSES: Classes = (("",), *DIMENSION_CLASSES)

# Per scalar sampling field: classes of valid values (None = unset, a class of its own).
SAMPLING_CLASSES: dict[str, Classes] = {
    "temperature": (
        (None,),
        (1.0,),
        (0.0, -0.0),
        (0.3,),
        (0.1 + 0.2,),
        (0.7, float("0.70")),
        (0.70000001,),
        (2.0,),
    ),
    "top_p": singletons(None, 1.0, 0.9, 0.9000000001, 0.5),
    "top_k": singletons(None, -1, 0, 1, 40),
    "max_tokens": singletons(None, 0, 16, 256),
    "seed": singletons(None, 0, 1, -1),
    "presence_penalty": ((None,), (0.0, -0.0), (0.5,), (-2.0,)),
    "frequency_penalty": ((None,), (0.0, -0.0), (0.5,), (0.5000000001,), (2.0,)),
    "repetition_penalty": singletons(None, 1.0, 1.1, 0.9),
    "min_p": ((None,), (0.0, -0.0), (0.05,)),
    "min_tokens": singletons(None, 0, 4),
    "n": singletons(None, 1, 2),
    "logprobs": singletons(None, 0, 5),
    "ignore_eos": singletons(None, False, True),
    "response_format": singletons(
        None,
        ResponseFormat(),
        ResponseFormat(FormatType.UNSPECIFIED),
        ResponseFormat(FormatType.TEXT, "ignored for text"),
        ResponseFormat(FormatType.JSON_SCHEMA, '{"type":"object","required":["a"]}'),
        ResponseFormat(FormatType.JSON_SCHEMA, '{"required":["a"],"type":"object"}'),
        ResponseFormat(FormatType.JSON_SCHEMA, '{ "type": "object", "required": ["a"] }'),
        ResponseFormat(FormatType.JSON_SCHEMA, '{"type":"string"}', name="s"),
        ResponseFormat(FormatType.JSON_SCHEMA, '{"type":"string"}', strict=True),
        ResponseFormat(FormatType.JSON_OBJECT, ""),
        ResponseFormat(FormatType.REGEX, "[a-z]+"),
        ResponseFormat(FormatType.GRAMMAR, "[a-z]+"),
    ),
    "top_logprobs": singletons(None, 0, 3),
    "return_logprobs": singletons(None, False, True),
    "prompt_logprobs": singletons(None, -1, 0, 2),
    "length_penalty": ((None,), (1.0,), (0.0, -0.0), (-0.5,)),
    "include_stop_str_in_output": singletons(None, False, True),
    "skip_special_tokens": singletons(None, False, True),
    "spaces_between_special_tokens": singletons(None, False, True),
    "best_of": singletons(None, 1, 3),
    "use_beam_search": singletons(None, False, True),
    "truncate_prompt_tokens": singletons(None, -1, 0, 128),
    "max_completion_tokens": singletons(None, 0, 256),
    "guided": (
        (None, GuidedDecoding()),  # no guided field sent either way
        *singletons(
            GuidedDecoding(json='{"type":"object"}'),
            GuidedDecoding(json='{ "type": "object" }'),
            GuidedDecoding(regex="a+"),
            GuidedDecoding(grammar="a+"),
            GuidedDecoding(choice=("yes", "no")),
            GuidedDecoding(choice=("no", "yes")),
            GuidedDecoding(json_object=True),
            GuidedDecoding(json_object=False),
            GuidedDecoding(regex="a+", backend="xgrammar"),
            GuidedDecoding(regex="a+", whitespace_pattern=" "),
            GuidedDecoding(regex="a+", disable_fallback=True),
        ),
    ),
}
STOP_CLASSES: Classes = singletons("\n", "END", "a:b", "a", "b:c", NFC_E, NFD_E)
"""Stop strings are a sequence: order and repeats count (the first match wins in vLLM)."""
WORD_CLASSES: Classes = singletons("bad", "Bad", "a:b", NFC_E, NFD_E)
STOP_ID_POOL = (0, 2, 7, 128001)
LOGIT_TOKEN_POOL = (1, 50, 1000)
LOGIT_BIAS_CLASSES: Classes = ((-100.0,), (0.0, -0.0), (5.0,), (5.000000001,))
EXTRA_KEY_CLASSES: Classes = singletons("tools", "sys", "a:b", "a", NFC_E, NFD_E)
EXTRA_VALUE_CLASSES: Classes = singletons("v1", "v2", "", "b:c", NFC_E, NFD_E)
TEXT_CLASSES: Classes = singletons("hello", "Hello", "", "a:b", NFC_E, NFD_E, "\u212a", "K")
TOKEN_POOL = (1, 2, 3, 2**32 - 1)
ROLE_CLASSES: Classes = singletons("user", "system", "tool")
CONTENT_CLASSES: Classes = singletons(None, "hello", "hi", "", NFC_E, NFD_E)
SHA_POOL = (hashlib.sha256(b"hello").digest(), hashlib.sha256(b"x").digest())
PART_POOL = (
    ContentPart(PartKind.TEXT, text="hi"),
    ContentPart(PartKind.TEXT, text=NFD_E),
    ContentPart(PartKind.IMAGE, sha256=SHA_POOL[0]),
    ContentPart(PartKind.IMAGE, sha256=SHA_POOL[0], detail="low"),
    ContentPart(PartKind.AUDIO, sha256=SHA_POOL[0], format="wav"),
    ContentPart(PartKind.FILE, sha256=SHA_POOL[1], filename="a.pdf"),
    ContentPart(PartKind.VIDEO, sha256=SHA_POOL[1]),
)
CALL_POOL = (
    ToolCall("call-1", "get", '{"a":1}'),
    ToolCall("call-1", "get", '{"a": 1}'),
    ToolCall("call-2", "get", '{"a":1}'),
    ToolCall("call-1", "put", '{"a":1}'),
)
TOOL_POOL = (
    '{"type":"function","function":{"name":"get"}}',
    '{"function":{"name":"get"},"type":"function"}',
    '{"type":"function","function":{"name":"put"}}',
)
TOOL_CHOICE_CLASSES: Classes = singletons(
    None, "auto", "none", "required", '{"type":"function","function":{"name":"get"}}'
)
ENDPOINT_CLASSES: Classes = singletons("", "chat.completions", "completions", "embeddings")
TEMPLATE_CLASSES: Classes = (
    (None, ChatTemplateOptions()),  # no template field sent either way
    *singletons(
        ChatTemplateOptions(add_generation_prompt=True),
        ChatTemplateOptions(add_generation_prompt=False),
        ChatTemplateOptions(continue_final_message=True),
        ChatTemplateOptions(add_special_tokens=False),
        ChatTemplateOptions(chat_template="{{ messages }}"),
        ChatTemplateOptions(chat_template_kwargs='{"enable_thinking":false}'),
        ChatTemplateOptions(chat_template_kwargs='{"enable_thinking":true}'),
        ChatTemplateOptions(documents='[{"title":"a"}]'),
        ChatTemplateOptions(mm_processor_kwargs='{"fps":1}'),
    ),
)
OUTPUT_CLASSES: Classes = (
    (None, OutputOptions()),  # no output field sent either way
    *singletons(
        OutputOptions(reasoning_effort="low"),
        OutputOptions(reasoning_effort="high"),
        OutputOptions(verbosity="low"),
        OutputOptions(modalities=("text",)),
        OutputOptions(modalities=("text", "audio")),
        OutputOptions(modalities=("audio", "text")),
        OutputOptions(audio='{"voice":"alloy","format":"wav"}'),
        OutputOptions(prediction='{"type":"content","content":"x"}'),
        OutputOptions(web_search_options="{}"),
        OutputOptions(suffix=""),
        OutputOptions(suffix="end"),
        OutputOptions(echo=True),
        OutputOptions(encoding_format="base64"),
        OutputOptions(dimensions=256),
        OutputOptions(return_tokens_as_token_ids=True),
    ),
)

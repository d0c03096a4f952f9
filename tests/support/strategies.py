"""Hypothesis strategies shared by the whole suite (one module, as attrs keeps them).

Key strategies draw from small pools on purpose, so that two independent draws
collide often enough to test both "equal implies same digest" and "different
implies different digest". A pool's classes group values that mean the same to
*every* engine (-0.0 and 0.0, a set's members reordered or repeated, a map's
entries reordered); everything else is its own class: NFC and NFD spellings,
KELVIN SIGN and K, an unset field and its default, -1 and 0 for top_k, JSON
with other key order or whitespace.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st
from infercache.v1 import cache_pb2 as pb

from sidecar.entries import ChunkMeta, ComputeCost, Entry, pack_chunks
from sidecar.invalidation.rules import Rule, Selector
from sidecar.keys import (
    ChatMessage,
    ChatTemplateOptions,
    ContentPart,
    FormatType,
    GuidedDecoding,
    InputKind,
    KeyRequest,
    OutputOptions,
    PartKind,
    ResponseFormat,
    Sampling,
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


def member(classes: Classes) -> st.SearchStrategy[Any]:
    """Any member of any class."""
    return st.sampled_from(classes).flatmap(st.sampled_from)


def respelling(classes: Classes, value: Any) -> st.SearchStrategy[Any]:
    """Another member of `value`'s class: a different spelling of the same meaning."""
    for cls in classes:
        # `is` first: 0.0 == -0.0 and False == 0 must not pick the wrong class.
        if any(value is m for m in cls) or any(type(value) is type(m) and value == m for m in cls):
            return st.sampled_from(cls)
    raise AssertionError(f"{value!r} is in no class")


def _seq_of(classes: Classes) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.lists(member(classes), max_size=4).map(tuple)


@st.composite
def _respelled_set(
    draw: st.DrawFn, classes: Classes | None, values: tuple[Any, ...]
) -> tuple[Any, ...]:
    """The same set: members respelled, shuffled, some repeated."""
    out = [v if classes is None else draw(respelling(classes, v)) for v in values]
    if out:
        out += draw(st.lists(st.sampled_from(out), max_size=2))
    return tuple(draw(st.permutations(out)))


@st.composite
def _respelled_map(
    draw: st.DrawFn, key_classes: Classes | None, value_classes: Classes, m: dict[Any, Any]
) -> dict[Any, Any]:
    """The same map: keys and values respelled, insertion order shuffled."""
    items = [
        (
            k if key_classes is None else draw(respelling(key_classes, k)),
            draw(respelling(value_classes, v)),
        )
        for k, v in m.items()
    ]
    return dict(draw(st.permutations(items)))


_SET_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "stop_token_ids": st.lists(st.sampled_from(STOP_ID_POOL), max_size=4).map(tuple),
    "allowed_token_ids": st.lists(st.sampled_from(STOP_ID_POOL), max_size=4).map(tuple),
    "bad_words": _seq_of(WORD_CLASSES),
}


def sampling_field(name: str) -> st.SearchStrategy[Any]:
    """A valid value for one Sampling field."""
    if name == "stop":
        return _seq_of(STOP_CLASSES)
    if name in _SET_FIELDS:
        return _SET_FIELDS[name]
    if name == "logit_bias":
        return st.dictionaries(
            st.sampled_from(LOGIT_TOKEN_POOL), member(LOGIT_BIAS_CLASSES), max_size=3
        )
    return member(SAMPLING_CLASSES[name])


def _respelled_sampling_field(name: str, value: Any) -> st.SearchStrategy[Any]:
    if name == "stop":
        return st.just(value)  # a sequence: no other spelling
    if name == "bad_words":
        return _respelled_set(WORD_CLASSES, value)
    if name in _SET_FIELDS:
        return _respelled_set(None, value)
    if name == "logit_bias":
        return _respelled_map(None, LOGIT_BIAS_CLASSES, value)
    return respelling(SAMPLING_CLASSES[name], value)


SAMPLING_FIELDS = tuple(f.name for f in dataclasses.fields(Sampling))


@st.composite
def samplings(draw: st.DrawFn) -> Sampling:
    """A valid Sampling with every field drawn from its pool."""
    return Sampling(**{name: draw(sampling_field(name)) for name in SAMPLING_FIELDS})


@st.composite
def extras(draw: st.DrawFn) -> dict[str, str]:
    """An `extra` map."""
    key_classes = draw(st.lists(st.sampled_from(EXTRA_KEY_CLASSES), max_size=3, unique=True))
    return {draw(st.sampled_from(c)): draw(member(EXTRA_VALUE_CLASSES)) for c in key_classes}


@st.composite
def chat_messages(draw: st.DrawFn) -> ChatMessage:
    """One chat turn: string content or parts, maybe tool calls and reasoning."""
    content = draw(member(CONTENT_CLASSES))
    parts: tuple[ContentPart, ...] = ()
    if content is None:
        parts = tuple(draw(st.lists(st.sampled_from(PART_POOL), max_size=2)))
    return ChatMessage(
        draw(member(ROLE_CLASSES)),
        content,
        draw(st.sampled_from(("", "bot"))),
        draw(st.sampled_from(("", "call-1"))),
        parts=parts,
        tool_calls=tuple(draw(st.lists(st.sampled_from(CALL_POOL), max_size=2))),
        reasoning_content=draw(st.sampled_from((None, "", "think"))),
    )


@st.composite
def inputs(draw: st.DrawFn) -> tuple[Any, InputKind]:
    """(input, kind) for each of the four input kinds."""
    kind = draw(st.sampled_from(list(InputKind)))
    value: Any
    if kind is InputKind.TEXT:
        value = draw(member(TEXT_CLASSES))
    elif kind is InputKind.CHAT:
        value = tuple(draw(st.lists(chat_messages(), min_size=1, max_size=3)))
    elif kind is InputKind.TOKENS:
        value = tuple(draw(st.lists(st.sampled_from(TOKEN_POOL), max_size=4)))
    else:
        value = draw(st.sampled_from(SHA_POOL))
    return value, kind


def _tools() -> st.SearchStrategy[tuple[str, ...]]:
    return st.lists(st.sampled_from(TOOL_POOL), max_size=2).map(tuple)


# Every dimension of a KeyRequest: how to draw any value.
KEY_DIMENSIONS: dict[str, Callable[[], st.SearchStrategy[Any]]] = {
    "tenant": lambda: member(DIMENSION_CLASSES),
    "model_version": lambda: member(DIMENSION_CLASSES),
    "adapter_version": lambda: member(ADAPTER_CLASSES),
    "prompt_version": lambda: member(DIMENSION_CLASSES),
    "extra": extras,
    "input": inputs,
    "tools": _tools,
    "tool_choice": lambda: member(TOOL_CHOICE_CLASSES),
    "parallel_tool_calls": lambda: st.sampled_from((None, False, True)),
    "chat_template": lambda: member(TEMPLATE_CLASSES),
    "endpoint": lambda: member(ENDPOINT_CLASSES),
    "output": lambda: member(OUTPUT_CLASSES),
}
for _name in SAMPLING_FIELDS:
    KEY_DIMENSIONS[f"sampling.{_name}"] = functools.partial(sampling_field, _name)
REQUEST_FIELDS = tuple(
    f.name for f in dataclasses.fields(KeyRequest) if f.name not in ("input", "input_kind")
)


def get_dimension(req: KeyRequest, dimension: str) -> Any:
    """The value of one dimension (as named in KEY_DIMENSIONS)."""
    if dimension == "input":
        return (req.input, req.input_kind)
    if dimension.startswith("sampling."):
        return getattr(req.sampling, dimension.removeprefix("sampling."))
    return getattr(req, dimension)


def respelled_dimension(dimension: str, value: Any) -> st.SearchStrategy[Any]:
    """Another spelling of a dimension's value that means the same thing."""
    if dimension == "extra":
        return _respelled_map(EXTRA_KEY_CLASSES, EXTRA_VALUE_CLASSES, value)
    if dimension.startswith("sampling."):
        return _respelled_sampling_field(dimension.removeprefix("sampling."), value)
    if dimension == "chat_template":
        return respelling(TEMPLATE_CLASSES, value)
    if dimension == "output":
        return respelling(OUTPUT_CLASSES, value)
    return st.just(value)  # exact strings and sequences: one spelling each


def with_dimension(req: KeyRequest, dimension: str, value: Any) -> KeyRequest:
    """A copy of `req` with one dimension (as named in KEY_DIMENSIONS) replaced."""
    if dimension == "input":
        return dataclasses.replace(req, input=value[0], input_kind=value[1])
    if dimension.startswith("sampling."):
        name = dimension.removeprefix("sampling.")
        return dataclasses.replace(req, sampling=dataclasses.replace(req.sampling, **{name: value}))
    return dataclasses.replace(req, **{dimension: value})


@st.composite
def key_requests(draw: st.DrawFn) -> KeyRequest:
    """A valid KeyRequest over every dimension."""
    value, kind = draw(inputs())
    return KeyRequest(
        tenant=draw(member(DIMENSION_CLASSES)),
        model_version=draw(member(DIMENSION_CLASSES)),
        adapter_version=draw(member(ADAPTER_CLASSES)),
        prompt_version=draw(member(DIMENSION_CLASSES)),
        sampling=draw(samplings()),
        extra=draw(extras()),
        input=value,
        input_kind=kind,
        tools=draw(_tools()),
        tool_choice=draw(member(TOOL_CHOICE_CLASSES)),
        parallel_tool_calls=draw(st.sampled_from((None, False, True))),
        chat_template=draw(member(TEMPLATE_CLASSES)),
        endpoint=draw(member(ENDPOINT_CLASSES)),
        output=draw(member(OUTPUT_CLASSES)),
    )


@st.composite
def respelled_requests(draw: st.DrawFn, req: KeyRequest) -> KeyRequest:
    """`req` with every dimension respelled: the same meaning, different bytes in."""
    out = req
    for dim in KEY_DIMENSIONS:
        out = with_dimension(out, dim, draw(respelled_dimension(dim, get_dimension(req, dim))))
    return out


@st.composite
def key_request_pairs(draw: st.DrawFn) -> tuple[KeyRequest, KeyRequest]:
    """A request and a respelled variant with up to two dimensions redrawn (maybe equal)."""
    base = draw(key_requests())
    variant = draw(respelled_requests(base))
    for dim in draw(st.lists(st.sampled_from(sorted(KEY_DIMENSIONS)), max_size=2)):
        variant = with_dimension(variant, dim, draw(KEY_DIMENSIONS[dim]()))
    return base, variant


def u32s() -> st.SearchStrategy[int]:
    """An unsigned 32-bit integer."""
    return st.integers(min_value=0, max_value=2**32 - 1)


@st.composite
def stored_entries(draw: st.DrawFn) -> Entry:
    """Any encodable Entry."""
    return Entry(
        material=draw(st.binary(min_size=1, max_size=200)),
        payload=draw(st.binary(max_size=500)),
        created_at_ms=draw(st.integers(min_value=0, max_value=2**64 - 1)),
        ttl_s=draw(u32s()),
        epoch=draw(st.integers(min_value=0, max_value=2**64 - 1)),
        cost=ComputeCost(draw(u32s()), draw(u32s()), draw(u32s())),
    )


@st.composite
def streamed_entries(draw: st.DrawFn) -> Entry:
    """Any encodable Entry with chunk boundaries and a finish reason."""
    parts = draw(st.lists(st.binary(max_size=40), min_size=1, max_size=20))
    offsets = sorted(draw(st.lists(u32s(), min_size=len(parts), max_size=len(parts))))
    tokens = draw(st.lists(u32s(), min_size=len(parts), max_size=len(parts)))
    return Entry(
        material=draw(st.binary(min_size=1, max_size=200)),
        payload=b"".join(parts),
        created_at_ms=draw(st.integers(min_value=0, max_value=2**64 - 1)),
        ttl_s=draw(u32s()),
        epoch=draw(st.integers(min_value=0, max_value=2**64 - 1)),
        cost=ComputeCost(draw(u32s()), draw(u32s()), draw(u32s())),
        chunk_table=pack_chunks(
            ChunkMeta(len(p), t, o) for p, t, o in zip(parts, tokens, offsets, strict=True)
        ),
        finish_reason=draw(st.sampled_from(["stop", "length", "tool_calls", "", "ünï"])),
    )


LruOp = tuple[str, int, int]
"""("put", key, size), ("get", key, 0) or ("pop", key, 0)."""


def lru_ops(max_key: int = 6, max_size: int = 40) -> st.SearchStrategy[list[LruOp]]:
    """A sequence of LRU operations over a few keys."""
    key = st.integers(min_value=0, max_value=max_key)
    op = st.one_of(
        st.tuples(st.just("put"), key, st.integers(min_value=0, max_value=max_size)),
        st.tuples(st.sampled_from(["get", "pop"]), key, st.just(0)),
    )
    return st.lists(op, max_size=60)


# --- Invalidation: selectors, dimensions and rules over small pools -------------------
# Pools are tiny so that drawn selectors and entries match each other often.

TENANT_POOL = ("t1", "t2")
MODEL_POOL = ("m1", "m2")
ADAPTER_POOL = ("", "a1")
"""Entries may have no adapter (""); a selector can only name a non-empty one."""
PROMPT_POOL = ("p1", "p2")


def entry_dims() -> st.SearchStrategy[tuple[str, str, str, str]]:
    """(tenant, model_version, adapter_version, prompt_version) of an entry."""
    return st.tuples(
        st.sampled_from(TENANT_POOL),
        st.sampled_from(MODEL_POOL),
        st.sampled_from(ADAPTER_POOL),
        st.sampled_from(PROMPT_POOL),
    )


@st.composite
def selectors(draw: st.DrawFn) -> Selector:
    """A valid Selector: `all`, or one to four constrained dimensions from the pools."""
    if draw(st.integers(min_value=0, max_value=7)) == 0:
        return Selector(all=True)
    pools = (TENANT_POOL, MODEL_POOL, tuple(a for a in ADAPTER_POOL if a), PROMPT_POOL)
    values = [draw(st.none() | st.sampled_from(pool)) for pool in pools]
    if all(v is None for v in values):
        i = draw(st.integers(min_value=0, max_value=3))
        values[i] = draw(st.sampled_from(pools[i]))
    return Selector(values[0], values[1], values[2], values[3])


@st.composite
def rule_lists(draw: st.DrawFn, max_size: int = 12) -> list[Rule]:
    """Rules with distinct epochs (in random order) and commit times."""
    n = draw(st.integers(min_value=0, max_value=max_size))
    epochs = draw(st.permutations(range(1, n + 1)))
    return [
        Rule(e, draw(selectors()), draw(st.integers(min_value=0, max_value=10_000))) for e in epochs
    ]


# --- wire messages: anything a client can put in a CacheKey -------------------------------

_I32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
_I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_U32 = st.integers(min_value=0, max_value=2**32 - 1)
# Protobuf strings are UTF-8: any code point but surrogates; short and long, odd and plain,
# and JSON texts (with an escaped lone surrogate among them).
_WIRE_TEXT = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=12),
    st.sampled_from(
        [
            "",
            " ",
            "\t",
            "a:b",
            NFD_E,
            KELVIN,
            "x" * 257,
            "\u212b" * 200,
            '{"type":"object"}',
            '{"a": "\\ud800"}',
            "[1, {}]",
            "{",
        ]
    ),
)
_WIRE_FLOAT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, 0.5, 2.0, 100.0, 1e-300, 5e-324]),
)


def _wire_scalar(field: Any) -> st.SearchStrategy[Any]:
    """Any value of a proto scalar field's wire type."""
    t = field.type
    if t == field.TYPE_DOUBLE:
        return _WIRE_FLOAT
    if t == field.TYPE_BOOL:
        return st.booleans()
    if t == field.TYPE_INT64:
        return _I64
    if t == field.TYPE_STRING:
        return _WIRE_TEXT
    return _I32


@st.composite
def _wire_optionals(draw: st.DrawFn, msg: Any) -> None:
    """Set any subset of a message's proto3 `optional` scalars to any wire value."""
    fields = [
        f
        for f in msg.DESCRIPTOR.fields
        if f.containing_oneof is not None and f.containing_oneof.name == "_" + f.name
    ]
    for f in draw(st.lists(st.sampled_from(fields), unique=True)) if fields else ():
        setattr(msg, f.name, draw(_wire_scalar(f)))


@st.composite
def wire_sampling(draw: st.DrawFn) -> pb.SamplingParams:
    """A SamplingParams with any subset of fields set to any value of their wire type."""
    s = pb.SamplingParams()
    draw(_wire_optionals(s))
    s.stop.extend(draw(st.lists(_WIRE_TEXT, max_size=70)))
    s.stop_token_ids.extend(draw(st.lists(_I32, max_size=70)))
    s.bad_words.extend(draw(st.lists(_WIRE_TEXT, max_size=3)))
    s.allowed_token_ids.extend(draw(st.lists(_I32, max_size=3)))
    for token, bias in draw(st.dictionaries(_I32, _WIRE_FLOAT, max_size=5)).items():
        s.logit_bias[token] = bias
    if draw(st.booleans()):
        # 7..9 are unknown to this server (proto3 enums are open).
        s.response_format.type = draw(st.integers(min_value=0, max_value=9))  # type: ignore[assignment]
        s.response_format.schema = draw(
            st.one_of(_WIRE_TEXT, st.sampled_from(['{"type":"object"}', "[1, {}]", "{"]))
        )
        draw(_wire_optionals(s.response_format))
    if draw(st.booleans()):
        s.guided.SetInParent()
        draw(_wire_optionals(s.guided))
        s.guided.choice.extend(draw(st.lists(_WIRE_TEXT, max_size=3)))
    return s


@st.composite
def _wire_message(draw: st.DrawFn) -> pb.ChatMessage:
    m = pb.ChatMessage(
        role=draw(_WIRE_TEXT),
        content=draw(_WIRE_TEXT),
        name=draw(_WIRE_TEXT),
        tool_call_id=draw(_WIRE_TEXT),
        null_content=draw(st.booleans()),
    )
    draw(_wire_optionals(m))
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        part = m.parts.add()
        kind = draw(st.sampled_from(["none", "text", "image", "audio", "file", "video"]))
        if kind == "text":
            part.text = draw(_WIRE_TEXT)
        elif kind != "none":
            media = getattr(part, kind)
            media.sha256 = draw(st.binary(max_size=40))
            draw(_wire_optionals(media))
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        m.tool_calls.add(
            id=draw(_WIRE_TEXT),
            type=draw(_WIRE_TEXT),
            name=draw(_WIRE_TEXT),
            arguments=draw(_WIRE_TEXT),
        )
    return m


@st.composite
def wire_keys(draw: st.DrawFn) -> pb.CacheKey:
    """A CacheKey message as any client (buggy, hostile or from the future) might send it."""
    k = pb.CacheKey(
        tenant=draw(_WIRE_TEXT),
        model_version=draw(_WIRE_TEXT),
        adapter_version=draw(_WIRE_TEXT),
        prompt_version=draw(_WIRE_TEXT),
        endpoint=draw(_WIRE_TEXT),
    )
    for name, value in draw(st.dictionaries(_WIRE_TEXT, _WIRE_TEXT, max_size=5)).items():
        k.extra[name] = value
    k.tools.extend(draw(st.lists(_WIRE_TEXT, max_size=3)))
    draw(_wire_optionals(k))
    which = draw(st.sampled_from(["none", "text", "chat", "token_ids", "input_sha256"]))
    if which == "text":
        k.text = draw(_WIRE_TEXT)
    elif which == "chat":
        k.chat.messages.extend(draw(st.lists(_wire_message(), max_size=3)))
        k.chat.SetInParent()
    elif which == "token_ids":
        k.token_ids.ids.extend(draw(st.lists(_U32, max_size=10)))
        k.token_ids.SetInParent()
    elif which == "input_sha256":
        k.input_sha256 = draw(st.binary(max_size=40))
    if draw(st.booleans()):
        k.sampling.CopyFrom(draw(wire_sampling()))
    if draw(st.booleans()):
        k.chat_template.SetInParent()
        draw(_wire_optionals(k.chat_template))
    if draw(st.booleans()):
        k.output.SetInParent()
        draw(_wire_optionals(k.output))
        k.output.modalities.extend(draw(st.lists(_WIRE_TEXT, max_size=2)))
    return k


# --- Invalidation state machine: time steps and requested TTLs -------------------------------

CLOCK_STEPS_MS = (1, 999, 1_000, 4_999, 30_000, 60_000, 61_000, 301_000)
"""Around the boundaries the state machine uses: 1 s and 5 s TTLs, the 60 s lease, the
120 s TTL cap and the 300 s unleased window."""


def clock_steps_ms() -> st.SearchStrategy[int]:
    """How far a test clock moves in one step, in milliseconds."""
    return st.sampled_from(CLOCK_STEPS_MS)


def requested_ttls_s() -> st.SearchStrategy[int]:
    """A Store's ttl_seconds: 0 (the default), short ones, and one above the cap."""
    return st.sampled_from((0, 1, 5, 200))

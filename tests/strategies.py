"""Hypothesis strategies shared by the whole suite (one module, as attrs keeps them).

Key strategies draw from small pools on purpose: every pool holds values that are
*canonically equal* but spelled differently (None vs the default, 0.3 vs 0.1+0.2,
-1 vs 0 for top_k, NFC vs NFD text, reordered or duplicated set members), so two
independent draws collide often enough to test both "equal implies same digest"
and "different implies different digest".
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
from sidecar.keys import ChatMessage, FormatType, InputKind, KeyRequest, ResponseFormat, Sampling

NFC_E = "caf\u00e9"  # precomposed é
NFD_E = "cafe\u0301"  # e + combining acute: the same text after NFC

Classes = tuple[tuple[Any, ...], ...]
"""Equivalence classes: members of one class mean the same; different classes differ."""

DIMENSION_CLASSES: Classes = (
    ("acme",),
    ("beta",),
    ("a:b",),
    ("a",),
    ("b:c",),
    (NFC_E, NFD_E),
    ("x y",),
    ("\u00c5", "\u212b", "A\u030a"),  # Å: precomposed, Angstrom sign, A + ring
)
ADAPTER_CLASSES: Classes = (("",), *DIMENSION_CLASSES)

# Per scalar sampling field: classes of valid values (None = unset = the default).
SAMPLING_CLASSES: dict[str, Classes] = {
    "temperature": ((None, 1.0), (0.0, -0.0), (0.3, 0.1 + 0.2), (0.7, 0.70000001), (2.0,)),
    "top_p": ((None, 1.0), (0.9, 0.9000000001), (0.5,)),
    "top_k": ((None, -1, 0), (1,), (40,)),
    "max_tokens": ((None, 0), (16,), (256,)),
    "seed": ((None,), (0,), (1,), (-1,)),
    "presence_penalty": ((None, 0.0, -0.0), (0.5,), (-2.0,)),
    "frequency_penalty": ((None, 0.0, -0.0), (0.5, 0.5000000001), (2.0,)),
    "repetition_penalty": ((None, 1.0), (1.1,), (0.9,)),
    "min_p": ((None, 0.0), (0.05,)),
    "min_tokens": ((None, 0), (4,)),
    "n": ((None, 1), (2,)),
    "logprobs": ((None,), (0,), (5,)),
    "ignore_eos": ((None, False), (True,)),
    "response_format": (
        (None, ResponseFormat(), ResponseFormat(FormatType.TEXT, "ignored for text")),
        (
            ResponseFormat(FormatType.JSON_SCHEMA, '{"type":"object","required":["a"]}'),
            ResponseFormat(FormatType.JSON_SCHEMA, '{ "required": [ "a" ],\n "type": "object" }'),
        ),
        (ResponseFormat(FormatType.JSON_SCHEMA, '{"type":"string"}'),),
        (ResponseFormat(FormatType.JSON_OBJECT, ""),),
        (ResponseFormat(FormatType.REGEX, "[a-z]+"),),
        (ResponseFormat(FormatType.GRAMMAR, "[a-z]+"),),
    ),
}
STOP_CLASSES: Classes = (("\n",), ("END",), ("a:b",), ("a",), ("b:c",), (NFC_E, NFD_E))
STOP_ID_POOL = (0, 2, 7, 128001)
LOGIT_TOKEN_POOL = (1, 50, 1000)
LOGIT_BIAS_CLASSES: Classes = ((-100.0,), (0.0, -0.0), (5.0, 5.000000001))
EXTRA_KEY_CLASSES: Classes = (("tools",), ("sys",), ("a:b",), ("a",), (NFC_E, NFD_E))
EXTRA_VALUE_CLASSES: Classes = (("v1",), ("v2",), ("",), ("b:c",), (NFC_E, NFD_E))
TEXT_CLASSES: Classes = (("hello",), ("Hello",), ("",), ("a:b",), (NFC_E, NFD_E))
TOKEN_POOL = (1, 2, 3, 2**32 - 1)
ROLE_CLASSES: Classes = (("user",), ("system",), ("tool",))
CONTENT_CLASSES: Classes = (("hello",), ("hi",), ("",), (NFC_E, NFD_E))
SHA_POOL = (hashlib.sha256(b"hello").digest(), hashlib.sha256(b"x").digest())


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


def _set_of(classes: Classes) -> st.SearchStrategy[tuple[Any, ...]]:
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


def sampling_field(name: str) -> st.SearchStrategy[Any]:
    """A valid value for one Sampling field."""
    if name == "stop":
        return _set_of(STOP_CLASSES)
    if name == "stop_token_ids":
        return st.lists(st.sampled_from(STOP_ID_POOL), max_size=4).map(tuple)
    if name == "logit_bias":
        return st.dictionaries(
            st.sampled_from(LOGIT_TOKEN_POOL), member(LOGIT_BIAS_CLASSES), max_size=3
        )
    return member(SAMPLING_CLASSES[name])


def _respelled_sampling_field(name: str, value: Any) -> st.SearchStrategy[Any]:
    if name == "stop":
        return _respelled_set(STOP_CLASSES, value)
    if name == "stop_token_ids":
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
    """An `extra` map whose keys stay distinct after NFC."""
    key_classes = draw(st.lists(st.sampled_from(EXTRA_KEY_CLASSES), max_size=3, unique=True))
    return {draw(st.sampled_from(c)): draw(member(EXTRA_VALUE_CLASSES)) for c in key_classes}


@st.composite
def chat_messages(draw: st.DrawFn) -> ChatMessage:
    """One chat turn."""
    return ChatMessage(
        draw(member(ROLE_CLASSES)),
        draw(member(CONTENT_CLASSES)),
        draw(st.sampled_from(("", "bot"))),
        draw(st.sampled_from(("", "call-1"))),
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


@st.composite
def _respelled_input(draw: st.DrawFn, current: tuple[Any, InputKind]) -> tuple[Any, InputKind]:
    value, kind = current
    if kind is InputKind.TEXT:
        return draw(respelling(TEXT_CLASSES, value)), kind
    if kind is InputKind.CHAT:
        msgs = tuple(
            dataclasses.replace(
                m,
                role=draw(respelling(ROLE_CLASSES, m.role)),
                content=draw(respelling(CONTENT_CLASSES, m.content)),
            )
            for m in value
        )
        return msgs, kind
    return value, kind


# Every dimension of a KeyRequest: (how to draw any value, how to respell a given value).
KEY_DIMENSIONS: dict[str, Callable[[], st.SearchStrategy[Any]]] = {
    "tenant": lambda: member(DIMENSION_CLASSES),
    "model_version": lambda: member(DIMENSION_CLASSES),
    "adapter_version": lambda: member(ADAPTER_CLASSES),
    "prompt_version": lambda: member(DIMENSION_CLASSES),
    "extra": extras,
    "input": inputs,
}
for _name in SAMPLING_FIELDS:
    KEY_DIMENSIONS[f"sampling.{_name}"] = functools.partial(sampling_field, _name)


def get_dimension(req: KeyRequest, dimension: str) -> Any:
    """The value of one dimension (as named in KEY_DIMENSIONS)."""
    if dimension == "input":
        return (req.input, req.input_kind)
    if dimension.startswith("sampling."):
        return getattr(req.sampling, dimension.removeprefix("sampling."))
    return getattr(req, dimension)


def respelled_dimension(dimension: str, value: Any) -> st.SearchStrategy[Any]:
    """Another spelling of a dimension's value that means the same thing."""
    if dimension in ("tenant", "model_version", "prompt_version"):
        return respelling(DIMENSION_CLASSES, value)
    if dimension == "adapter_version":
        return respelling(ADAPTER_CLASSES, value)
    if dimension == "extra":
        return _respelled_map(EXTRA_KEY_CLASSES, EXTRA_VALUE_CLASSES, value)
    if dimension == "input":
        return _respelled_input(value)
    return _respelled_sampling_field(dimension.removeprefix("sampling."), value)


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
# Protobuf strings are UTF-8: any code point but surrogates; short and long, odd and plain.
_WIRE_TEXT = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=12),
    st.sampled_from(["", " ", "\t", "a:b", NFD_E, "x" * 257, "\u212b" * 200]),
)
_WIRE_FLOAT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, 0.5, 2.0, 100.0, 1e-300, 5e-324]),
)


@st.composite
def wire_sampling(draw: st.DrawFn) -> pb.SamplingParams:
    """A SamplingParams with any subset of fields set to any value of their wire type."""
    s = pb.SamplingParams()
    optional = {
        "temperature": _WIRE_FLOAT,
        "top_p": _WIRE_FLOAT,
        "top_k": _I32,
        "max_tokens": _I32,
        "seed": _I64,
        "presence_penalty": _WIRE_FLOAT,
        "frequency_penalty": _WIRE_FLOAT,
        "repetition_penalty": _WIRE_FLOAT,
        "min_p": _WIRE_FLOAT,
        "min_tokens": _I32,
        "n": _I32,
        "logprobs": _I32,
        "ignore_eos": st.booleans(),
    }
    for name in draw(st.sets(st.sampled_from(sorted(optional)))):
        setattr(s, name, draw(optional[name]))
    s.stop.extend(draw(st.lists(_WIRE_TEXT, max_size=70)))
    s.stop_token_ids.extend(draw(st.lists(_I32, max_size=70)))
    for token, bias in draw(st.dictionaries(_I32, _WIRE_FLOAT, max_size=5)).items():
        s.logit_bias[token] = bias
    if draw(st.booleans()):
        # 6..9 are unknown to this server (proto3 enums are open).
        s.response_format.type = draw(st.integers(min_value=0, max_value=9))  # type: ignore[assignment]
        s.response_format.schema = draw(
            st.one_of(_WIRE_TEXT, st.sampled_from(['{"type":"object"}', "[1, {}]", "{"]))
        )
    return s


@st.composite
def wire_keys(draw: st.DrawFn) -> pb.CacheKey:
    """A CacheKey message as any client (buggy, hostile or from the future) might send it."""
    k = pb.CacheKey(
        tenant=draw(_WIRE_TEXT),
        model_version=draw(_WIRE_TEXT),
        adapter_version=draw(_WIRE_TEXT),
        prompt_version=draw(_WIRE_TEXT),
    )
    for name, value in draw(st.dictionaries(_WIRE_TEXT, _WIRE_TEXT, max_size=5)).items():
        k.extra[name] = value
    which = draw(st.sampled_from(["none", "text", "chat", "token_ids", "input_sha256"]))
    if which == "text":
        k.text = draw(_WIRE_TEXT)
    elif which == "chat":
        for _ in range(draw(st.integers(min_value=0, max_value=3))):
            k.chat.messages.add(
                role=draw(_WIRE_TEXT),
                content=draw(_WIRE_TEXT),
                name=draw(_WIRE_TEXT),
                tool_call_id=draw(_WIRE_TEXT),
            )
        if not k.chat.messages:
            k.chat.SetInParent()
    elif which == "token_ids":
        k.token_ids.ids.extend(draw(st.lists(_U32, max_size=10)))
        k.token_ids.SetInParent()
    elif which == "input_sha256":
        k.input_sha256 = draw(st.binary(max_size=40))
    if draw(st.booleans()):
        k.sampling.CopyFrom(draw(wire_sampling()))
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

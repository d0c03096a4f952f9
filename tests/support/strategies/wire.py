"""Wire messages: anything a client can put in a CacheKey."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from infercache.v1 import cache_pb2 as pb

from tests.support.strategies.pools import KELVIN, NFD_E

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

"""Key requests (sidecar.keys.KeyRequest) and their respellings, from the pools."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from sidecar.keys import (
    ChatMessage,
    ContentPart,
    InputKind,
    KeyRequest,
    Sampling,
)
from tests.support.strategies.pools import (
    ADAPTER_CLASSES,
    CALL_POOL,
    CONTENT_CLASSES,
    DIMENSION_CLASSES,
    ENDPOINT_CLASSES,
    EXTRA_KEY_CLASSES,
    EXTRA_VALUE_CLASSES,
    LOGIT_BIAS_CLASSES,
    LOGIT_TOKEN_POOL,
    OUTPUT_CLASSES,
    PART_POOL,
    ROLE_CLASSES,
    SAMPLING_CLASSES,
    SHA_POOL,
    STOP_CLASSES,
    STOP_ID_POOL,
    TEMPLATE_CLASSES,
    TEXT_CLASSES,
    TOKEN_POOL,
    TOOL_CHOICE_CLASSES,
    TOOL_POOL,
    WORD_CLASSES,
    Classes,
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

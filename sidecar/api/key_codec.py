"""CacheKey message -> KeyRequest, field for field: an unset field stays unset (None)."""

from __future__ import annotations

from typing import Any

from infercache.v1 import cache_pb2 as PB2

from sidecar.errors import InvalidArgument
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


def _optional_fields(message: type[Any]) -> tuple[str, ...]:
    """The names of a message's proto3 `optional` scalar fields (those with presence)."""
    return tuple(
        f.name
        for f in message.DESCRIPTOR.fields
        # proto3 `optional` is a synthetic one-field oneof named after the field.
        if f.containing_oneof is not None and f.containing_oneof.name == "_" + f.name
    )


_SAMPLING_OPTIONAL = _optional_fields(PB2.SamplingParams)
_GUIDED_OPTIONAL = _optional_fields(PB2.GuidedDecoding)
_TEMPLATE_OPTIONAL = _optional_fields(PB2.ChatTemplateOptions)
_OUTPUT_OPTIONAL = _optional_fields(PB2.OutputOptions)
_PART_KINDS = {
    "text": PartKind.TEXT,
    "image": PartKind.IMAGE,
    "audio": PartKind.AUDIO,
    "file": PartKind.FILE,
    "video": PartKind.VIDEO,
}


def _present(msg: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(msg, name) if msg.HasField(name) else None for name in names}


def _opt(msg: Any, name: str) -> Any:
    return getattr(msg, name) if msg.HasField(name) else None


def _format_from_pb(f: PB2.ResponseFormat) -> ResponseFormat:
    try:
        fmt_type = FormatType(f.type)
    except ValueError as exc:  # proto3 enums are open: a newer client may send more
        raise InvalidArgument(
            "key.sampling.response_format.type", f"{f.type} is not a known format type"
        ) from exc
    return ResponseFormat(
        fmt_type, f.schema, _opt(f, "name"), _opt(f, "strict"), _opt(f, "description")
    )


def _guided_from_pb(g: PB2.GuidedDecoding) -> GuidedDecoding:
    return GuidedDecoding(choice=tuple(g.choice), **_present(g, _GUIDED_OPTIONAL))


_SAMPLING_SCALARS = frozenset(_SAMPLING_OPTIONAL)
_SAMPLING_SEQUENCES = frozenset(("stop", "stop_token_ids", "bad_words", "allowed_token_ids"))


def sampling_from_pb(s: PB2.SamplingParams) -> Sampling:
    """Unset optional fields stay None: unset is a value of its own in the key."""
    # ListFields yields only the fields that are set: a typical request sets a few of ~30.
    values: dict[str, Any] = {}
    for fd, value in s.ListFields():
        name = fd.name
        if name in _SAMPLING_SCALARS:
            values[name] = value
        elif name in _SAMPLING_SEQUENCES:
            values[name] = tuple(value)
        elif name == "logit_bias":
            values[name] = dict(value)
        elif name == "response_format":
            values[name] = _format_from_pb(value)
        elif name == "guided":
            values[name] = _guided_from_pb(value)
    return Sampling(**values)


def _part(p: PB2.ContentPart, path: str) -> ContentPart:
    which = p.WhichOneof("part")
    if which is None:
        raise InvalidArgument(path, "must be one of text, image, audio, file or video")
    if which == "text":
        return ContentPart(PartKind.TEXT, text=p.text)
    media: PB2.MediaRef = getattr(p, which)
    return ContentPart(
        _PART_KINDS[which],
        sha256=media.sha256,
        detail=_opt(media, "detail"),
        format=_opt(media, "format"),
        filename=_opt(media, "filename"),
    )


def _message(m: PB2.ChatMessage, i: int) -> ChatMessage:
    if m.null_content and (m.content or m.parts):
        raise InvalidArgument(
            f"key.chat.messages[{i}].null_content", "is set but the message has content"
        )
    return ChatMessage(
        m.role,
        None if m.null_content or m.parts else m.content,
        m.name,
        m.tool_call_id,
        parts=tuple(_part(p, f"key.chat.messages[{i}].parts[{j}]") for j, p in enumerate(m.parts)),
        tool_calls=tuple(ToolCall(c.id, c.name, c.arguments, c.type) for c in m.tool_calls),
        reasoning_content=_opt(m, "reasoning_content"),
    )


def key_request_from_known_pb(k: PB2.CacheKey) -> KeyRequest:
    """Translate a CacheKey message whose unknown fields were already refused."""
    which = k.WhichOneof("input")
    kind: InputKind | None
    value: str | tuple[ChatMessage, ...] | tuple[int, ...] | bytes | None
    if which == "text":
        kind, value = InputKind.TEXT, k.text
    elif which == "chat":
        kind, value = InputKind.CHAT, tuple(_message(m, i) for i, m in enumerate(k.chat.messages))
    elif which == "token_ids":
        kind, value = InputKind.TOKENS, tuple(k.token_ids.ids)
    elif which == "input_sha256":
        kind, value = InputKind.SHA256, k.input_sha256
    else:
        kind, value = None, None
    template = output = None
    if k.HasField("chat_template"):
        template = ChatTemplateOptions(**_present(k.chat_template, _TEMPLATE_OPTIONAL))
    if k.HasField("output"):
        output = OutputOptions(
            modalities=tuple(k.output.modalities), **_present(k.output, _OUTPUT_OPTIONAL)
        )
    return KeyRequest(
        tenant=k.tenant,
        model_version=k.model_version,
        adapter_version=k.adapter_version,
        prompt_version=k.prompt_version,
        sampling=sampling_from_pb(k.sampling) if k.HasField("sampling") else Sampling(),
        extra=dict(k.extra),
        input=value,
        input_kind=kind,
        tools=tuple(k.tools),
        tool_choice=_opt(k, "tool_choice"),
        parallel_tool_calls=_opt(k, "parallel_tool_calls"),
        chat_template=template,
        endpoint=k.endpoint,
        output=output,
    )

"""Building cache keys and request traits: the request, as the sidecar will hash it.

Keys are hashed by the sidecar, so every language gets the same digest for the
same request; this module only fills the message, field for field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from infercache.v1 import cache_pb2 as PB2


def make_key(
    *,
    tenant: str,
    prompt_version: str,
    model_version: str = "",
    adapter_version: str = "",
    text: str | None = None,
    chat: Sequence[Mapping[str, Any]] | None = None,
    token_ids: Sequence[int] | None = None,
    input_sha256: bytes | None = None,
    extra: Mapping[str, str] | None = None,
    tools: Sequence[Mapping[str, Any]] | str | None = None,
    tool_choice: str | Mapping[str, Any] | None = None,
    parallel_tool_calls: bool | None = None,
    endpoint: str = "",
    chat_template: Mapping[str, Any] | None = None,
    output: Mapping[str, Any] | None = None,
    **sampling: Any,
) -> PB2.CacheKey:
    """Build a CacheKey; exactly one of text/chat/token_ids/input_sha256.

    Every value is sent exactly as given (the sidecar hashes exact strings, and an
    unset field is not its default). `chat` takes OpenAI-style messages: `content`
    a string, None or a list of parts (`{"type": "text", "text": ...}`, or
    `{"type": "image" | "audio" | "file" | "video", "sha256": <32 bytes>, ...}`),
    plus `name`, `tool_call_id`, `tool_calls` and `reasoning_content` (or vLLM's
    `reasoning`); any other message field is refused (it goes into `extra`, docs/keys.md).
    `sampling` takes SamplingParams fields (temperature=0.2, stop=["\\n"], ...); a single
    stop string is a list of one, as engines read it.
    `tools`: the tool definitions offered to the model (JSON-able dicts, kept in
    order, key order included), or a tool-schema version name (`extra["tools"]`).
    `tool_choice` a mode string or a dict; `chat_template` and `output` take the
    ChatTemplateOptions / OutputOptions fields, dicts and lists as JSON.
    """
    inputs = [x for x in (text, chat, token_ids, input_sha256) if x is not None]
    if len(inputs) != 1:
        raise ValueError("give exactly one of text, chat, token_ids, input_sha256")
    extra = dict(extra or {})
    if isinstance(tools, str):
        if "tools" in extra:
            raise ValueError("give tools either as tools= or as extra['tools'], not both")
        extra["tools"] = tools
    key = PB2.CacheKey(
        tenant=tenant,
        model_version=model_version,
        adapter_version=adapter_version,
        prompt_version=prompt_version,
        extra=extra,
        endpoint=endpoint,
    )
    if tools is not None and not isinstance(tools, str):
        if not isinstance(tools, list | tuple):
            raise TypeError("tools must be a list of tool definitions or a schema version name")
        key.tools.extend(_json(t) for t in tools)
    if tool_choice is not None:
        key.tool_choice = tool_choice if isinstance(tool_choice, str) else _json(tool_choice)
    if parallel_tool_calls is not None:
        key.parallel_tool_calls = parallel_tool_calls
    if chat_template is not None:
        fields = _json_values(PB2.ChatTemplateOptions.DESCRIPTOR, chat_template, "chat_template.")
        key.chat_template.CopyFrom(PB2.ChatTemplateOptions(**fields))
    if output is not None:
        fields = _json_values(PB2.OutputOptions.DESCRIPTOR, output, "output.")
        key.output.CopyFrom(PB2.OutputOptions(**fields))
    if text is not None:
        key.text = text
    elif chat is not None:
        key.chat.messages.extend(_chat_message(m, f"messages[{i}]") for i, m in enumerate(chat))
    elif token_ids is not None:
        key.token_ids.ids.extend(token_ids)
    else:
        key.input_sha256 = input_sha256 or b""
    if sampling:
        sampling = _lists(PB2.SamplingParams.DESCRIPTOR, sampling, "")
        key.sampling.CopyFrom(PB2.SamplingParams(**sampling))
    return key


def _json(value: Any) -> str:
    # Key order is kept: templates render tools and schemas in the order given.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _json_values(desc: Any, fields: Mapping[str, Any], path: str) -> dict[str, Any]:
    # Only a string field takes JSON text: a repeated one (modalities) takes its list as is.
    def text(name: str, v: Any) -> Any:
        fd = desc.fields_by_name.get(name)
        is_text = fd is not None and not fd.is_repeated and fd.type == FieldDescriptor.TYPE_STRING
        return _json(v) if is_text and isinstance(v, Mapping | list) else v

    return _lists(desc, {k: text(k, v) for k, v in fields.items()}, path)


def _lists(desc: Any, fields: Mapping[str, Any], path: str) -> dict[str, Any]:
    """`fields` of the message `desc` describes, a lone string for a repeated field refused
    (protobuf would take its characters: stop="ab" as ["a", "b"]), except for `stop`,
    where a string is a list of one. (`desc` is Any: mypy types upb's Descriptor apart.)"""
    out = dict(fields)
    for name, value in fields.items():
        fd = desc.fields_by_name.get(name)
        if fd is None or not fd.is_repeated or not isinstance(value, str | bytes):
            nested = fd is not None and fd.message_type is not None and not fd.is_repeated
            if nested and isinstance(value, Mapping):
                out[name] = _lists(fd.message_type, value, f"{path}{name}.")
            continue
        if path == "" and name == "stop" and isinstance(value, str):
            out[name] = [value]
        else:
            raise TypeError(f"{path}{name} takes a list, not a single {type(value).__name__}")
    return out


_MEDIA = ("image", "audio", "file", "video")


def _known(value: Mapping[str, Any], allowed: frozenset[str], path: str) -> None:
    """Refuse a field make_key does not key: dropping it could make two requests one key."""
    unknown = sorted(k for k, v in value.items() if k not in allowed and v is not None)
    if unknown:
        raise ValueError(
            f"{path}.{unknown[0]} is not a key field here: give it in extra "
            f"(extra[{path + '.' + unknown[0]!r}] = its JSON text, docs/keys.md)"
        )


_MESSAGE_FIELDS = frozenset(
    {"role", "content", "name", "tool_call_id", "tool_calls", "reasoning_content", "reasoning"}
)
_CALL_FIELDS = frozenset({"id", "type", "function"})
_FLAT_CALL_FIELDS = frozenset({"id", "type", "name", "arguments"})
_FUNCTION_FIELDS = frozenset({"name", "arguments"})


def _content_part(part: Mapping[str, Any], path: str) -> PB2.ContentPart:
    if not isinstance(part, Mapping):
        raise TypeError(f"{path} must be a content part (a dict), not {type(part).__name__}")
    kind = part.get("type")
    if kind == "text":
        _known(part, frozenset({"type", "text"}), path)
        return PB2.ContentPart(text=part["text"])
    if kind in _MEDIA:
        media: dict[str, Any] = {
            kind: PB2.MediaRef(**{k: v for k, v in part.items() if k != "type"})
        }
        return PB2.ContentPart(**media)
    raise ValueError(f"content part type {kind!r}: use text, or image/audio/file/video by sha256")


def _get(value: Mapping[str, Any], name: str, default: Any) -> Any:
    # A null field is an absent one, as in the request's JSON.
    found = value.get(name)
    return default if found is None else found


def _tool_call(call: Mapping[str, Any], path: str) -> PB2.ToolCall:
    if call.get("function") is not None:
        _known(call, _CALL_FIELDS, path)
        function = call["function"]
        _known(function, _FUNCTION_FIELDS, path + ".function")
    else:
        _known(call, _FLAT_CALL_FIELDS, path)
        function = call
    return PB2.ToolCall(
        id=_get(call, "id", ""),
        type=_get(call, "type", "function"),
        name=function["name"],
        arguments=_get(function, "arguments", ""),
    )


def _chat_message(m: Mapping[str, Any], path: str) -> PB2.ChatMessage:
    _known(m, _MESSAGE_FIELDS, path)
    msg = PB2.ChatMessage(role=m["role"])
    content = m.get("content")
    if isinstance(content, str):
        msg.content = content
    elif content is None:
        msg.null_content = True  # null or absent: templates tell it from ""
    elif isinstance(content, list | tuple):
        msg.parts.extend(_content_part(p, f"{path}.content[{j}]") for j, p in enumerate(content))
    else:
        raise TypeError(f"{path}.content must be a string, None or a list of parts")
    if m.get("reasoning") is not None:
        if m.get("reasoning_content") is not None:
            raise ValueError(f"{path}: give reasoning_content or reasoning, not both")
        msg.reasoning_content = m["reasoning"]  # vLLM's name for the same field
    for name in ("name", "tool_call_id", "reasoning_content"):
        if m.get(name) is not None:
            setattr(msg, name, m[name])
    calls = m.get("tool_calls") or ()
    msg.tool_calls.extend(_tool_call(c, f"{path}.tool_calls[{j}]") for j, c in enumerate(calls))
    return msg


def make_traits(
    *,
    side_effects: bool = False,
    private_data: bool = False,
    real_time: bool = False,
    tools: bool = False,
) -> PB2.RequestTraits:
    """What to declare about a request; the sidecar's policy decides whether it bypasses."""
    return PB2.RequestTraits(
        side_effects=side_effects, private_data=private_data, real_time=real_time, tools=tools
    )

"""Building cache keys and request traits: the request, as the sidecar will hash it.

Keys are hashed by the sidecar, so every language gets the same digest for the
same request; this module only fills the message, field for field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

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
    plus `name`, `tool_call_id`, `tool_calls` and `reasoning_content`.
    `sampling` takes SamplingParams fields (temperature=0.2, stop=["\\n"], ...).
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
        key.tools.extend(_json(t) for t in tools)
    if tool_choice is not None:
        key.tool_choice = tool_choice if isinstance(tool_choice, str) else _json(tool_choice)
    if parallel_tool_calls is not None:
        key.parallel_tool_calls = parallel_tool_calls
    if chat_template is not None:
        key.chat_template.CopyFrom(PB2.ChatTemplateOptions(**_json_values(chat_template)))
    if output is not None:
        key.output.CopyFrom(PB2.OutputOptions(**_json_values(output)))
    if text is not None:
        key.text = text
    elif chat is not None:
        key.chat.messages.extend(_chat_message(m) for m in chat)
    elif token_ids is not None:
        key.token_ids.ids.extend(token_ids)
    else:
        key.input_sha256 = input_sha256 or b""
    if sampling:
        key.sampling.CopyFrom(PB2.SamplingParams(**sampling))
    return key


def _json(value: Any) -> str:
    # Key order is kept: templates render tools and schemas in the order given.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _json_values(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _json(v) if isinstance(v, Mapping | list) else v for k, v in fields.items()}


_MEDIA = ("image", "audio", "file", "video")


def _content_part(part: Mapping[str, Any]) -> PB2.ContentPart:
    kind = part.get("type")
    if kind == "text":
        return PB2.ContentPart(text=part["text"])
    if kind in _MEDIA:
        media: dict[str, Any] = {
            kind: PB2.MediaRef(**{k: v for k, v in part.items() if k != "type"})
        }
        return PB2.ContentPart(**media)
    raise ValueError(f"content part type {kind!r}: use text, or image/audio/file/video by sha256")


def _tool_call(call: Mapping[str, Any]) -> PB2.ToolCall:
    function = call.get("function", call)
    return PB2.ToolCall(
        id=call.get("id", ""),
        type=call.get("type", "function"),
        name=function["name"],
        arguments=function.get("arguments", ""),
    )


def _chat_message(m: Mapping[str, Any]) -> PB2.ChatMessage:
    msg = PB2.ChatMessage(role=m["role"])
    content = m.get("content")
    if isinstance(content, str):
        msg.content = content
    elif content is None:
        msg.null_content = True  # null or absent: templates tell it from ""
    else:
        msg.parts.extend(_content_part(p) for p in content)
    for name in ("name", "tool_call_id", "reasoning_content"):
        if m.get(name) is not None:
            setattr(msg, name, m[name])
    msg.tool_calls.extend(_tool_call(c) for c in m.get("tool_calls") or ())
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

"""KeyRequest -> CacheKey message bytes: the inverse of key_codec, for hit records.

A hit record keeps a key's wire form without its model version (prewarm replays it
under whatever model the pod runs then, see prewarm/records.py); an entry point that
builds KeyRequests itself (the OpenAI gateway) encodes them here. Unset stays unset:
`key_codec.key_request_from_known_pb(decode(record_key_bytes(r)))` is `r` without
its model version.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from infercache.v1 import cache_pb2 as PB2

from sidecar.keys import (
    ChatMessage,
    ChatTemplateOptions,
    InputKind,
    KeyRequest,
    OutputOptions,
    PartKind,
    Sampling,
)

_PART_FIELDS = {
    PartKind.IMAGE: "image",
    PartKind.AUDIO: "audio",
    PartKind.FILE: "file",
    PartKind.VIDEO: "video",
}
_SEQUENCES = ("stop", "stop_token_ids", "bad_words", "allowed_token_ids")


def record_key_bytes(req: KeyRequest) -> bytes:
    """The deterministic wire form of `req` as a CacheKey, without its model version."""
    k = PB2.CacheKey(
        tenant=req.tenant,
        adapter_version=req.adapter_version,
        prompt_version=req.prompt_version,
        extra=dict(req.extra),
        tools=list(req.tools),
        endpoint=req.endpoint,
    )
    if req.tool_choice is not None:
        k.tool_choice = req.tool_choice
    if req.parallel_tool_calls is not None:
        k.parallel_tool_calls = req.parallel_tool_calls
    _input(k, req)
    if req.sampling != Sampling():
        _sampling(k.sampling, req.sampling)
    if req.chat_template is not None:
        k.chat_template.CopyFrom(_set_fields(PB2.ChatTemplateOptions(), req.chat_template))
    if req.output is not None:
        _output(k.output, req.output)
    return k.SerializeToString(deterministic=True)


def _input(k: PB2.CacheKey, req: KeyRequest) -> None:
    value = req.input
    if req.input_kind is InputKind.TEXT and isinstance(value, str):
        k.text = value
    elif req.input_kind is InputKind.CHAT and isinstance(value, tuple):
        k.chat.SetInParent()
        for m in value:
            assert isinstance(m, ChatMessage)
            k.chat.messages.append(_message(m))
    elif req.input_kind is InputKind.TOKENS and value is not None:
        assert not isinstance(value, str | bytes)
        k.token_ids.SetInParent()
        k.token_ids.ids.extend(i for i in value if isinstance(i, int))
    elif req.input_kind is InputKind.SHA256 and isinstance(value, bytes):
        k.input_sha256 = value


def _message(m: ChatMessage) -> PB2.ChatMessage:
    out = PB2.ChatMessage(role=m.role, name=m.name, tool_call_id=m.tool_call_id)
    if m.parts:
        for p in m.parts:
            if p.kind is PartKind.TEXT:
                out.parts.append(PB2.ContentPart(text=p.text))
                continue
            media = PB2.MediaRef(sha256=p.sha256)
            for name in ("detail", "format", "filename"):
                if getattr(p, name) is not None:
                    setattr(media, name, getattr(p, name))
            part = PB2.ContentPart()
            getattr(part, _PART_FIELDS[p.kind]).CopyFrom(media)
            out.parts.append(part)
    elif m.content is None:
        out.null_content = True
    else:
        out.content = m.content
    for c in m.tool_calls:
        out.tool_calls.append(
            PB2.ToolCall(id=c.id, type=c.type, name=c.name, arguments=c.arguments)
        )
    if m.reasoning_content is not None:
        out.reasoning_content = m.reasoning_content
    return out


def _sampling(out: PB2.SamplingParams, s: Sampling) -> None:
    out.SetInParent()
    for f in dataclasses.fields(s):
        value = getattr(s, f.name)
        if f.name in _SEQUENCES:
            getattr(out, f.name).extend(value)
        elif f.name == "logit_bias":
            for token, bias in value.items():
                out.logit_bias[token] = bias
        elif f.name == "response_format" and value is not None:
            fmt = PB2.ResponseFormat(schema=value.schema)
            fmt.type = int(value.type)  # type: ignore[assignment]
            for name in ("name", "strict", "description"):
                if getattr(value, name) is not None:
                    setattr(fmt, name, getattr(value, name))
            out.response_format.CopyFrom(fmt)
        elif f.name == "guided" and value is not None:
            guided = _set_fields(PB2.GuidedDecoding(), value, skip=("choice",))
            guided.choice.extend(value.choice)
            out.guided.CopyFrom(guided)
        elif value is not None and f.name not in ("response_format", "guided"):
            setattr(out, f.name, value)


def _output(out: PB2.OutputOptions, o: OutputOptions) -> None:
    out.CopyFrom(_set_fields(PB2.OutputOptions(), o, skip=("modalities",)))
    out.modalities.extend(o.modalities)


def _set_fields(msg: Any, value: ChatTemplateOptions | Any, skip: tuple[str, ...] = ()) -> Any:
    """`msg` with every field of the dataclass `value` that is set (not None)."""
    for f in dataclasses.fields(value):
        v = getattr(value, f.name)
        if f.name not in skip and v is not None:
            setattr(msg, f.name, v)
    return msg

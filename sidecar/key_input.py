"""The input's part of a key: its kind and one SHA-256 of it, for text, token ids or a
whole chat (every message a length-prefixed block of tagged records, every byte of
text counted against the input limit). The rest of the encoding is sidecar.keys."""

from __future__ import annotations

import hashlib
import struct
import sys
from array import array
from collections.abc import Sequence
from typing import cast

from sidecar.errors import InvalidArgument, OverLimit
from sidecar.key_records import Encoder, Records, check_count, small, utf8
from sidecar.key_surface import ChatMessage, ContentPart, PartKind, ToolCall
from sidecar.key_types import InputKind, KeyLimits, KeyRequest


def input_digest_of(req: KeyRequest, limits: KeyLimits) -> tuple[InputKind, bytes]:
    """The input's kind and digest (a caller's SHA-256 as it is); InvalidArgument naming
    the field for a missing, malformed or oversized input."""
    kind, value = req.input_kind, req.input
    if kind is None or value is None:
        raise InvalidArgument("key.input", "is required: set text, chat, token_ids or input_sha256")
    h = hashlib.sha256()
    if kind is InputKind.TEXT:
        assert isinstance(value, str)
        data = utf8("key.text", value)
        if len(data) > limits.max_input_bytes:
            raise OverLimit(
                "key.text", f"is {len(data)} bytes; the limit is {limits.max_input_bytes}"
            )
        h.update(data)
    elif kind is InputKind.CHAT:
        assert isinstance(value, tuple)
        _hash_chat(h, value, limits)
    elif kind is InputKind.TOKENS:
        # The API passes token ids as a tuple, like chat: the kind decides, not the type.
        assert not isinstance(value, str | bytes)
        value = cast("Sequence[int]", value)
        check_count("key.token_ids", len(value), limits.max_token_ids)
        h.update(struct.pack(">I", len(value)))
        h.update(_u32_array("key.token_ids", value))
    else:
        assert isinstance(value, bytes)
        if len(value) != 32:
            raise InvalidArgument("key.input_sha256", f"must be 32 bytes, got {len(value)}")
        return kind, value
    return kind, h.digest()


def _u32_array(field_name: str, ids: Sequence[int]) -> bytes:
    try:
        arr = array("I", ids)
    except OverflowError as exc:
        raise InvalidArgument(field_name, "ids must be in [0, 2**32)") from exc
    if sys.byteorder == "little":
        arr.byteswap()  # hash big-endian so digests agree across platforms
    return arr.tobytes()


class _Budget:
    """The chat's running total of text bytes against max_input_bytes."""

    __slots__ = ("left",)

    def __init__(self, limit: int) -> None:
        self.left = limit

    def take(self, data: bytes, limit: int) -> bytes:
        self.left -= len(data)
        if self.left < 0:
            raise OverLimit("key.chat", f"content exceeds the input limit of {limit} bytes")
        return data


def _hash_chat(h: hashlib._Hash, messages: tuple[ChatMessage, ...], limits: KeyLimits) -> None:
    if not messages:
        raise InvalidArgument("key.chat.messages", "must hold at least one message")
    check_count("key.chat.messages", len(messages), limits.max_chat_messages)
    budget = _Budget(limits.max_input_bytes)
    h.update(struct.pack(">I", len(messages)))
    for i, msg in enumerate(messages):
        h.update(_message_bytes(f"key.chat.messages[{i}]", msg, limits, budget))


def _message_bytes(p: str, msg: ChatMessage, limits: KeyLimits, budget: _Budget) -> bytes:
    """One message as a length-prefixed block of tagged records (unset fields have none)."""
    short, big = limits.max_dimension_chars, limits.max_input_bytes
    if not msg.role:
        raise InvalidArgument(p + ".role", "is required")
    if msg.content and msg.parts:
        raise InvalidArgument(p + ".parts", "give content or parts, not both")
    rec = Records()
    rec.put(1, small(p + ".role", msg.role, short))
    if msg.content is not None and not msg.parts:
        rec.put(2, budget.take(utf8(p + ".content", msg.content), big))
    if msg.name:
        rec.put(3, small(p + ".name", msg.name, short))
    if msg.tool_call_id:
        rec.put(4, small(p + ".tool_call_id", msg.tool_call_id, short))
    if msg.parts:
        check_count(p + ".parts", len(msg.parts), limits.max_parts)
        parts = Encoder()
        for j, part in enumerate(msg.parts):
            parts.raw(_part_bytes(f"{p}.parts[{j}]", part, limits, budget))
        rec.put(5, parts.finish())
    if msg.tool_calls:
        check_count(p + ".tool_calls", len(msg.tool_calls), limits.max_tool_calls)
        calls = Encoder()
        for j, call in enumerate(msg.tool_calls):
            calls.raw(_call_bytes(f"{p}.tool_calls[{j}]", call, limits, budget))
        rec.put(6, calls.finish())
    if msg.reasoning_content is not None:
        rec.put(7, budget.take(utf8(p + ".reasoning_content", msg.reasoning_content), big))
    body = rec.finish()
    return struct.pack(">I", len(body)) + body


def _part_bytes(p: str, part: ContentPart, limits: KeyLimits, budget: _Budget) -> bytes:
    short = limits.max_dimension_chars
    rec = Records()
    rec.put(1, struct.pack(">I", int(part.kind)))
    if part.kind is PartKind.TEXT:
        rec.put(2, budget.take(utf8(p + ".text", part.text), limits.max_input_bytes))
        return rec.finish()
    if len(part.sha256) != 32:
        raise InvalidArgument(p + ".sha256", f"must be 32 bytes, got {len(part.sha256)}")
    rec.put(3, part.sha256)
    for tag, name, value in ((4, "detail", part.detail), (5, "format", part.format)):
        if value is not None:
            rec.put(tag, small(f"{p}.{name}", value, short))
    if part.filename is not None:
        rec.put(6, small(p + ".filename", part.filename, limits.max_extra_value_chars))
    return rec.finish()


def _call_bytes(p: str, call: ToolCall, limits: KeyLimits, budget: _Budget) -> bytes:
    short = limits.max_dimension_chars
    rec = Records()
    rec.put(1, small(p + ".id", call.id, short))
    rec.put(2, small(p + ".type", call.type, short))
    rec.put(3, small(p + ".name", call.name, short))
    rec.put(4, budget.take(utf8(p + ".arguments", call.arguments), limits.max_input_bytes))
    return rec.finish()

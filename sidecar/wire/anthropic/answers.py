"""A whole Messages answer: judged worth storing, renewed for a hit, and converted to and
from a stored stream where the conversion is exact (no I/O).

A hit gets a fresh `id` (`msg_...`) and the hit's usage (usage.py); everything else is
the original answer. `stream` is not part of the key, so a stored stream may answer a
whole request and a stored body a streamed one, but only for the plain answer whose
two forms say the same thing: one text block (vLLM sends thinking, tool_use and text
in one order in a body and in another in a stream, and an empty answer as one empty
text block in a body and as no block in a stream). Anything else is recomputed.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from typing import Any

from sidecar.wire.anthropic.sse import (
    STORED_STOP_REASONS,
    event_doc,
    renew_event,
    sse_event,
)
from sidecar.wire.anthropic.usage import hit_usage, prompt_tokens
from sidecar.wire.values import token_count

_BODY = frozenset(
    {"id", "type", "role", "content", "model", "stop_reason", "stop_sequence", "usage"}
)
"""The fields of a whole answer a conversion carries over (any other: not converted)."""


def fresh_id() -> str:
    """A new message id in Anthropic's style."""
    return "msg_" + secrets.token_hex(12)


def message_doc(payload: bytes) -> dict[str, Any] | None:
    """A stored whole answer as a JSON object of type `message`; None otherwise."""
    try:
        doc = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("type") != "message":
        return None
    return doc if isinstance(doc.get("content"), list) else None


def complete_message(doc: dict[str, Any], model: str) -> bool:
    """A 200 body worth keeping: an assistant message from `model` that stopped with a
    stop reason of a complete answer (sse.STORED_STOP_REASONS)."""
    return (
        doc.get("model") == model
        and doc.get("role") == "assistant"
        and doc.get("stop_reason") in STORED_STOP_REASONS
    )


def costs(doc: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, output tokens) of a whole answer's usage (0 when unknown)."""
    usage = doc.get("usage")
    if not isinstance(usage, dict):
        return 0, 0
    return prompt_tokens(usage), token_count(usage, "output_tokens")


def renewed_body(doc: dict[str, Any], new_id: str) -> bytes:
    """A stored whole answer as a hit's body."""
    fresh = {**doc, "id": new_id}
    if isinstance(doc.get("usage"), dict):
        fresh["usage"] = hit_usage(doc["usage"])
    return _compact(fresh)


def replay(events: Sequence[bytes], new_id: str) -> list[bytes] | None:
    """The stored events as a hit replays them (renew_event); None if one is unreadable."""
    out = []
    for event in events:
        renewed = renew_event(event, new_id)
        if renewed is None:
            return None
        out.append(renewed)
    return out


def body_from_events(events: Sequence[bytes], new_id: str) -> bytes | None:
    """A stored stream of one text block as a hit's whole body; None for any other."""
    docs = [event_doc(e) for e in events]
    if any(d is None for d in docs):
        return None
    kinds = [d["type"] for d in docs if d is not None and d.get("type") != "ping"]
    if kinds[:2] != ["message_start", "content_block_start"] or kinds[-3:] != [
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]:
        return None
    start, block, delta = _first(docs, "message_start"), _first(docs, "content_block_start"), None
    texts: list[str] = []
    for d in docs:
        assert d is not None
        if d["type"] == "content_block_delta":
            piece = d.get("delta")
            if not isinstance(piece, dict) or piece.get("type") != "text_delta":
                return None
            if d.get("index") != 0 or not isinstance(piece.get("text"), str):
                return None
            texts.append(piece["text"])
        elif d["type"] == "message_delta":
            delta = d
        elif d["type"] == "content_block_start" and d is not block:
            return None  # a second block
    message = start.get("message") if start else None
    content = block.get("content_block") if block else None
    if not isinstance(message, dict) or delta is None or content != {"type": "text", "text": ""}:
        return None
    stop = delta.get("delta")
    usage = delta.get("usage")
    if not isinstance(stop, dict) or not isinstance(usage, dict) or not "".join(texts):
        return None
    doc: dict[str, Any] = {
        "id": new_id,
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": "".join(texts)}],
        "model": message.get("model"),
        "stop_reason": stop.get("stop_reason"),
    }
    if stop.get("stop_sequence") is not None:
        doc["stop_sequence"] = stop["stop_sequence"]
    doc["usage"] = hit_usage(usage)
    return _compact(doc)


def events_from_body(doc: dict[str, Any], new_id: str) -> list[bytes] | None:
    """A stored whole answer of one text block as a hit's events; None for any other."""
    content = doc["content"]
    usage = doc.get("usage")
    if (
        set(doc) - _BODY
        or len(content) != 1
        or not isinstance(content[0], dict)
        or set(content[0]) != {"type", "text"}
        or content[0]["type"] != "text"
        or not isinstance(content[0]["text"], str)
        or not content[0]["text"]
        or not isinstance(usage, dict)
    ):
        return None
    renewed = hit_usage(usage)
    opening = {**renewed, "output_tokens": 0}
    message: dict[str, Any] = {
        "id": new_id,
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": doc.get("model"),
        "stop_reason": None,
        "stop_sequence": None,
        "usage": opening,
    }
    block = {"type": "text", "text": ""}
    text = {"type": "text_delta", "text": content[0]["text"]}
    stop = {"stop_reason": doc.get("stop_reason"), "stop_sequence": doc.get("stop_sequence")}
    return [
        sse_event("message_start", {"type": "message_start", "message": message}),
        sse_event(
            "content_block_start",
            {"type": "content_block_start", "content_block": block, "index": 0},
        ),
        sse_event(
            "content_block_delta", {"type": "content_block_delta", "delta": text, "index": 0}
        ),
        sse_event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse_event("message_delta", {"type": "message_delta", "delta": stop, "usage": renewed}),
        sse_event("message_stop", {"type": "message_stop"}),
    ]


def _first(docs: Sequence[dict[str, Any] | None], kind: str) -> dict[str, Any] | None:
    return next((d for d in docs if d is not None and d.get("type") == kind), None)


def _compact(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()

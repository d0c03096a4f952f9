"""The stand-in model server's `/v1/messages`: answers and event streams in the shape
vLLM 0.32 gives them (vllm/entrypoints/anthropic/serving.py), deterministic like the
OpenAI routes (`model_server.answer_for` of `messages_prompt`).

Markers in the prompt, besides model_server's [[error]], [[slow]], [[wrong-model]]:
    [[ping]]         (stream) a `ping` event after message_start, as Anthropic sends
    [[tool]]         a tool_use block after the text; stop_reason tool_use
    [[stop=R]]       stop_reason R (`null`: none, as vLLM says of an aborted generation)
    [[cached=K]]     usage says K of the prompt's tokens were read from the prefix cache
    [[cut]]          (stream) ends after the first text delta: no message_stop
    [[no-end]]       (stream) every event but the last, message_stop
    [[error-event]]  (stream) an error event after the first text delta, the rest after it
"""

from __future__ import annotations

import json
import re
from typing import Any

_STOP = re.compile(r"\[\[stop=([a-z_]+)\]\]")
_CACHED = re.compile(r"\[\[cached=(\d+)\]\]")


def messages_prompt(req: dict[str, Any]) -> str:
    """The prompt text a Messages request stands for (what answer_for is given)."""
    lines = [] if req.get("system") is None else [f"system: {_text(req['system'])}"]
    lines += [f"{m['role']}: {_text(m.get('content'))}" for m in req["messages"]]
    return "\n".join(lines)


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content)


def stop_reason_for(prompt: str) -> str | None:
    """The answer's stop_reason: [[stop=R]]'s R (`null`: None), tool_use, else end_turn."""
    found = _STOP.search(prompt)
    if found:
        return None if found.group(1) == "null" else found.group(1)
    return "tool_use" if "[[tool]]" in prompt else "end_turn"


def usage_for(prompt: str, output_tokens: int) -> dict[str, int]:
    """vLLM's usage: input_tokens is the prompt less what was read from the cache."""
    total = len(prompt.split())
    found = _CACHED.search(prompt)
    if not found:
        return {"input_tokens": total, "output_tokens": output_tokens}
    cached = min(int(found.group(1)), total)
    usage = {"input_tokens": total - cached, "output_tokens": output_tokens}
    return usage | {"cache_read_input_tokens": cached}


def _tool_block(prompt: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": "chatcmpl-tool-1", "name": "lookup", "input": {"q": 1}}


def message_body(model: str, prompt: str, text: str) -> dict[str, Any]:
    """The whole answer (`model_dump(exclude_none=True)` of vLLM's response)."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if "[[tool]]" in prompt:
        content.append(_tool_block(prompt))
    doc: dict[str, Any] = {
        "id": "chatcmpl-test",
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": model,
    }
    reason = stop_reason_for(prompt)
    if reason is not None:
        doc["stop_reason"] = reason
    return doc | {"usage": usage_for(prompt, 3)}


def _event(kind: str, doc: dict[str, Any]) -> bytes:
    data = json.dumps({"type": kind, **doc}, separators=(",", ":"))
    return f"event: {kind}\ndata: {data}\n\n".encode()


def message_events(model: str, prompt: str, pieces: list[str]) -> list[bytes]:
    """The stream's events, as vLLM's message_stream_converter writes them."""
    start: dict[str, Any] = {
        "id": "chatcmpl-stream-test",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": model,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage_for(prompt, 0),
    }
    events = [_event("message_start", {"message": start})]
    if "[[ping]]" in prompt:
        events.append(_event("ping", {}))
    events.append(
        _event("content_block_start", {"content_block": {"type": "text", "text": ""}, "index": 0})
    )
    for piece in pieces:
        delta = {"type": "text_delta", "text": piece}
        events.append(_event("content_block_delta", {"delta": delta, "index": 0}))
    events.append(_event("content_block_stop", {"index": 0}))
    if "[[tool]]" in prompt:
        block = _tool_block(prompt) | {"input": {}}
        events.append(_event("content_block_start", {"content_block": block, "index": 1}))
        delta = {"type": "input_json_delta", "partial_json": '{"q": 1}'}
        events.append(_event("content_block_delta", {"delta": delta, "index": 1}))
        events.append(_event("content_block_stop", {"index": 1}))
    stop = {"stop_reason": stop_reason_for(prompt), "stop_sequence": None}
    usage = usage_for(prompt, len(pieces))
    events.append(_event("message_delta", {"delta": stop, "usage": usage}))
    events.append(_event("message_stop", {}))
    if "[[cut]]" in prompt:
        events = events[:3]
    if "[[no-end]]" in prompt:
        events = events[:-1]
    if "[[error-event]]" in prompt:
        error = {"error": {"type": "internal_error", "message": "engine died"}}
        events = [*events[:3], _event("error", error), *events[3:]]
    return events

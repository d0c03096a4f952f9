"""The stand-in model server's POST /v1/responses, shaped as vLLM 0.32 answers it
(vllm/entrypoints/openai/responses/): a response object that echoes the request's
fields, and for `stream: true` the same event sequence with `event:` lines and no
[DONE]: response.created, response.in_progress, response.output_item.added,
response.content_part.added, one response.output_text.delta per word,
response.output_text.done, response.content_part.done, response.output_item.done,
response.completed (`sequence_number` 0, 1, 2, ...).

Usage: input_tokens is the prompt's word count and, as an engine's prefix cache would
report, `input_tokens_details.cached_tokens` is half of it (rounded down).
Markers in the prompt (besides model_server.py's [[error]], [[slow]], ...):
    [[finish=length]]  status "incomplete", incomplete_details max_output_tokens (as
                       vLLM answers a response cut at max_output_tokens)
    [[cut]]            (stream) ends after the first delta: no response.completed
    [[no-end]]         (stream) every event but the last, response.completed
    [[error-event]]    (stream) an `error` event after the first delta
    [[call]]           the answer is a function_call item (name "lookup") instead of text
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

ECHOED = (
    "instructions",
    "metadata",
    "max_tool_calls",
    "previous_response_id",
    "reasoning",
    "text",
    "user",
)


def responses_prompt(req: dict[str, Any]) -> str:
    """The prompt text a /v1/responses request stands for (what answer_for is given)."""
    lines = []
    if req.get("instructions") is not None:
        lines.append(f"system: {req['instructions']}")
    raw = req["input"]
    if isinstance(raw, str):
        lines.append(f"user: {raw}")
    else:
        for item in raw:
            who = item.get("role") or item.get("type")
            said = item.get("content", item.get("output", item.get("arguments")))
            lines.append(f"{who}: {said if isinstance(said, str) else json.dumps(said)}")
    return "\n".join(lines)


def _hex() -> str:
    return uuid.uuid4().hex


def response_object(
    req: dict[str, Any], model: str, prompt: str, output: list[dict[str, Any]], status: str
) -> dict[str, Any]:
    """The response object vLLM builds for `req` (ResponsesResponse.from_request)."""
    words = len(prompt.split())
    done = status != "in_progress"
    usage = {
        "input_tokens": words,
        "input_tokens_details": {"cached_tokens": words // 2, "cache_write_tokens": 0},
        "output_tokens": 3,
        "output_tokens_details": {"reasoning_tokens": 0, "tool_output_tokens": 0},
        "total_tokens": words + 3,
    }
    doc: dict[str, Any] = {
        "id": f"resp_{_hex()}",
        "created_at": int(time.time()),
        "incomplete_details": None,
        "model": model,
        "object": "response",
        "output": output,
        "parallel_tool_calls": req.get("parallel_tool_calls", True),
        "temperature": req.get("temperature") if req.get("temperature") is not None else 1.0,
        "tool_choice": req.get("tool_choice", "auto" if req.get("tools") else "none"),
        "tools": req.get("tools") or [],
        "top_p": req.get("top_p") if req.get("top_p") is not None else 1.0,
        "background": bool(req.get("background")),
        "max_output_tokens": req.get("max_output_tokens") or 4096,
        "prompt": None,
        "service_tier": req.get("service_tier", "auto"),
        "status": status,
        "top_logprobs": req.get("top_logprobs") or 0,
        "truncation": req.get("truncation", "disabled"),
        "usage": usage if done else None,
    } | {name: req.get(name) for name in ECHOED}
    if status == "incomplete":
        doc["incomplete_details"] = {"reason": "max_output_tokens"}
    return doc


def output_items(prompt: str, text: str) -> list[dict[str, Any]]:
    """The output items of a finished answer whose text is `text`."""
    if "[[call]]" in prompt:
        arguments = json.dumps({"q": text})
        call = {"type": "function_call", "id": f"fc_{_hex()}", "call_id": f"call_{_hex()}"}
        return [call | {"name": "lookup", "arguments": arguments, "status": "completed"}]
    part: dict[str, Any] = {
        "type": "output_text",
        "text": text,
        "annotations": [],
        "logprobs": None,
    }
    message = {"id": f"msg_{_hex()}", "type": "message", "role": "assistant"}
    return [message | {"content": [part], "status": "completed"}]


def status_for(prompt: str) -> str:
    """The finished response's status: incomplete for [[finish=length]]."""
    return "incomplete" if "[[finish=length]]" in prompt else "completed"


def whole_answer(req: dict[str, Any], model: str, prompt: str, text: str) -> dict[str, Any]:
    """The non-streamed answer."""
    return response_object(req, model, prompt, output_items(prompt, text), status_for(prompt))


def stream_events(req: dict[str, Any], model: str, prompt: str, pieces: list[str]) -> list[bytes]:
    """The streamed answer's SSE events, framed as vLLM frames them."""
    text = "".join(pieces)
    head = response_object(req, model, prompt, [], "in_progress")
    final = whole_answer(req, model, prompt, text) | {
        "id": head["id"],
        "created_at": head["created_at"],
    }
    item = final["output"][0]
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": head},
        {"type": "response.in_progress", "response": head},
    ]
    added = {"output_index": 0, "item": item | {"status": "in_progress"}}
    if item["type"] == "function_call":
        events.append({"type": "response.output_item.added"} | added)
        common = {"output_index": 0, "item_id": item["id"]}
        events.append(
            {"type": "response.function_call_arguments.delta", "delta": item["arguments"]} | common
        )
        done = {"arguments": item["arguments"], "name": item["name"]}
        events.append({"type": "response.function_call_arguments.done"} | common | done)
    else:
        added["item"] |= {"content": []}
        events.append({"type": "response.output_item.added"} | added)
        part: dict[str, Any] = {"type": "output_text", "text": ""}
        part |= {"annotations": [], "logprobs": []}
        common = {"output_index": 0, "item_id": item["id"], "content_index": 0}
        events.append({"type": "response.content_part.added", "part": part} | common)
        for piece in pieces:
            delta = {"type": "response.output_text.delta", "delta": piece, "logprobs": []}
            events.append(delta | common)
        done_text = {"type": "response.output_text.done", "text": text, "logprobs": []}
        events.append(done_text | common)
        done_part = {"type": "response.content_part.done", "part": item["content"][0]}
        events.append(done_part | common)
    events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
    events.append({"type": "response.completed", "response": final})
    if "[[cut]]" in prompt:
        events = events[:5]
    if "[[no-end]]" in prompt:
        events = events[:-1]
    if "[[error-event]]" in prompt:
        error = {"type": "error", "code": "InternalServerError", "message": "engine died"}
        events = [*events[:5], error | {"param": None}]
    return [_framed(doc | {"sequence_number": i}) for i, doc in enumerate(events)]


def _framed(doc: dict[str, Any]) -> bytes:
    return f"event: {doc['type']}\ndata: {json.dumps(doc)}\n\n".encode()

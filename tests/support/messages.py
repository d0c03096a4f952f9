"""Messages API requests for the gateway's tests: bodies, raw posts, events read back."""

from __future__ import annotations

import json
from typing import Any

from tests.support.gateway import API_KEYS, MODEL, GatewayPod

PATH = "/v1/messages"


def messages_body(text: str, **fields: Any) -> dict[str, Any]:
    """A Messages body for MODEL with one user turn `text`, `fields` added."""
    doc: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": text}],
    }
    return doc | fields


def post_messages(
    pod: GatewayPod, body: Any, headers: dict[str, str] | None = None, tenant: str = "acme"
) -> tuple[int, dict[str, str], bytes]:
    """A raw POST to /v1/messages with `tenant`'s key as x-api-key (as the SDK sends it)."""
    hdrs = {"x-api-key": API_KEYS[tenant]} if tenant else {}
    return pod.post(PATH, body, hdrs | (headers or {}), tenant="")


def events_of(stream: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each event of an SSE body."""
    out = []
    for event in stream.split(b"\n\n"):
        if not event.strip():
            continue
        lines = event.decode().splitlines()
        name = next(line[6:].strip() for line in lines if line.startswith("event:"))
        data = "\n".join(line[5:].lstrip() for line in lines if line.startswith("data:"))
        out.append((name, json.loads(data)))
    return out


def anthropic_error(body: bytes) -> tuple[str, str]:
    """(error type, message) of an Anthropic error body (asserting its shape)."""
    doc = json.loads(body)
    assert doc["type"] == "error", doc
    assert set(doc["error"]) == {"type", "message"}, doc
    return doc["error"]["type"], doc["error"]["message"]

"""A cached Responses answer as the answer to a new request (no I/O).

A hit gets a fresh response `id` (`resp_...`), `created_at`, and fresh output item ids
(`msg_...`, `fc_...`, `rs_...`: the same prefix, new random hex), the same new id
wherever one old id appears across the events of one replay (`item.id`, `item_id`,
the response's `output[].id`); `call_id`s, `sequence_number`s and everything else are
the original answer's. Its usage says the whole prompt came from the cache
(`as_cached`).

A stored stream is replayed event by event with its boundaries: an event carrying a
response object or an item is re-serialised with the values renewed, any other
(`response.output_text.delta`, ...) keeps its bytes but for its `item_id`. A stored
stream answers a request that does not stream with its `response.completed` event's
response object: the very object vLLM builds for a whole answer. A stored whole answer
does not answer a streamed request (`None`): the events' boundaries and their
in-between states are not in it, and an approximation is never sent.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Sequence
from typing import Any

from sidecar.wire.openai.responses_sse import (
    COMPLETED,
    complete_response,
    event_object,
    response_doc,
)

_EVENT_LINE = re.compile(rb"^event:", re.MULTILINE)


def as_cached(usage: Any) -> Any:
    """A response's `usage` for a hit: `input_tokens_details.cached_tokens` is the whole
    prompt (`input_tokens`), `cache_write_tokens` 0, `cached_tokens_per_turn` equal to
    `input_tokens_per_turn` (when the usage has them); everything else as computed."""
    if not isinstance(usage, dict):
        return usage
    n = usage.get("input_tokens")
    if not isinstance(n, int) or isinstance(n, bool):
        return usage
    details = usage.get("input_tokens_details")
    details = dict(details) if isinstance(details, dict) else {}
    details["cached_tokens"] = n
    if "cache_write_tokens" in details:
        details["cache_write_tokens"] = 0
    per_turn = details.get("input_tokens_per_turn")
    if isinstance(per_turn, list) and "cached_tokens_per_turn" in details:
        details["cached_tokens_per_turn"] = list(per_turn)
    return {**usage, "input_tokens_details": details}


class ResponsesRenewal:
    """The fresh ids and timestamp of one hit (the same across all its events)."""

    __slots__ = ("_ids", "created_at")

    def __init__(self) -> None:
        self.created_at = int(time.time())
        self._ids: dict[str, str] = {}

    def id_for(self, old: str) -> str:
        """The fresh id standing for `old` (its prefix up to `_` kept)."""
        new = self._ids.get(old)
        if new is None:
            head, sep, _ = old.partition("_")
            new = (head + sep if sep else "") + secrets.token_hex(16)
            self._ids[old] = new
        return new

    def response(self, resp: Any, *, account: bool) -> Any:
        """A response object renewed (`account`: its usage as_cached)."""
        if not isinstance(resp, dict):
            return resp
        out = dict(resp)
        if isinstance(out.get("id"), str):
            out["id"] = self.id_for(out["id"])
        for stamp in ("created_at", "completed_at"):
            if isinstance(out.get(stamp), int):
                out[stamp] = self.created_at
        if isinstance(out.get("output"), list):
            out["output"] = [self.item(i) for i in out["output"]]
        if account and "usage" in out:
            out["usage"] = as_cached(out["usage"])
        return out

    def item(self, item: Any) -> Any:
        """An output item with its `id` renewed."""
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            return {**item, "id": self.id_for(item["id"])}
        return item


def renewed_body(payload: bytes, renewal: ResponsesRenewal) -> bytes | None:
    """A stored whole answer renewed; None when it is not a Responses object."""
    doc = response_doc(payload)
    if doc is None:
        return None
    return _compact(renewal.response(doc, account=True))


def replay_events(events: Sequence[bytes], renewal: ResponsesRenewal) -> list[bytes] | None:
    """The stored events renewed, one for one; None when they are not a Responses
    stream this gateway stored."""
    out = []
    for event in events:
        doc = event_object(event)
        if doc is None:
            return None
        renewed = _renewed_event(event, doc, renewal)
        if renewed is None:
            return None
        out.append(renewed)
    return out


def body_from_events(
    events: Sequence[bytes], model: str, renewal: ResponsesRenewal
) -> bytes | None:
    """A stored stream as a whole answer: its `response.completed` event's response."""
    if not events:
        return None
    last = event_object(events[-1])
    if last is None or last["type"] != COMPLETED:
        return None
    resp = last.get("response")
    if not complete_response(resp, model):
        return None
    return _compact(renewal.response(resp, account=True))


def _renewed_event(event: bytes, doc: dict[str, Any], renewal: ResponsesRenewal) -> bytes | None:
    if "response" in doc or "item" in doc:
        fresh = dict(doc)
        if "response" in fresh:
            last = doc["type"] == COMPLETED
            fresh["response"] = renewal.response(fresh["response"], account=last)
        if "item" in fresh:
            fresh["item"] = renewal.item(fresh["item"])
        if isinstance(fresh.get("item_id"), str):
            fresh["item_id"] = renewal.id_for(fresh["item_id"])
        named = _EVENT_LINE.search(event) is not None
        head = b"event: " + doc["type"].encode() + b"\n" if named else b""
        return head + b"data: " + _compact(fresh) + b"\n\n"
    old = doc.get("item_id")
    if old is None:
        return event
    if not isinstance(old, str):
        return None
    spelled = json.dumps(old).encode()
    fresh_id = json.dumps(renewal.id_for(old)).encode()
    pattern = rb'("item_id"\s*:\s*)' + re.escape(spelled)
    data, n = re.subn(pattern, lambda m: m.group(1) + fresh_id, event, count=1)
    return data if n == 1 else None


def _compact(doc: Any) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()

"""A Responses API answer judged worth storing, whole or streamed (no I/O).

A Responses stream is `event: <type>` / `data: <json>` events with no `[DONE]`: it ends
with one terminal event (`response.completed`, `response.failed`,
`response.incomplete` or `error`). vLLM sends `response.completed` for a response cut
at `max_output_tokens` too, with `status: "incomplete"`. So an answer is stored only
when its response object (the whole body, or the `response.completed` event's) has
`status: "completed"`, no `incomplete_details`, no `error`, and names the model asked
for; a stream also needs that event last, every event a JSON object with a `type`,
and nothing cut mid-event. Each event is kept as its exact bytes (its `event:` line
and blank line included), one chunk each, so a replay has the original boundaries.
"""

from __future__ import annotations

import json
from typing import Any

from sidecar.entries import ChunkMeta
from sidecar.wire.openai.sse import CollectedStream, EventSplitter, event_data

COMPLETED = "response.completed"
TERMINAL = frozenset({COMPLETED, "response.failed", "response.incomplete", "error"})
"""The event types that end a Responses stream."""
WATCH_EVENT_BYTES = 64 * 1024 * 1024
"""Past the store's limit, events are still split (not kept) to see how the stream
ends; one longer than this is not followed any further."""


def response_doc(payload: bytes) -> dict[str, Any] | None:
    """A stored whole answer as a Responses object; None otherwise."""
    try:
        doc = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("object") != "response":
        return None
    return doc if isinstance(doc.get("output"), list) else None


def complete_response(doc: Any, model: str) -> bool:
    """A response object worth keeping: completed, nothing cut, from `model`."""
    return (
        isinstance(doc, dict)
        and doc.get("object") == "response"
        and doc.get("status") == "completed"
        and doc.get("incomplete_details") is None
        and doc.get("error") is None
        and isinstance(doc.get("output"), list)
        and doc.get("model") in (None, model)
    )


def event_object(event: bytes) -> dict[str, Any] | None:
    """The JSON object an event's data carries, when it has a string `type`."""
    data = event_data(event)
    if data is None:
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("type"), str):
        return None
    return doc


class ResponsesStreamCollector:
    """Keeps a Responses stream's events as its bytes arrive (up to `limit` bytes in
    all) and follows how it ends."""

    __slots__ = (
        "_events",
        "_failed",
        "_metas",
        "_model",
        "_ok",
        "_size",
        "_splitter",
        "ended",
        "limit",
        "whole",
    )

    def __init__(self, limit: int, model: str) -> None:
        self.limit = limit
        self._model = model
        self._splitter: EventSplitter | None = EventSplitter(WATCH_EVENT_BYTES)
        self._events: list[bytes] = []
        self._metas: list[ChunkMeta] = []
        self._size = 0
        self._failed = False
        self._ok = False
        self.whole = True
        """False once the stream can no longer be stored (over the limit)."""
        self.ended = False
        """A terminal event arrived (the stream ended as a Responses stream ends)."""

    @property
    def followed(self) -> bool:
        """Whether the stream is still followed (see WATCH_EVENT_BYTES)."""
        return self._splitter is not None

    def feed(self, piece: bytes, offset_ms: int) -> None:
        """Account for the next bytes, which arrived `offset_ms` after the request."""
        if self._splitter is None:
            return
        try:
            arrived = self._splitter.feed(piece)
        except ValueError:
            self._splitter = None
            self.whole = False
            return
        for event in arrived:
            if event_data(event) is None:
                continue  # a comment (keep-alive): nothing of the answer, not kept
            self._see(event)
            if not self.whole:
                continue
            self._size += len(event)
            if self._size > self.limit:
                self.whole = False
                self._events.clear()
                self._metas.clear()
                continue
            self._events.append(event)
            self._metas.append(ChunkMeta(len(event), 1, offset_ms))

    def _see(self, event: bytes) -> None:
        doc = event_object(event)
        if self.ended or doc is None:
            self._failed = True  # after the end, or not a Responses event
            return
        kind = doc["type"]
        if kind in TERMINAL:
            self.ended = True
            self._ok = kind == COMPLETED and complete_response(doc.get("response"), self._model)
        elif isinstance(doc.get("response"), dict):
            named = doc["response"].get("model")
            if named is not None and named != self._model:
                self._failed = True

    @property
    def complete(self) -> bool:
        """A whole, completed stream within the limit, nothing after its end."""
        pending = self._splitter is None or self._splitter.pending
        return self.whole and self.ended and self._ok and not self._failed and not pending

    def result(self) -> CollectedStream | None:
        """The stream to store; None when it is not `complete`."""
        if not self.complete:
            return None
        models = frozenset({self._model})
        return CollectedStream(b"".join(self._events), tuple(self._metas), "completed", models)

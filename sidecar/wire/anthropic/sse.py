"""A Messages API event stream: followed as it arrives, judged complete, collected into
the stored form, and renewed for a replay (no I/O).

vLLM (and Anthropic) send named events, `event: <type>\\ndata: <json>\\n\\n`:

    message_start, [ping], (content_block_start, content_block_delta*,
    content_block_stop)*, message_delta, message_stop

A stream is complete, and may be stored, only when message_start came first and named
the model asked for, every block started was stopped, message_delta carried a stop
reason of a complete answer (STORED_STOP_REASONS), message_stop came last, nothing
followed it, and no event was an `error` or of a type this module does not know. Each
event is kept as its exact bytes (the event line and the blank line included), so a
replay sends the original events with their original boundaries; only message_start
(a fresh id, the hit's usage) and message_delta (the hit's usage) are rewritten.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from sidecar.entries import ChunkMeta
from sidecar.wire.anthropic.usage import hit_usage
from sidecar.wire.openai.sse import EventKeeper, EventSplitter

STORED_STOP_REASONS = frozenset({"end_turn", "stop_sequence", "max_tokens", "tool_use"})
"""The stop reasons of a complete answer, as the chat path stores `stop`, `length` and
`tool_calls`. vLLM sends no stop reason (null) for an aborted or failed generation;
Anthropic's `refusal` and `pause_turn` (a turn to be continued) are not stored either."""

_KNOWN = frozenset(
    {
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    }
)
_LINES = re.compile(rb"\r\n|\n|\r")


def event_parts(event: bytes) -> tuple[str | None, bytes | None]:
    """(the `event:` name, the data lines joined) of one event; None for what is absent."""
    name: str | None = None
    data: list[bytes] = []
    for line in _LINES.split(event):
        if line.startswith(b"event:"):
            name = line[6:].strip().decode("utf-8", "replace")
        elif line.startswith(b"data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(b" ") else value)
    return name, (b"\n".join(data) if data else None)


def event_doc(event: bytes) -> dict[str, Any] | None:
    """The JSON object an event carries, None when it carries none."""
    _, data = event_parts(event)
    if data is None:
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


class MessageWatch:
    """Follows a stream's events in order (see the module docstring)."""

    __slots__ = ("failed", "model", "open_blocks", "started", "stop_reason", "stopped")

    def __init__(self, model: str) -> None:
        self.model = model
        self.started = False
        self.stopped = False
        self.failed = False
        self.open_blocks: set[int] = set()
        self.stop_reason = ""

    def see(self, event: bytes) -> bool:
        """Account for one event; whether it carries data (a comment does not)."""
        name, data = event_parts(event)
        if data is None:
            return False
        doc = event_doc(event)
        kind = doc.get("type") if doc is not None else None
        if (
            self.stopped
            or doc is None
            or kind not in _KNOWN
            or (name is not None and name != kind)
            or (kind != "message_start") != self.started
        ):
            self.failed = True  # after message_stop, not JSON, error, unknown, misplaced
            return True
        assert doc is not None
        if kind == "message_start":
            message = doc.get("message")
            self.started = True
            if not isinstance(message, dict) or message.get("model") != self.model:
                self.failed = True  # whatever answered is not what the key says
        elif kind in ("content_block_start", "content_block_stop"):
            index = doc.get("index")
            if not isinstance(index, int) or isinstance(index, bool):
                self.failed = True
            elif kind == "content_block_start":
                self.open_blocks.add(index)
            elif index in self.open_blocks:
                self.open_blocks.discard(index)
            else:
                self.failed = True
        elif kind == "message_delta":
            delta = doc.get("delta")
            reason = delta.get("stop_reason") if isinstance(delta, dict) else None
            if reason not in STORED_STOP_REASONS:
                self.failed = True
            else:
                self.stop_reason = str(reason)
        elif kind == "message_stop":
            self.stopped = True
        return True

    @property
    def complete(self) -> bool:
        """The whole answer arrived: it may be stored."""
        return self.stopped and not self.failed and bool(self.stop_reason) and not self.open_blocks


@dataclass(frozen=True, slots=True)
class CollectedMessage:
    """A complete stream as stored: its events joined, one chunk per event."""

    payload: bytes
    chunks: tuple[ChunkMeta, ...]
    stop_reason: str


class MessageCollector:
    """Keeps a stream's events as its bytes arrive, up to `limit` bytes in all."""

    __slots__ = ("_keeper", "watch")

    def __init__(self, limit: int, model: str) -> None:
        self._keeper = EventKeeper(limit)
        self.watch = MessageWatch(model)

    @property
    def whole(self) -> bool:
        """False once the stream can no longer be stored (EventKeeper.whole)."""
        return self._keeper.whole

    def feed(self, piece: bytes, offset_ms: int) -> None:
        """Account for the next bytes, which arrived `offset_ms` after the request; a
        comment (keep-alive) is nothing of the answer and is not kept."""
        self._keeper.feed(piece, offset_ms, self.watch.see)

    @property
    def complete(self) -> bool:
        """What arrived so far is a whole stream, nothing cut mid-event, within the limit."""
        return self._keeper.intact and self.watch.complete

    def result(self) -> CollectedMessage | None:
        """The stream to store; None when it is not `complete`."""
        if not self.complete:
            return None
        payload, chunks = self._keeper.payload()
        return CollectedMessage(payload, chunks, self.watch.stop_reason)


def split_events(payload: bytes) -> list[bytes]:
    """A stored payload's events (each with its terminating blank line)."""
    splitter = EventSplitter(len(payload) + 1)
    return splitter.feed(payload)


def renew_event(event: bytes, new_id: str) -> bytes | None:
    """`event` as a hit replays it: message_start with `new_id` and the hit's usage,
    message_delta with the hit's usage, any other byte for byte. None when the event
    cannot be read (the entry is then not served)."""
    doc = event_doc(event)
    if doc is None:
        return None
    kind = doc.get("type")
    if kind == "message_start":
        message = doc.get("message")
        if not isinstance(message, dict):
            return None
        message = {**message, "id": new_id}
        if isinstance(message.get("usage"), dict):
            message["usage"] = hit_usage(message["usage"])
        doc = {**doc, "message": message}
    elif kind == "message_delta" and isinstance(doc.get("usage"), dict):
        doc = {**doc, "usage": hit_usage(doc["usage"])}
    else:
        return event
    return sse_event(str(kind), doc)


def sse_event(kind: str, doc: dict[str, Any]) -> bytes:
    """One named event, framed as vLLM frames it."""
    data = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    return f"event: {kind}\ndata: {data}\n\n".encode()

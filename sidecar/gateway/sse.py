"""Server-sent events of an OpenAI stream: split as they arrive, judged for completeness.

An event is kept as its exact bytes, terminating blank line included, so a replay
sends the original events with their original boundaries. A stream is complete,
and may be stored, only when every choice reached a finish_reason, no event carried
an error, and the terminating `data: [DONE]` arrived.
"""

from __future__ import annotations

import json
import re
from typing import Any

DONE = b"data: [DONE]\n\n"
_BOUNDARY = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINES = re.compile(rb"\r\n|\n|\r")


class EventSplitter:
    """Bytes in, whole events out (each with its terminating blank line)."""

    __slots__ = ("_buf", "max_event_bytes")

    def __init__(self, max_event_bytes: int) -> None:
        self._buf = b""
        self.max_event_bytes = max_event_bytes

    def feed(self, data: bytes) -> list[bytes]:
        """The events that `data` completes; ValueError when one outgrows the limit."""
        buf = self._buf + data if self._buf else data
        events = []
        start = 0
        for m in _BOUNDARY.finditer(buf):
            events.append(buf[start : m.end()])
            start = m.end()
        self._buf = buf[start:]
        if len(self._buf) > self.max_event_bytes:
            raise ValueError(f"an event is longer than {self.max_event_bytes} bytes")
        return events

    @property
    def pending(self) -> bool:
        """Bytes after the last complete event (a stream cut mid-event)."""
        return bool(self._buf.strip())


def event_data(event: bytes) -> bytes | None:
    """The event's data (its `data:` lines joined by newlines); None when it has none."""
    parts = []
    for line in _LINES.split(event):
        if line.startswith(b"data:"):
            value = line[5:]
            parts.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(parts) if parts else None


def event_doc(event: bytes) -> dict[str, Any] | None:
    """The JSON object an event carries; None for [DONE], comments or anything else."""
    data = event_data(event)
    if data is None or data == b"[DONE]":
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def is_done(event: bytes) -> bool:
    """The terminating `data: [DONE]` event."""
    return event_data(event) == b"[DONE]"


def is_usage_only(doc: dict[str, Any]) -> bool:
    """The trailing usage chunk (stream_options.include_usage): no choices, a usage."""
    return doc.get("choices") == [] and isinstance(doc.get("usage"), dict)


class StreamWatch:
    """Follows a stream's events: which choices finished, errors, [DONE]."""

    __slots__ = ("done", "failed", "finish_reason", "has_usage", "open_choices", "seen")

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.open_choices: set[int] = set()
        self.done = False
        self.failed = False
        self.has_usage = False
        self.finish_reason = ""

    def see(self, event: bytes) -> None:
        """Account for one event (in order)."""
        if is_done(event):
            self.done = True
            return
        if self.done:
            self.failed = True  # nothing may follow [DONE]
            return
        doc = event_doc(event)
        if doc is None:
            if event_data(event) is not None:
                self.failed = True  # data that is not a JSON object
            return
        if "error" in doc:
            self.failed = True
            return
        if isinstance(doc.get("usage"), dict):
            self.has_usage = True
        choices = doc.get("choices")
        if not isinstance(choices, list):
            self.failed = True
            return
        for ch in choices:
            index = ch.get("index") if isinstance(ch, dict) else None
            if not isinstance(index, int):
                self.failed = True
                return
            if index not in self.seen:
                self.seen.add(index)
                self.open_choices.add(index)
            reason = ch.get("finish_reason")
            if reason:
                self.open_choices.discard(index)
                if not self.finish_reason:
                    self.finish_reason = str(reason)[:64]

    @property
    def complete(self) -> bool:
        """Every choice finished, no error, [DONE] seen: the stream may be stored."""
        return self.done and not self.failed and bool(self.seen) and not self.open_choices

"""Server-sent events of an OpenAI stream: split as they arrive, judged for completeness,
collected into the stored form of a streamed result (no I/O).

An event is kept as its exact bytes, terminating blank line included, so a replay
sends the original events with their original boundaries. A stream is complete,
and may be stored, only when every choice reached a finish_reason that a whole body
would be stored with too (whole_body.STORED_FINISH_REASONS; any other, such as
vLLM's `abort`, fails the stream), no event carried an error, and the terminating
`data: [DONE]` arrived. The gateway (a streamed miss)
and prewarm (a recorded streamed request replayed) both store through
`StreamCollector`, so the two apply the same rules and store the same form.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sidecar.entries import ChunkMeta
from sidecar.wire.openai.whole_body import stored_finish

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
    return _data_doc(event_data(event))


def _data_doc(data: bytes | None) -> dict[str, Any] | None:
    """event_doc of an event whose data (event_data) is `data`."""
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

    __slots__ = (
        "done",
        "failed",
        "finish_reason",
        "has_usage",
        "models",
        "open_choices",
        "seen",
    )

    def __init__(self) -> None:
        self.models: set[str] = set()
        self.seen: set[int] = set()
        self.open_choices: set[int] = set()
        self.done = False
        self.failed = False
        self.has_usage = False
        self.finish_reason = ""

    def see(self, event: bytes) -> bytes | None:
        """Account for one event (in order); its data (event_data), None when it has none
        (a comment such as a keep-alive `: ping`)."""
        data = event_data(event)  # once: is_done, event_doc and the check below read it
        if data == b"[DONE]":
            self.done = True
            return data
        if self.done:
            self.failed = True  # nothing may follow [DONE]
            return data
        doc = _data_doc(data)
        if doc is None:
            if data is not None:
                self.failed = True  # data that is not a JSON object
            return data
        if "error" in doc:
            self.failed = True
            return data
        if isinstance(doc.get("usage"), dict):
            self.has_usage = True
        model = doc.get("model")
        if model is not None:
            self.models.add(str(model)[:200])
        choices = doc.get("choices")
        if not isinstance(choices, list):
            self.failed = True
            return data
        for ch in choices:
            index = ch.get("index") if isinstance(ch, dict) else None
            if not isinstance(index, int):
                self.failed = True
                return data
            if index not in self.seen:
                self.seen.add(index)
                self.open_choices.add(index)
            reason = ch.get("finish_reason")
            if reason:
                if not stored_finish(reason):
                    self.failed = True  # abort, error, content_filter...: not an answer
                    return data
                self.open_choices.discard(index)
                if not self.finish_reason:
                    self.finish_reason = str(reason)[:64]
        return data

    @property
    def complete(self) -> bool:
        """Every choice finished, no error, [DONE] seen: the stream may be stored."""
        return self.done and not self.failed and bool(self.seen) and not self.open_choices


@dataclass(frozen=True, slots=True)
class CollectedStream:
    """A complete stream as it is stored: its events joined (without [DONE], which
    every replay sends), one chunk per event, and the first finish_reason."""

    payload: bytes
    chunks: tuple[ChunkMeta, ...]
    finish_reason: str
    models: frozenset[str]
    """Every `model` the events named (one, for a stream from one model)."""


class EventKeeper:
    """Splits a stream's bytes into events and keeps the ones `keep` accepts, each as one
    chunk with its arrival time, up to `limit` bytes in all (every API's collector)."""

    __slots__ = ("_splitter", "events", "limit", "metas", "size", "whole")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._splitter = EventSplitter(limit)
        self.events: list[bytes] = []
        self.metas: list[ChunkMeta] = []
        self.size = 0
        self.whole = True
        """False once the stream can no longer be stored (an event or the whole over
        the limit); the rest is then not looked at."""

    def feed(self, piece: bytes, offset_ms: int, keep: Callable[[bytes], bool]) -> None:
        """Account for the next bytes, which arrived `offset_ms` after the request."""
        if not self.whole:
            return
        try:
            arrived = self._splitter.feed(piece)
        except ValueError:
            self.whole = False
            return
        for event in arrived:
            if not keep(event):
                continue
            self.size += len(event)
            self.events.append(event)
            self.metas.append(ChunkMeta(len(event), 1, offset_ms))
        if self.size > self.limit:
            self.whole = False

    @property
    def intact(self) -> bool:
        """Within the limit, nothing cut mid-event."""
        return self.whole and not self._splitter.pending

    def payload(self) -> tuple[bytes, tuple[ChunkMeta, ...]]:
        """The kept events joined, and their chunks."""
        return b"".join(self.events), tuple(self.metas)


class StreamCollector:
    """Keeps a stream's events as its bytes arrive, up to `limit` bytes in all."""

    __slots__ = ("_keeper", "_watch")

    def __init__(self, limit: int) -> None:
        self._keeper = EventKeeper(limit)
        self._watch = StreamWatch()

    @property
    def whole(self) -> bool:
        """False once the stream can no longer be stored (EventKeeper.whole)."""
        return self._keeper.whole

    def feed(self, piece: bytes, offset_ms: int) -> None:
        """Account for the next bytes, which arrived `offset_ms` after the request."""
        self._keeper.feed(piece, offset_ms, self._keeps)

    def _keeps(self, event: bytes) -> bool:
        data = self._watch.see(event)
        # [DONE] is framing: every replay ends with it. An event without data (a
        # keep-alive comment) carries nothing of the answer, and a replay would not know
        # what to make of it: left out of what is stored.
        return not (self._watch.done or data is None)

    @property
    def complete(self) -> bool:
        """What arrived so far is a whole stream (StreamWatch.complete: [DONE] after every
        choice's finish), nothing cut mid-event, within the limit."""
        return self._keeper.intact and self._watch.complete

    def result(self) -> CollectedStream | None:
        """The stream to store; None when it is not `complete`."""
        if not self.complete:
            return None
        watch = self._watch
        payload, chunks = self._keeper.payload()
        return CollectedStream(payload, chunks, watch.finish_reason, frozenset(watch.models))

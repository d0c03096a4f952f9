"""A model server's OpenAI answer to a replayed request, read as it is stored (no I/O).

The call (`UpstreamCall`) is the request a Store attached (prewarm's ReplayRequest),
sent as it is: nothing is rebuilt from the key, which says what shaped an answer, not
how the model was asked for it. A record that names its form (the gateway's) is stored in
that form with the gateway's own rules (`gateway_answer`); any other is stored as
INFERCACHE_PREWARM_PAYLOAD says (`parse_answer`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum

from sidecar.entries import ChunkMeta
from sidecar.wire.openai.routes import CHAT_PATH, AnswerForm
from sidecar.wire.openai.sse import StreamCollector
from sidecar.wire.openai.whole_body import body_doc, complete_body
from sidecar.wire.values import token_count


class PayloadFormat(Enum):
    """What a prewarm stores as the cached payload."""

    TEXT = "text"
    """The first choice's text (chat: message content), UTF-8."""
    OPENAI_JSON = "openai_json"
    """The model server's whole response body, as received."""


class BadAnswer(Exception):
    """The model server's response is not a usable completion."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class UpstreamCall:
    """One HTTP POST to make: path under the base URL, media type and body bytes."""

    path: str
    content_type: str
    body: bytes


@dataclass(frozen=True, slots=True)
class Received:
    """A 2xx model-server response: its media type and its bytes as they arrived."""

    content_type: str
    pieces: tuple[tuple[int, bytes], ...]
    """(milliseconds after the request was sent, bytes), in order."""

    @property
    def body(self) -> bytes:
        """The whole response body."""
        return b"".join(piece for _, piece in self.pieces)

    @property
    def is_sse(self) -> bool:
        """An SSE answer (the gateway's test, flow.py: the media type's prefix)."""
        return self.content_type.startswith("text/event-stream")


@dataclass(frozen=True, slots=True)
class Answer:
    """A parsed completion: the payload to store, what it cost and, for a stream,
    its boundaries and first finish_reason."""

    payload: bytes
    prompt_tokens: int
    completion_tokens: int
    chunks: tuple[ChunkMeta, ...] = ()
    finish_reason: str = ""


def parse_answer(
    call: UpstreamCall, model: str, body: bytes, payload_format: PayloadFormat
) -> Answer:
    """Check a whole response body and extract the payload as `payload_format` says
    (a form-less record's); BadAnswer when it is not usable.

    A response naming another model than the one asked for is refused: whatever
    answered is not the model the results will be keyed under.
    """
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise BadAnswer("upstream_bad_response", f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise BadAnswer("upstream_bad_response", "not a JSON object")
    _check_model(doc.get("model"), model)
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise BadAnswer("upstream_bad_response", "no choices")
    first = choices[0]
    if call.path == CHAT_PATH:
        message = first.get("message")
        text = message.get("content") if isinstance(message, dict) else None
    else:
        text = first.get("text")
    if not isinstance(text, str):
        raise BadAnswer("upstream_bad_response", "the first choice has no text")
    usage = doc.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    payload = body if payload_format is PayloadFormat.OPENAI_JSON else text.encode("utf-8")
    return Answer(
        payload, token_count(usage, "prompt_tokens"), token_count(usage, "completion_tokens")
    )


def gateway_answer(received: Received, model: str, form: AnswerForm, limit: int) -> Answer:
    """The answer to a gateway record, stored as the gateway stores a miss; BadAnswer
    when the gateway would not store it.

    A streamed record (SSE) answered in SSE: the events and their boundaries, kept only
    when complete (wire/openai/sse.py: every choice's finish_reason, no error event,
    `data: [DONE]`) and within `limit` bytes. Anything else: the whole JSON body, kept
    only when every choice finished (wire/openai/whole_body.py). Either way an answer
    naming another model than `model` is refused.
    """
    if form is AnswerForm.SSE and received.is_sse:
        return _stream_answer(received, model, limit)
    body = received.body
    doc = body_doc(body)
    if doc is None:
        kind = "an SSE stream" if received.is_sse else "not an OpenAI answer"
        raise BadAnswer("upstream_bad_response", f"{kind} for a whole-body record")
    _check_model(doc.get("model"), model)
    if not complete_body(body, model):
        raise BadAnswer(
            "upstream_incomplete", "a choice has no finish_reason or one that is not stored"
        )
    if len(body) > limit:
        raise BadAnswer("upstream_response_too_large", f"more than {limit} bytes")
    usage = doc.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    return Answer(
        body, token_count(usage, "prompt_tokens"), token_count(usage, "completion_tokens")
    )


def _stream_answer(received: Received, model: str, limit: int) -> Answer:
    collector = StreamCollector(limit)
    for offset_ms, piece in received.pieces:
        collector.feed(piece, offset_ms)
    got = collector.result()
    if got is None:
        if not collector.whole:
            raise BadAnswer("upstream_response_too_large", f"a stream over {limit} bytes")
        raise BadAnswer(
            "stream_incomplete",
            "the stream ended before every choice's finish_reason and data: [DONE] "
            "(or carried an error event or a finish_reason that is not stored)",
        )
    for named in got.models:
        _check_model(named, model)
    # Like the gateway's streamed store: the cost of a stream is not known per chunk.
    return Answer(got.payload, 0, 0, got.chunks, got.finish_reason)


def _check_model(answered_by: object, model: str) -> None:
    if answered_by is not None and answered_by != model:
        raise BadAnswer("wrong_model", f"answered by {str(answered_by)[:100]!r}, not {model!r}")

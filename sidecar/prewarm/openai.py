"""The model-server call of a prewarm and the reading of its answer (no I/O).

The call is the request a Store attached (records.ReplayRequest), sent as it is:
nothing is rebuilt from the key, which says what shaped an answer, not how the
model was asked for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from sidecar.prewarm.records import CHAT_PATH, ReplayRequest


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

    @classmethod
    def replaying(cls, replay: ReplayRequest) -> UpstreamCall:
        """The attached request, unchanged."""
        return cls(replay.path, replay.content_type, replay.body)


@dataclass(frozen=True, slots=True)
class Answer:
    """A parsed completion: the payload to store and what it cost."""

    payload: bytes
    prompt_tokens: int
    completion_tokens: int


def parse_answer(
    call: UpstreamCall, model: str, body: bytes, payload_format: PayloadFormat
) -> Answer:
    """Check a response body and extract the payload; BadAnswer when it is not usable.

    A response naming another model than the one asked for is refused: whatever
    answered is not the model the results will be keyed under.
    """
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise BadAnswer("upstream_bad_response", f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise BadAnswer("upstream_bad_response", "not a JSON object")
    answered_by = doc.get("model")
    if answered_by is not None and answered_by != model:
        raise BadAnswer("wrong_model", f"answered by {str(answered_by)[:100]!r}, not {model!r}")
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
    return Answer(payload, _count(usage, "prompt_tokens"), _count(usage, "completion_tokens"))


def _count(usage: Mapping[str, Any], name: str) -> int:
    value = usage.get(name)
    return value if isinstance(value, int) and 0 <= value < 2**32 else 0

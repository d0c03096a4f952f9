"""A whole (not streamed) OpenAI answer body: parsed, and judged worth storing (no I/O).

The gateway (a miss) and prewarm (a recorded request replayed) both decide with
`complete_body`, so the two store the same answers.
"""

from __future__ import annotations

import json
from typing import Any

STORED_FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "function_call"})
"""The finish reasons of a complete answer. Anything else is not stored: vLLM's
`abort` and `error` end a generation the engine cut off (a partial text in a 200),
and `content_filter` is left out on purpose (a provider's filter verdict, not an
answer of the model; doubt means recompute)."""


def stored_finish(reason: object) -> bool:
    """A choice that ended with `reason` is complete (STORED_FINISH_REASONS)."""
    return isinstance(reason, str) and reason in STORED_FINISH_REASONS


def body_doc(payload: bytes) -> dict[str, Any] | None:
    """A stored whole answer as a JSON object with choices or data; None otherwise."""
    try:
        doc = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    if not isinstance(doc.get("choices"), list) and not isinstance(doc.get("data"), list):
        return None
    return doc


def complete_body(payload: bytes, model: str) -> bool:
    """A 200 body worth keeping: an OpenAI answer from `model` whose every choice
    finished with a stored finish reason (an embeddings answer: some data)."""
    doc = body_doc(payload)
    return doc is not None and complete_doc(doc, model)


def complete_doc(doc: dict[str, Any], model: str) -> bool:
    """complete_body of a body already read with body_doc (one parse, not two)."""
    answered_by = doc.get("model")
    if answered_by is not None and answered_by != model:
        return False  # whatever answered is not what the key says
    choices = doc.get("choices")
    if isinstance(choices, list):
        return bool(choices) and all(
            isinstance(c, dict) and stored_finish(c.get("finish_reason")) for c in choices
        )
    return bool(doc.get("data"))

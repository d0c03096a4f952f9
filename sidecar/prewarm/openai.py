"""Pure mapping between cache requests and the OpenAI-compatible HTTP API (no I/O).

A text input goes to `/v1/completions` (`prompt`), token ids too (a list of ints
is a valid `prompt`), chat messages to `/v1/chat/completions`. Only sampling
fields the caller set are sent: an unset field means "the engine's default",
which is what the key assumed. Fields outside the OpenAI schema (top_k, min_p,
repetition_penalty, ...) are sent as top-level extras, the way vLLM and SGLang
take them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, cast

from sidecar.keys import ChatMessage, FormatType, InputKind, KeyRequest, Sampling

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"


class PayloadFormat(Enum):
    """What a prewarm stores as the cached payload."""

    TEXT = "text"
    """The first choice's text (chat: message content), UTF-8."""
    OPENAI_JSON = "openai_json"
    """The model server's whole response body, as received."""


class NotReplayable(Exception):
    """The request cannot be sent upstream as it is; `reason` is a short label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class BadAnswer(Exception):
    """The model server's response is not a usable completion."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class UpstreamCall:
    """One HTTP request to make: path under the base URL and its JSON body."""

    path: str
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Answer:
    """A parsed completion: the payload to store and what it cost."""

    payload: bytes
    prompt_tokens: int
    completion_tokens: int


# Plain OpenAI fields, sent under the same name when set.
_SAME_NAME = ("temperature", "top_p", "seed", "presence_penalty", "frequency_penalty", "n")
# vLLM / SGLang extensions, sent as top-level extras when set.
_EXTRAS = ("top_k", "min_p", "repetition_penalty", "min_tokens", "ignore_eos")


def upstream_call(req: KeyRequest, model: str, payload_format: PayloadFormat) -> UpstreamCall:
    """The HTTP request that computes `req` on `model`; NotReplayable if there is none."""
    if req.input_kind is InputKind.SHA256 or req.input is None or req.input_kind is None:
        raise NotReplayable(
            "not_replayable", "the input is a caller-computed SHA-256; the text is unknown"
        )
    body: dict[str, Any] = {"model": model, "stream": False}
    body.update(_sampling(req.sampling, chat=req.input_kind is InputKind.CHAT))
    if payload_format is PayloadFormat.TEXT and (req.sampling.n or 1) > 1:
        raise NotReplayable(
            "unsupported_param", "n > 1 needs INFERCACHE_PREWARM_PAYLOAD=openai_json"
        )
    if req.input_kind is InputKind.CHAT:
        assert isinstance(req.input, tuple)
        body["messages"] = [_message(m) for m in req.input]
        return UpstreamCall(CHAT_PATH, body)
    if req.input_kind is InputKind.TEXT:
        body["prompt"] = req.input
    else:
        body["prompt"] = [int(i) for i in cast("Sequence[int]", req.input)]
    return UpstreamCall(COMPLETIONS_PATH, body)


def _message(m: ChatMessage) -> dict[str, str | None]:
    out: dict[str, str | None] = {"role": m.role, "content": m.content}
    if m.name:
        out["name"] = m.name
    if m.tool_call_id:
        out["tool_call_id"] = m.tool_call_id
    return out


def _sampling(s: Sampling, *, chat: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in (*_SAME_NAME, *_EXTRAS):
        value = getattr(s, name)
        if value is not None:
            out[name] = value
    if s.max_tokens is not None:  # unset and 0 are different keys: send exactly what was set
        out["max_tokens"] = s.max_tokens
    if s.stop:
        out["stop"] = list(s.stop)
    if s.stop_token_ids:
        out["stop_token_ids"] = list(s.stop_token_ids)
    if s.logit_bias:
        out["logit_bias"] = {str(k): v for k, v in s.logit_bias.items()}
    if s.logprobs is not None:
        if chat:
            out["logprobs"] = True
            out["top_logprobs"] = s.logprobs
        else:
            out["logprobs"] = s.logprobs
    fmt = s.response_format
    if fmt is not None and fmt.type is not FormatType.TEXT:
        out["response_format"] = _response_format(fmt.type, fmt.schema)
    return out


def _response_format(kind: FormatType, schema: str) -> dict[str, Any]:
    if kind is FormatType.JSON_OBJECT:
        return {"type": "json_object"}
    if kind is FormatType.JSON_SCHEMA:
        return {
            "type": "json_schema",
            "json_schema": {"name": "prewarm", "schema": json.loads(schema)},
        }
    # Regex and grammar constraints have no OpenAI field and differ between engines.
    raise NotReplayable(
        "unsupported_param", f"response_format {kind.name} has no OpenAI-compatible field"
    )


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

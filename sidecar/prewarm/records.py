"""A replayable request as recorded for prewarm: a KeyRequest without its model version.

Encoded as compact, versioned JSON. The model version is left out on purpose:
a recorded request is replayed under whatever model the pod runs then. Inputs
hashed by the caller (input_sha256) are never recorded, since they cannot be
replayed; neither are requests using a key field that prewarm's upstream call
(prewarm/openai.py) does not send: the answer it got would be stored under a
key that says otherwise.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any, cast

from sidecar.keys import ChatMessage, FormatType, InputKind, KeyRequest, ResponseFormat, Sampling

_VERSION = 2  # key schema v2: unset is not ""; v1 records are skipped
_SCALARS = (
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "min_p",
    "min_tokens",
    "n",
    "logprobs",
    "ignore_eos",
)


class BadRecord(ValueError):
    """A stored record does not decode (written by another version, or damaged)."""


_SENT_SAMPLING = frozenset((*_SCALARS, "stop", "stop_token_ids", "logit_bias", "response_format"))
_BARE_SAMPLING = Sampling()
_BARE_MESSAGE = ChatMessage("user", "")
_SENT_MESSAGE = frozenset(("role", "content", "name", "tool_call_id"))


def replayable(req: KeyRequest) -> bool:
    """Whether the request carries an input the model server can be sent, and only key
    fields that prewarm's upstream call sends (anything else would be answered without)."""
    if req.input is None or req.input_kind not in (
        InputKind.TEXT,
        InputKind.CHAT,
        InputKind.TOKENS,
    ):
        return False
    if req.tools or req.tool_choice is not None or req.parallel_tool_calls is not None:
        return False
    if req.chat_template is not None or req.output is not None or req.endpoint:
        return False
    s = req.sampling
    for f in dataclasses.fields(Sampling):
        if f.name not in _SENT_SAMPLING and getattr(s, f.name) != getattr(_BARE_SAMPLING, f.name):
            return False
    fmt = s.response_format
    if fmt is not None and (fmt.name, fmt.strict, fmt.description) != (None, None, None):
        return False
    if req.input_kind is InputKind.CHAT:
        for m in cast("tuple[ChatMessage, ...]", req.input):
            if m.content is None:
                return False
            for f in dataclasses.fields(ChatMessage):
                if f.name not in _SENT_MESSAGE and getattr(m, f.name) != getattr(
                    _BARE_MESSAGE, f.name
                ):
                    return False
    return True


def encode(req: KeyRequest) -> bytes:
    """JSON bytes of everything but the model version; the request must be replayable."""
    if not replayable(req):
        raise ValueError("only text, chat and token-id inputs are replayable")
    s = req.sampling
    sampling: dict[str, Any] = {n: getattr(s, n) for n in _SCALARS if getattr(s, n) is not None}
    if s.stop:
        sampling["stop"] = list(s.stop)
    if s.stop_token_ids:
        sampling["stop_token_ids"] = list(s.stop_token_ids)
    if s.logit_bias:
        sampling["logit_bias"] = [[k, v] for k, v in s.logit_bias.items()]
    if s.response_format is not None:
        sampling["response_format"] = [int(s.response_format.type), s.response_format.schema]
    doc: dict[str, Any] = {
        "v": _VERSION,
        "tenant": req.tenant,
        "adapter_version": req.adapter_version,
        "prompt_version": req.prompt_version,
        "sampling": sampling,
        "extra": dict(req.extra),
    }
    if req.input_kind is InputKind.TEXT:
        doc["text"] = req.input
    elif req.input_kind is InputKind.CHAT:
        assert isinstance(req.input, tuple)
        doc["chat"] = [[m.role, m.content, m.name, m.tool_call_id] for m in req.input]
    else:
        doc["token_ids"] = [int(i) for i in cast("Sequence[int]", req.input)]
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def decode(data: bytes) -> KeyRequest:
    """Inverse of encode, with an empty model_version; BadRecord if it does not parse."""
    try:
        doc = json.loads(data)
        if doc.get("v") != _VERSION:
            raise BadRecord(f"record version {doc.get('v')!r} is not {_VERSION}")
        raw = doc["sampling"]
        fmt = raw.get("response_format")
        sampling = Sampling(
            stop=tuple(raw.get("stop", ())),
            stop_token_ids=tuple(raw.get("stop_token_ids", ())),
            logit_bias={int(k): float(v) for k, v in raw.get("logit_bias", ())},
            response_format=ResponseFormat(FormatType(fmt[0]), fmt[1]) if fmt else None,
            **{n: raw.get(n) for n in _SCALARS},
        )
        value: Any
        if "text" in doc:
            kind, value = InputKind.TEXT, str(doc["text"])
        elif "chat" in doc:
            kind = InputKind.CHAT
            value = tuple(
                ChatMessage(str(m[0]), _opt_str(m[1]), str(m[2]), str(m[3])) for m in doc["chat"]
            )
        else:
            kind, value = InputKind.TOKENS, tuple(int(i) for i in doc["token_ids"])
        return KeyRequest(
            tenant=str(doc["tenant"]),
            model_version="",
            adapter_version=str(doc["adapter_version"]),
            prompt_version=str(doc["prompt_version"]),
            sampling=sampling,
            extra={str(k): str(v) for k, v in doc["extra"].items()},
            input=value,
            input_kind=kind,
        )
    except BadRecord:
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise BadRecord(f"{type(exc).__name__}: {exc}") from exc

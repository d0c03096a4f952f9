"""A replayable request as recorded for prewarm: a KeyRequest without its model version.

Encoded as compact, versioned JSON. The model version is left out on purpose:
a recorded request is replayed under whatever model the pod runs then. Inputs
hashed by the caller (input_sha256) are never recorded, since they cannot be
replayed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

from sidecar.keys import ChatMessage, FormatType, InputKind, KeyRequest, ResponseFormat, Sampling

_VERSION = 1
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


def replayable(req: KeyRequest) -> bool:
    """Whether the request carries an input the model server can be sent."""
    return req.input is not None and req.input_kind in (
        InputKind.TEXT,
        InputKind.CHAT,
        InputKind.TOKENS,
    )


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
            value = tuple(ChatMessage(*(str(x) for x in m)) for m in doc["chat"])
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

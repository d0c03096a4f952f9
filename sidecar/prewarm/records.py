"""What a hit record keeps for prewarm: the key and the exact model-server request.

A stored result can be prewarmed on other weights only if whoever stored it attached
the model-server request that produced it (`ReplayRequest`: a gRPC Store's `replay`
field; the gateway attaches its upstream body). Prewarm sends that request as it is
and never rebuilds one from the key: the key says what shaped an answer (tenant,
prompt template, tools, extra context), not how to make the model produce it again.

A record is versioned JSON holding the key's wire form (base64 of a CacheKey without
its model version: it is replayed under whatever model the pod runs then), the
request (its JSON body as text, so it decodes to the same bytes) and, from version 4,
the form its answer is stored in (`AnswerForm`; absent: a gRPC Store's record,
stored as INFERCACHE_PREWARM_PAYLOAD says). Version 3 records read as form-less.
The key is opaque here; the composition root hands prewarm a decoder for it.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from sidecar.errors import InvalidArgument
from sidecar.wire.openai.routes import CHAT_PATH, COMPLETIONS_PATH, EMBEDDINGS_PATH, AnswerForm

# 3: the model-server request is attached; 2 and older are not replayable.
# 4: the answer's form (AnswerForm) may be named; a 3 reads as form-less.
_VERSION = 4
_FORMLESS_VERSION = 3
REPLAY_PATHS = (CHAT_PATH, COMPLETIONS_PATH)
"""What a client's Store may attach (cache.proto's replay.path)."""
GATEWAY_PATHS = (*REPLAY_PATHS, EMBEDDINGS_PATH)
"""What the gateway records: its records name their form, so an embedding (stored as
the whole JSON body) is replayed and stored as the gateway stores one."""
JSON_TYPE = "application/json"
MAX_REPLAY_BYTES = 256 * 1024
"""Largest request body a Store may attach (every counted hit keeps the record alive)."""


class BadRecord(ValueError):
    """A stored record does not decode (damaged, or written by another version)."""


class OldRecord(BadRecord):
    """A record written before model-server requests were attached: not replayable."""


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """A model-server request exactly as it was sent: path, media type and body bytes."""

    path: str
    content_type: str
    body: bytes

    def check(self) -> None:
        """InvalidArgument naming the `replay.*` field that prewarm could not send."""
        if self.path not in REPLAY_PATHS:
            raise InvalidArgument("replay.path", f"must be one of {', '.join(REPLAY_PATHS)}")
        if self.content_type.split(";")[0].strip().lower() != JSON_TYPE:
            raise InvalidArgument("replay.content_type", f"must be {JSON_TYPE}")
        if not self.body:
            raise InvalidArgument("replay.body", "is required")
        try:
            self.body.decode("utf-8")  # JSON text is UTF-8 (RFC 8259); records keep it as text
        except UnicodeDecodeError as exc:
            raise InvalidArgument("replay.body", f"is not UTF-8 (byte {exc.start})") from exc
        if len(self.body) > MAX_REPLAY_BYTES:
            raise InvalidArgument(
                "replay.body", f"is {len(self.body)} bytes; the limit is {MAX_REPLAY_BYTES}"
            )

    def streams(self) -> bool:
        """Does the body ask for a stream (`"stream": true`)? False when it is not JSON."""
        doc = self._doc()
        return doc is not None and doc.get("stream") is True

    def model(self) -> str | None:
        """The `model` the body asks for (a served name or alias); None when it has none."""
        doc = self._doc()
        model = doc.get("model") if doc is not None else None
        return model if isinstance(model, str) and model else None

    def _doc(self) -> dict[str, Any] | None:
        try:
            doc = json.loads(self.body)
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None


@dataclass(frozen=True, slots=True)
class HitRecord:
    """A replayable request: the key's wire form (no model version), its request and
    the form its answer is stored in (None: INFERCACHE_PREWARM_PAYLOAD decides)."""

    key: bytes
    replay: ReplayRequest
    form: AnswerForm | None = None

    def unreplayable(self) -> str:
        """Why prewarm cannot store this record's answer rightly ("" when it can).

        A form-less record that asks for a stream: its answer would be SSE, which
        neither payload setting describes, and the record does not say the form the
        entry's clients read (a gateway record from before version 4 or a Store's).
        """
        if self.form is None and self.replay.path not in REPLAY_PATHS:
            return f"{self.replay.path[:64]} is replayed only from a gateway record"
        if self.form is None and self.replay.streams():
            return (
                'the request asks for a stream ("stream": true) and its record names no '
                "stored form (written before record version 4, or by a Store)"
            )
        return ""


def encode(record: HitRecord) -> bytes:
    """Compact JSON bytes of the record."""
    r = record.replay
    doc: dict[str, object] = {
        "v": _VERSION,
        "key": base64.b64encode(record.key).decode("ascii"),
        "replay": [r.path, r.content_type, r.body.decode("utf-8")],
    }
    if record.form is not None:
        doc["form"] = record.form.value
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode(data: bytes) -> HitRecord:
    """Inverse of encode; OldRecord for an older version, BadRecord if it does not parse."""
    try:
        doc = json.loads(data)
        version = doc.get("v")
        if version not in (_FORMLESS_VERSION, _VERSION):
            if isinstance(version, int) and version < _FORMLESS_VERSION:
                raise OldRecord(f"record version {version} carries no model-server request")
            raise BadRecord(f"record version {version!r} is not {_VERSION}")
        path, content_type, body = doc["replay"]
        form = doc.get("form") if version == _VERSION else None
        if path not in GATEWAY_PATHS:
            # Exactly one of the routes, as written: never an absolute URL, `//host`,
            # `@`, a traversal or a control character that would send prewarm (and the
            # model server's key) anywhere but the configured model server.
            raise BadRecord(f"replay path {str(path)[:64]!r} is not one of the API's routes")
        return HitRecord(
            base64.b64decode(doc["key"], validate=True),
            ReplayRequest(str(path), str(content_type), str(body).encode("utf-8")),
            None if form is None else AnswerForm(form),
        )
    except BadRecord:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadRecord(f"{type(exc).__name__}: {exc}") from exc

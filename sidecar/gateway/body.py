"""A request body's HTTP framing: plain JSON in UTF-8, or refused (415 HttpError).

The gateway keys the body it parsed and forwards the bytes it received, so every
body the model server could read differently from us is refused rather than
guessed at:

    Content-Encoding other than identity   415 (compressed bodies are not decoded)
    Content-Type not JSON, or not UTF-8    415 (none at all is JSON, as with OpenAI)

The body itself is then read by sidecar/wire/json_body.py (400 for what it refuses).
"""

from __future__ import annotations

from collections.abc import Mapping

from sidecar.gateway.errors import HttpError

_JSON_TYPES = frozenset({"application/json"})


def check_framing(headers: Mapping[bytes, bytes]) -> None:
    """415 unless the body is plain (identity-encoded) JSON in UTF-8."""
    raw_type = headers.get(b"content-type")
    if (raw_type is None or raw_type == b"application/json") and (
        b"content-encoding" not in headers
    ):
        return  # what every SDK sends: nothing below would refuse it
    encoding = headers.get(b"content-encoding", b"").decode("latin-1")
    codings = [c.strip().lower() for c in encoding.split(",") if c.strip()]
    if any(c != "identity" for c in codings):
        raise HttpError(
            415,
            f"Content-Encoding {encoding[:64]!r} is not accepted: send the body uncompressed",
            param="content-encoding",
            code="unsupported_content_encoding",
        )
    if raw_type is None:
        return
    media, *params = raw_type.decode("latin-1").split(";")
    charset = next(
        (
            value.strip().strip('"').lower()
            for name, _, value in (p.partition("=") for p in params)
            if name.strip().lower() == "charset"
        ),
        "utf-8",
    )
    if media.strip().lower() not in _JSON_TYPES or charset not in ("utf-8", "utf8"):
        raise HttpError(
            415,
            f"Content-Type {raw_type[:64].decode('latin-1')!r} is not accepted: "
            "send application/json (UTF-8)",
            param="content-type",
            code="unsupported_media_type",
        )

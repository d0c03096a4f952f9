"""A request body read exactly one way, or refused (400/415 HttpError).

The gateway keys the body it parsed and forwards the bytes it received, so every
body the model server could read differently from us is refused rather than
guessed at:

    Content-Encoding other than identity   415 (compressed bodies are not decoded)
    Content-Type not JSON, or not UTF-8    415 (none at all is JSON, as with OpenAI)
    not UTF-8, a byte order mark           400 (RFC 8259: JSON is UTF-8, no BOM)
    NaN, Infinity, a number beyond double  400 (not JSON; 1e400 would be inf)
    a lone surrogate escape ("\\ud800")    400 (no character; parsers replace or fail)
    a key twice in one object, any depth   400 naming it (parsers keep first or last)
    nested too deeply                      400 (the parser's recursion limit)
    not an object                          400
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from sidecar.gateway.errors import HttpError, bad_request

_BOM = b"\xef\xbb\xbf"
_JSON_TYPES = frozenset({"application/json"})
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


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


def parse_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, read strictly (see the module docstring)."""
    if raw.startswith(_BOM):
        raise _invalid("the body starts with a byte order mark (JSON is UTF-8 without one)")
    try:
        text = raw.decode("utf-8")  # strict: encoded surrogates are not UTF-8 either
    except UnicodeDecodeError as exc:
        raise _invalid(f"the body is not UTF-8 (byte {exc.start})") from exc
    try:
        doc = _DECODER.decode(text)
    except _Duplicate:
        raise _duplicate(text) from None
    except RecursionError:
        raise _invalid("the body is nested too deeply") from None
    except ValueError as exc:
        raise _invalid(f"the body is not valid JSON: {exc}") from exc
    if _SURROGATE_ESCAPE.search(text):
        _no_lone_surrogates(doc)
    if not isinstance(doc, dict):
        raise bad_request("body", "must be a JSON object")
    return doc


def _invalid(message: str) -> HttpError:
    return HttpError(400, message, code="invalid_json")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:32]} is beyond the range of a double")
    return value


class _Duplicate(Exception):
    """An object of the body holds a key twice (the fast pass only says that much)."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc = dict(pairs)
    if len(doc) != len(pairs):
        raise _Duplicate
    return doc


_DECODER = json.JSONDecoder(
    parse_constant=_no_constant, parse_float=_finite, object_pairs_hook=_object
)
"""Built once: json.loads(..., hooks) would build a decoder per call."""


class _Twice(dict[str, Any]):
    """An object that held `key` twice (the slow pass marks it to find its path)."""

    key = ""


def _marking(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc = dict(pairs)
    if len(doc) == len(pairs):
        return doc
    twice = _Twice(doc)
    seen: set[str] = set()
    for k, _ in pairs:
        if k in seen:
            twice.key = k
            break
        seen.add(k)
    return twice


def _duplicate(text: str) -> HttpError:
    """The 400 naming the first key given twice, by its path (a second, slow parse)."""
    try:
        doc = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_marking)
        path = _twice_path(doc, "") or "body"
    except (RecursionError, ValueError):
        path = "body"
    key = path.rpartition(".")[2]
    return HttpError(
        400,
        f"{path}: the key {key!r} appears twice in one object "
        "(JSON parsers differ on which one counts)",
        param=path,
        code="duplicate_key",
    )


def _twice_path(value: Any, path: str) -> str | None:
    """The dotted path of the first key given twice (depth first)."""
    if isinstance(value, dict):
        if isinstance(value, _Twice):
            return f"{path}.{value.key}" if path else value.key
        for k, item in value.items():
            if isinstance(item, dict | list):
                found = _twice_path(item, f"{path}.{k}" if path else k)
                if found:
                    return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, dict | list):
                found = _twice_path(item, f"{path}[{i}]")
                if found:
                    return found
    return None


def _no_lone_surrogates(doc: Any) -> None:
    """400 when a string or key holds half a surrogate pair (only checked when the
    text has a surrogate escape at all: a valid pair decodes to one character)."""
    try:
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _invalid("the body holds a lone surrogate escape (\\ud800-\\udfff)") from exc
    except RecursionError:
        raise _invalid("the body is nested too deeply") from None

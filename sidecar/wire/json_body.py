"""A JSON request body read exactly one way, or refused (WireError, code invalid_json).

The gateway keys the body it parsed and forwards the bytes it received, so every
body the model server could read differently from us is refused rather than
guessed at (the HTTP framing, media type and encoding, is the gateway's to check):

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
from typing import Any

from sidecar.wire.errors import WireError, bad_request, invalid_json

_BOM = b"\xef\xbb\xbf"
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def parse_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, read strictly (see the module docstring)."""
    if raw.startswith(_BOM):
        raise invalid_json("the body starts with a byte order mark (JSON is UTF-8 without one)")
    try:
        text = raw.decode("utf-8")  # strict: encoded surrogates are not UTF-8 either
    except UnicodeDecodeError as exc:
        raise invalid_json(f"the body is not UTF-8 (byte {exc.start})") from exc
    try:
        doc = _DECODER.decode(text)
    except _Duplicate:
        raise _duplicate(text) from None
    except RecursionError:
        raise invalid_json("the body is nested too deeply") from None
    except ValueError as exc:
        raise invalid_json(f"the body is not valid JSON: {exc}") from exc
    if _SURROGATE_ESCAPE.search(text):
        _no_lone_surrogates(doc)
    if not isinstance(doc, dict):
        raise bad_request("body", "must be a JSON object")
    return doc


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


def _duplicate(text: str) -> WireError:
    """The 400 naming the first key given twice, by its path (a second, slow parse)."""
    try:
        doc = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_marking)
        path = _twice_path(doc, "") or "body"
    except (RecursionError, ValueError):
        path = "body"
    key = path.rpartition(".")[2]
    return WireError(
        path,
        f"the key {key!r} appears twice in one object (JSON parsers differ on which one counts)",
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
        raise invalid_json("the body holds a lone surrogate escape (\\ud800-\\udfff)") from exc
    except RecursionError:
        raise invalid_json("the body is nested too deeply") from None

"""Typed readers of JSON body values: each returns the value or raises a 400 naming it.

Booleans are never numbers here (JSON `true` is not 1); an integral float is an
integer (OpenAI's and vLLM's validators accept `1.0` for `n`). Objects and arrays
that the key keeps "as sent" are re-serialised compactly in their parsed order: two
bodies that parse to the same value are the same request to the model server too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from sidecar.wire.errors import bad_request

EXTRA_VALUE_MAX_CHARS = 4096
"""Longer `extra` values are keyed as `sha256:<hex>` (the key's extra value limit)."""


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
"""Built once: json.dumps with any option builds an encoder per call (the same one)."""


def dumps(value: Any) -> str:
    """Compact JSON text of a parsed value, keys in their parsed order."""
    return _ENCODER.encode(value)


def extra_value(value: Any) -> str:
    """A value as an `extra` entry: its JSON text, or the SHA-256 of a long one."""
    text = dumps(value)
    if len(text) > EXTRA_VALUE_MAX_CHARS:
        return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return text


def number(doc: Mapping[str, Any], name: str, path: str = "") -> float | None:
    """A JSON number as a float, None when absent or null."""
    v = doc.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise bad_request(path + name, f"must be a number, got {_kind(v)}")
    try:
        return float(v)
    except OverflowError:
        raise bad_request(path + name, "is beyond the range of a double") from None


def integer(doc: Mapping[str, Any], name: str, path: str = "") -> int | None:
    """A JSON integer (or integral number), None when absent or null."""
    v = doc.get(name)
    if v is None:
        return None
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad_request(path + name, f"must be an integer, got {_kind(v)}")
    return v


def boolean(doc: Mapping[str, Any], name: str, path: str = "") -> bool | None:
    """A JSON boolean, None when absent or null."""
    v = doc.get(name)
    if v is None:
        return None
    if not isinstance(v, bool):
        raise bad_request(path + name, f"must be a boolean, got {_kind(v)}")
    return v


def string(doc: Mapping[str, Any], name: str, path: str = "") -> str | None:
    """A JSON string, None when absent or null."""
    v = doc.get(name)
    if v is None:
        return None
    if not isinstance(v, str):
        raise bad_request(path + name, f"must be a string, got {_kind(v)}")
    return v


def strings(doc: Mapping[str, Any], name: str, *, single: bool = False) -> tuple[str, ...]:
    """An array of strings (`single`: a lone string is an array of one)."""
    v = doc.get(name)
    if v is None:
        return ()
    if single and isinstance(v, str):
        return (v,)
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise bad_request(name, "must be an array of strings")
    return tuple(v)


def integers(doc: Mapping[str, Any], name: str) -> tuple[int, ...]:
    """An array of integers."""
    v = doc.get(name)
    if v is None:
        return ()
    if not isinstance(v, list) or not all(is_int(i) for i in v):
        raise bad_request(name, "must be an array of integers")
    return tuple(int(i) for i in v)


def json_of(doc: Mapping[str, Any], name: str, kinds: tuple[type, ...] = (dict,)) -> str | None:
    """An object (or another of `kinds`) as its JSON text; None when absent or null."""
    v = doc.get(name)
    if v is None:
        return None
    if not isinstance(v, kinds):
        raise bad_request(name, f"must be {' or '.join(_NAMES[k] for k in kinds)}")
    return dumps(v)


def objects(doc: Mapping[str, Any], name: str) -> Sequence[dict[str, Any]]:
    """An array of objects (empty when absent or null)."""
    v = doc.get(name)
    if v is None:
        return ()
    if not isinstance(v, list) or not all(isinstance(o, dict) for o in v):
        raise bad_request(name, "must be an array of objects")
    return v


def token_count(usage: Mapping[str, Any], name: str) -> int:
    """A usage's token count: a non-negative integer below 2**32, else 0 (an answer's
    usage is the model server's word, read for statistics only, never refused)."""
    value = usage.get(name)
    return (
        value
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**32
        else 0
    )


def is_int(v: Any) -> bool:
    """An integer, or a float with an integral value (never a boolean)."""
    return (isinstance(v, int) and not isinstance(v, bool)) or (
        isinstance(v, float) and v.is_integer()
    )


_NAMES: dict[type, str] = {dict: "an object", list: "an array", str: "a string"}


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int | float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return "null"

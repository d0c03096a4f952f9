"""The writers and value checks every key field goes through (sidecar.keys holds the schema).

`Records` writes one tagged, length-prefixed record per field that is set; the
checks turn a bad value into INVALID_ARGUMENT naming the field.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Sequence

from sidecar.errors import InvalidArgument, OverLimit


class Encoder:
    """Length-prefixed field writer: every field is u32 length + bytes."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def raw(self, data: bytes) -> None:
        """Append one field."""
        self._parts.append(struct.pack(">I", len(data)))
        self._parts.append(data)

    def u32(self, value: int) -> None:
        """Append a big-endian u32 field."""
        self.raw(struct.pack(">I", value))

    def finish(self) -> bytes:
        """The fields written so far."""
        return b"".join(self._parts)


def utf8(field_name: str, value: str) -> bytes:
    """The exact UTF-8 bytes of `value`; a lone surrogate is INVALID_ARGUMENT naming the field."""
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(
            field_name, f"is not valid Unicode (lone surrogate at character {exc.start})"
        ) from exc


def check_len(field_name: str, value: str, max_chars: int) -> None:
    """INVALID_ARGUMENT when `value` is longer than `max_chars` characters."""
    if len(value) > max_chars:
        raise OverLimit(field_name, f"is {len(value)} characters; the limit is {max_chars}")


def check_count(field_name: str, n: int, limit: int) -> None:
    """INVALID_ARGUMENT when a list or map has more than `limit` entries."""
    if n > limit:
        raise OverLimit(field_name, f"has {n} entries; the limit is {limit}")


def json_text(field_name: str, value: str, max_chars: int) -> bytes:
    """A JSON text's exact bytes, after checking that it parses to valid Unicode."""
    check_len(field_name, value, max_chars)
    data = utf8(field_name, value)
    try:
        parsed = json.loads(value)
        # An escaped lone surrogate ("\ud800") parses; no engine can use it.
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(field_name, "holds a string that is not valid Unicode") from exc
    except RecursionError as exc:  # "[[[[...": fits the length limit, not the parser
        raise OverLimit(field_name, "nests too deeply") from exc
    except ValueError as exc:
        raise InvalidArgument(field_name, f"is not valid JSON: {exc}") from exc
    return data


def small(field_name: str, value: str, max_chars: int) -> bytes:
    """The exact UTF-8 bytes of a string of at most `max_chars` characters."""
    check_len(field_name, value, max_chars)
    return utf8(field_name, value)


class Records:
    """Tagged records `u16 tag | u32 length | value` of the fields that are set.

    Callers put tags in ascending order; every tag's value has one fixed encoding,
    so equal record streams mean equal fields, and an unset field (no record)
    differs from every value.
    """

    __slots__ = ("_last", "_parts")

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._last = 0

    def put(self, tag: int, data: bytes) -> None:
        """Append one record (tags ascend: each field has one place)."""
        assert tag > self._last, "tags must ascend"
        self._last = tag
        self._parts.append(struct.pack(">HI", tag, len(data)))
        self._parts.append(data)

    def digest(self, tag: int, data: bytes) -> None:
        """A long value as its SHA-256 (the material stays small and holds no text)."""
        self.put(tag, hashlib.sha256(data).digest())

    def flag(self, tag: int, value: bool | None) -> None:
        """A boolean, when set."""
        if value is not None:
            self.put(tag, b"\x01" if value else b"\x00")

    def integer(self, tag: int, field_name: str, value: int | None, lo: int, hi: int) -> None:
        """An integer in [lo, hi], when set."""
        if value is None:
            return
        v = int(value)
        if v < lo or v > hi:
            raise InvalidArgument(field_name, f"is {v}; must be in [{lo}, {hi}]")
        self.put(tag, struct.pack(">q", v))

    def number(
        self,
        tag: int,
        field_name: str,
        value: float | None,
        lo: float,
        hi: float,
        *,
        lo_open: bool = False,
    ) -> float | None:
        """A finite float in range, when set, as its exact double; returns it."""
        if value is None:
            return None
        v = finite(field_name, value, lo, hi, lo_open=lo_open)
        self.put(tag, struct.pack(">d", v))
        return v

    def text(self, tag: int, field_name: str, value: str | None, max_chars: int) -> None:
        """A string's exact bytes (as a digest), when set."""
        if value is not None:
            self.digest(tag, small(field_name, value, max_chars))

    def json_text(self, tag: int, field_name: str, value: str | None, max_chars: int) -> None:
        """A JSON text's exact bytes (as a digest), when set; it must parse."""
        if value is not None:
            self.digest(tag, json_text(field_name, value, max_chars))

    def strings(
        self, tag: int, field_name: str, values: Sequence[str], max_chars: int, *, as_set: bool
    ) -> None:
        """A list of strings, in order or as a set (sorted, de-duplicated), when not empty."""
        if not values:
            return
        items = [small(f"{field_name}[{i}]", v, max_chars) for i, v in enumerate(values)]
        enc = Encoder()
        for item in sorted(set(items)) if as_set else items:
            enc.raw(item)
        self.digest(tag, enc.finish())

    def finish(self) -> bytes:
        """The records written so far."""
        return b"".join(self._parts)


def finite(field_name: str, value: float, lo: float, hi: float, *, lo_open: bool = False) -> float:
    """`value` checked finite and in range; -0.0 comes back as 0.0."""
    v = float(value)
    if math.isnan(v) or math.isinf(v):
        raise InvalidArgument(field_name, "must be a finite number")
    if v < lo or v > hi or (lo_open and v == lo):
        bound = "(" if lo_open else "["
        raise InvalidArgument(field_name, f"is {v}; must be in {bound}{lo}, {hi}]")
    return v + 0.0  # -0.0 -> 0.0: equal under IEEE-754 for every comparison an engine makes

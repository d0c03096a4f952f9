"""A request's header lines as one mapping, read one way only.

HTTP lets a list-valued header arrive on several lines (they are joined with ", ",
RFC 9110 5.3); a header the gateway reads as one value (credentials, cache mode,
prompt version) given twice is refused with 400: which line counts would be a guess,
and a proxy in front may have guessed the other way.
"""

from __future__ import annotations

from collections.abc import Iterable

from sidecar.gateway.errors import HttpError

SINGLE_HEADERS = frozenset(
    {
        b"authorization",
        b"api-key",
        b"x-api-key",
        b"content-type",
        b"x-infercache-cache-mode",
        b"x-infercache-prompt-version",
        b"x-infercache-replay-pace",
    }
)
"""Headers that carry one value: refused when given twice."""

_LISTS = frozenset({b"cache-control", b"content-encoding"})
"""List-valued headers the gateway reads: their lines are joined."""


def request_headers(
    raw: Iterable[tuple[bytes, bytes]], single: frozenset[bytes] | set[bytes] = SINGLE_HEADERS
) -> dict[bytes, bytes]:
    """Lower-cased names (as ASGI gives them) -> value; 400 for a `single` one given twice."""
    out: dict[bytes, bytes] = {}
    for name, value in raw:
        if name not in out:
            out[name] = value
        elif name in single:
            shown = name.decode("latin-1")
            raise HttpError(
                400,
                f"{shown}: given twice; send it once",
                param=shown,
                code="duplicate_header",
            )
        elif name in _LISTS:
            out[name] += b", " + value
    return out

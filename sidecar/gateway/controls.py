"""Per-request cache controls from HTTP headers (no I/O).

    Cache-Control: no-cache      skip the lookup, store the fresh answer ("refresh")
    Cache-Control: no-store      look up, but store nothing
    Cache-Control: max-age=N     a cached answer older than N seconds is a miss (0 = no-cache)
    x-infercache-cache-mode: read-write | read-only | write-only | off
    x-infercache-prompt-version: the prompt template version (else the configured default)
    x-infercache-replay-pace: fastest | original | TOKENS_PER_SECOND (streamed hits)

The mode's default is the tenant's `cache_mode` in the policy file, else read-write.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from sidecar.gateway.errors import bad_header
from sidecar.results.pacing import MAX_TOKENS_PER_SECOND, PaceMode, Pacing

MODE_HEADER = b"x-infercache-cache-mode"
PROMPT_VERSION_HEADER = b"x-infercache-prompt-version"
PACE_HEADER = b"x-infercache-replay-pace"
MAX_PROMPT_VERSION_CHARS = 256
_DELTA_SECONDS = re.compile(r"[0-9]+")
MAX_AGE_CAP_S = 2**31
"""RFC 9111 1.2.2: a delta-seconds too large to represent counts as 2**31."""


class CacheMode(Enum):
    """What the cache may do for a request."""

    READ_WRITE = "read-write"
    READ_ONLY = "read-only"
    WRITE_ONLY = "write-only"
    OFF = "off"


@dataclass(frozen=True, slots=True)
class Controls:
    """The cache behaviour one request asked for."""

    read: bool = True
    """Look the request up (False: no-cache, write-only, off)."""
    write: bool = True
    """Store the fresh answer of a miss (False: no-store, read-only, off)."""
    max_age_s: int = 0
    """A hit must be at most this old; 0 = any age."""
    why: str = ""
    """What made the request neither read nor written (the bypass reason when `off`)."""

    @property
    def off(self) -> bool:
        """Neither read nor written: forwarded untouched."""
        return not self.read and not self.write


def parse_mode(text: str, source: str = "x-infercache-cache-mode") -> CacheMode:
    """A cache mode by name; 400 naming `source` otherwise."""
    try:
        return CacheMode(text.strip().lower())
    except ValueError:
        names = ", ".join(m.value for m in CacheMode)
        raise bad_header(source, f"expected one of {names}, got {text[:64]!r}") from None


def _reads_writes(mode: CacheMode) -> tuple[bool, bool]:
    return (
        mode in (CacheMode.READ_WRITE, CacheMode.READ_ONLY),
        mode in (CacheMode.READ_WRITE, CacheMode.WRITE_ONLY),
    )


def _mode_why(mode: CacheMode) -> str:
    return "" if mode is CacheMode.READ_WRITE else f"cache mode {mode.value}"


_BY_MODE = {mode: Controls(*_reads_writes(mode), why=_mode_why(mode)) for mode in CacheMode}
"""The controls of a request that only names a mode (or none): most requests."""


def controls(headers: Mapping[bytes, bytes], default_mode: CacheMode) -> Controls:
    """The request's controls: its mode header (or `default_mode`) and Cache-Control."""
    raw_mode = headers.get(MODE_HEADER)
    mode = parse_mode(raw_mode.decode("latin-1")) if raw_mode is not None else default_mode
    cache_control = headers.get(b"cache-control")
    if cache_control is None:
        return _BY_MODE[mode]
    read, write = _reads_writes(mode)
    causes = [_mode_why(mode)] if mode is not CacheMode.READ_WRITE else []
    max_age = 0
    for directive in cache_control.decode("latin-1").split(","):
        name, _, value = directive.strip().partition("=")
        name = name.strip().lower()
        if name == "no-cache":
            read = False
            causes.append("no-cache")
        elif name == "no-store":
            write = False
            causes.append("no-store")
        elif name == "max-age":
            seconds = value.strip().strip('"')
            # ASCII digits only (str.isdigit() takes "\xb2", which int() refuses).
            if not _DELTA_SECONDS.fullmatch(seconds):
                raise bad_header("Cache-Control", f"max-age must be seconds, got {value[:64]!r}")
            # Any number of digits (RFC 9111 1.2.2); only ten or fewer are converted.
            max_age = MAX_AGE_CAP_S if len(seconds.lstrip("0")) > 10 else int(seconds)
            max_age = min(max_age, MAX_AGE_CAP_S)
            if max_age == 0:
                read = False  # nothing cached is zero seconds old
                causes.append("max-age=0")
    why = ", ".join(dict.fromkeys(causes))  # each cause once, in the order given
    return Controls(read=read, write=write, max_age_s=max_age, why=why)


def prompt_version(headers: Mapping[bytes, bytes], default: str) -> str:
    """The x-infercache-prompt-version header, else `default`."""
    raw = headers.get(PROMPT_VERSION_HEADER)
    if raw is None:
        return default
    try:
        # Only HTTP's own whitespace is trimmed: "v1\u2028" is not the version "v1".
        value = raw.decode("utf-8").strip(" \t")
    except UnicodeDecodeError:
        raise bad_header("x-infercache-prompt-version", "not UTF-8") from None
    if not value or len(value) > MAX_PROMPT_VERSION_CHARS or not value.isprintable():
        raise bad_header("x-infercache-prompt-version", "must be printable, 1 to 256 characters")
    return value


def pacing(headers: Mapping[bytes, bytes], default: str) -> Pacing:
    """The replay pace of a streamed request (header, else the configured default); read
    before the lookup, so a bad header is a 400 whether the request is a hit or not."""
    raw = headers.get(PACE_HEADER)
    # Present but empty is not "use the default": a 400, as for the other headers.
    text = raw.decode("latin-1").strip().lower() if raw is not None else default
    if text == "fastest":
        return Pacing()
    if text == "original":
        return Pacing(PaceMode.ORIGINAL)
    try:
        rate = float(text)
    except ValueError:
        rate = math.nan
    if not (math.isfinite(rate) and 0 < rate <= MAX_TOKENS_PER_SECOND):
        raise bad_header(
            "x-infercache-replay-pace", f"fastest, original or tokens per second, got {text[:64]!r}"
        )
    return Pacing(PaceMode.TOKENS_PER_SECOND, tokens_per_second=rate)

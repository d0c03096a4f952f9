"""Parsers of setting values: text in, a typed value out, ValueError with a reason.

Each parser says what it expected; load_config prefixes the variable or flag the
text came from. `format_bytes` is the inverse of `parse_bytes` for the docs.
"""

from __future__ import annotations

import re
from typing import Literal, cast
from urllib.parse import parse_qsl, urlsplit

from sidecar.config.redis_urls import check_query, is_cluster_url, parse_cluster_url, redacted

_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 10**6, "gb": 10**9}
_SIZE_UNITS |= {"kib": 1024, "mib": 1024**2, "gib": 1024**3}
_HOSTPORT = r"(\[[0-9a-fA-F:]+\]|[\w.-]+):(\d+)"
_MAX_PORT = 65535


def parse_bytes(text: str) -> int:
    """Parse "1048576", "256MiB", "1GB" into bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"expected a size such as 268435456 or 256MiB, got {text!r}")
    return int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]


def format_bytes(value: int) -> str:
    """The shortest exact spelling parse_bytes reads back: 268435456 -> "256MiB"."""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value and value % size == 0:
            return f"{value // size}{unit}"
    return str(value)


def _int(text: str, expected: str) -> int:
    # int()'s own message ("invalid literal for int() with base 10") says nothing useful.
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected {expected}, got {text!r}") from None


def positive_int(text: str) -> int:
    """An integer > 0."""
    value = _int(text, "a positive integer")
    if value <= 0:
        raise ValueError(f"expected a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    value = _int(text, "an integer >= 0")
    if value < 0:
        raise ValueError(f"expected an integer >= 0, got {text!r}")
    return value


def parse_bool(text: str) -> bool:
    """true/false, yes/no, on/off, 1/0 (any case)."""
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def listen(text: str) -> tuple[str, ...]:
    """Comma-separated HOST:PORT and/or unix:PATH addresses, at least one."""
    addrs = tuple(a.strip() for a in text.split(",") if a.strip())
    if not addrs:
        raise ValueError("expected at least one address")
    for a in addrs:
        if not a.startswith("unix:"):
            _hostport(a, f"{a!r} is neither HOST:PORT nor unix:PATH")
    return addrs


def _hostport(addr: str, expected: str) -> None:
    """ValueError(expected) unless addr is HOST:PORT with a port in 0..65535 (0: any free
    port); gRPC would otherwise take the port modulo 65536 and serve on another one."""
    m = re.fullmatch(_HOSTPORT, addr)
    if not m:
        raise ValueError(expected)
    if int(m.group(2)) > _MAX_PORT:
        raise ValueError(f"port {m.group(2)} of {addr!r} is out of range (0 to {_MAX_PORT})")


def optional_listen(text: str) -> tuple[str, ...]:
    """Like `listen`, but empty means none (the listener is disabled)."""
    return listen(text) if text.strip() else ()


def reason_labels(text: str) -> tuple[str, ...]:
    """Comma-separated ReportOutcome reason labels (letters, digits and _.:-, 64 at most)."""
    labels = tuple(a.strip() for a in text.split(",") if a.strip())
    for a in labels:
        if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", a):
            raise ValueError(f"{a!r} is not a reason label (letters, digits and _.:-, 64 at most)")
    return labels


def zmq_endpoint(text: str) -> str:
    """A ZMQ endpoint tcp://HOST:PORT (HOST may be * to bind every interface) or
    ipc://PATH, or empty to disable."""
    addr = text.strip()
    if not addr:
        return ""
    if addr.startswith("ipc://") and len(addr) > len("ipc://"):
        return addr
    if not addr.startswith("tcp://"):
        raise ValueError(f"expected tcp://HOST:PORT or ipc://PATH (or empty), got {text!r}")
    hostport = addr[len("tcp://") :]
    host = hostport.rpartition(":")[0]
    _hostport(hostport.replace("*", "0.0.0.0", 1) if host == "*" else hostport, f"{text!r}")
    return addr


def optional_hostport(text: str) -> str:
    """One HOST:PORT, or empty to disable."""
    addr = text.strip()
    if addr:
        _hostport(addr, f"expected HOST:PORT (or empty to disable), got {text!r}")
    return addr


def tenant_map(text: str) -> dict[str, int]:
    """TENANT=SECONDS pairs, comma-separated."""
    out: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        tenant, sep, value = part.partition("=")
        if not sep or not tenant.strip():
            raise ValueError(f"expected TENANT=SECONDS pairs, got {part!r}")
        out[tenant.strip()] = positive_int(value)
    return out


def token_map(text: str) -> dict[str, str]:
    """NAME=TOKEN pairs, comma- or newline-separated (# comments), tokens >= 16 chars."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.replace("\n", ",").split(",")):
        if not part or part.startswith("#"):
            continue
        name, sep, token = part.partition("=")
        name, token = name.strip(), token.strip()
        if not sep or not name:
            raise ValueError("expected NAME=TOKEN pairs")
        if ";" in part:
            # NAME=TOKEN;NAME2=TOKEN2 would otherwise be one token with a ';' inside.
            raise ValueError(f"';' in the pair of {name!r}: separate pairs with commas")
        if len(token) < 16:
            raise ValueError(f"token of {name!r} is shorter than 16 characters")
        if name in out:
            raise ValueError(f"token name {name!r} appears twice")
        out[name] = token
    return out


def path_map(text: str) -> dict[str, str]:
    """NAME=DIR pairs, comma-separated, each name once."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, path = part.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ValueError(f"expected NAME=DIR pairs, got {part!r}")
        if name.strip() in out:
            raise ValueError(f"adapter name {name.strip()!r} appears twice")
        out[name.strip()] = path.strip()
    return out


def fingerprint_mode(text: str) -> Literal["fast", "full"]:
    """fast or full."""
    mode = text.strip().lower()
    if mode not in ("fast", "full"):
        raise ValueError(f"expected fast or full, got {text!r}")
    return cast(Literal["fast", "full"], mode)


def log_level(text: str) -> str:
    """debug, info, warning or error."""
    level = text.strip().lower()
    if level not in ("debug", "info", "warning", "error"):
        raise ValueError(f"expected debug, info, warning or error, got {text!r}")
    return level


def log_format(text: str) -> str:
    """auto, json or console."""
    fmt = text.strip().lower()
    if fmt not in ("auto", "json", "console"):
        raise ValueError(f"expected auto, json or console, got {text!r}")
    return fmt


def kv_device(text: str) -> str:
    """cpu, cuda or cuda:N."""
    device = text.strip().lower()
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise ValueError(f"expected cpu, cuda or cuda:N, got {text!r}")
    return device


def absolute_path(text: str) -> str:
    """A path starting with /."""
    path = text.strip()
    if not path.startswith("/"):
        raise ValueError(f"expected an absolute path, got {text!r}")
    return path


def optional_str(text: str) -> str | None:
    """Free text; empty (or blank) means None."""
    return text.strip() or None


def redis_url(text: str) -> str | None:
    """A redis://, rediss:// or unix:// URL, or a cluster's redis+cluster://HOST:PORT,...
    (rediss+cluster:// with TLS); empty means None (the embedded tier). Its query may
    hold only db=N. No message echoes the URL but `redacted()`: it may hold a password."""
    url = text.strip()
    if not url:
        return None
    if is_cluster_url(url):
        parse_cluster_url(url)  # every seed node checked; messages never echo the URL
        return url
    if not re.match(r"^(redis|rediss|unix)://", url):
        raise ValueError(
            f"expected redis://, rediss:// or unix:// (or redis+cluster://HOST:PORT,...), "
            f"got {redacted(url)!r}"
        )
    check_query(url)
    parts = urlsplit(url)
    try:
        port = parts.port  # ValueError when not a number in 0..65535
    except ValueError:
        port = 0
    if port == 0:
        raise ValueError(f"the URL's port is not a number in 1 to {_MAX_PORT}")
    # The database is the path (redis://) or ?db= (unix://, redis:// too): an integer.
    db = parts.path.strip("/") if parts.scheme != "unix" else ""
    db = db or next((v for k, v in parse_qsl(parts.query) if k == "db"), "")
    if db and not db.isdigit():
        raise ValueError("the URL's database is not a number (redis://HOST:PORT/0)")
    return url


def lease_secret(text: str) -> str:
    """Empty, or a secret of at least 16 characters."""
    if text and len(text) < 16:
        raise ValueError("must be at least 16 characters")
    return text


def http_url(text: str) -> str:
    """An http:// or https:// base URL (a trailing / is dropped)."""
    url = text.strip().rstrip("/")
    if not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", url):
        raise ValueError(f"expected an http:// or https:// base URL, got {text!r}")
    return url


def model_name(text: str) -> str:
    """A served model name such as org/model-7b, or empty."""
    name = text.strip()
    if name and not re.fullmatch(r"[\w./:@+-]{1,256}", name):
        raise ValueError(f"expected a served model name such as org/model-7b, got {text!r}")
    return name


def fraction(text: str) -> float:
    """A number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"expected a number in [0, 1], got {text!r}")
    return value


def payload_format(text: str) -> Literal["text", "openai_json"]:
    """text or openai_json."""
    value = text.strip().lower()
    if value not in ("text", "openai_json"):
        raise ValueError(f"expected text or openai_json, got {text!r}")
    return cast(Literal["text", "openai_json"], value)


def header_name(text: str) -> str:
    """An HTTP header name (RFC 9110 token), lower-cased; empty means none."""
    name = text.strip().lower()
    if name and not re.fullmatch(r"[!#$%&'*+.^_`|~0-9a-z-]{1,128}", name):
        raise ValueError(f"expected an HTTP header name, got {text!r}")
    return name


def replay_pace(text: str) -> str:
    """fastest, original, or a positive number of tokens per second."""
    pace = text.strip().lower()
    if pace in ("fastest", "original"):
        return pace
    try:
        rate = float(pace)
    except ValueError:
        rate = 0.0
    if not 0 < rate <= 1_000_000:
        raise ValueError(f"expected fastest, original or tokens per second, got {text!r}")
    return pace


def prompt_version(text: str) -> str:
    """A non-empty prompt version label (printable, no spaces, 256 chars at most)."""
    label = text.strip()
    if not re.fullmatch(r"[\x21-\x7e]{1,256}", label):
        raise ValueError(f"expected a prompt version such as v3, got {text!r}")
    return label

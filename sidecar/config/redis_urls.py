"""Redis URLs: what may be shown of one, its query, and the Redis Cluster URL.

`redacted()` is the only form of a Redis URL a message or a log may carry: user
information and query values (but `db`) replaced by `***`, whatever the scheme, even
a mistyped one. `check_query()` accepts only `db=N`: redis-py would otherwise take
connection options from the URL (`ssl_cert_reqs=none` turns certificate checks off),
around the INFERCACHE_REDIS_TLS_* settings.

The cluster URL is `redis+cluster://[USER[:PASSWORD]@]HOST:PORT,HOST:PORT,...`. Every
listed node is a seed: the client asks any reachable one for the cluster's topology,
so listing one node per shard keeps the sidecar starting when some are down.
`rediss+cluster://` is the same with TLS. A cluster has only database 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote

CLUSTER_URL = re.compile(r"^rediss?\+cluster://", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ClusterUrl:
    """A parsed redis+cluster:// URL."""

    seeds: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    tls: bool


REDACTED = "***"
_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")


def redacted(url: str) -> str:
    """`url` as a message may show it: the user information (everything before the last
    `@`, after the scheme's `://`) and every query value but `db`'s become `***`; the
    fragment is dropped. Safe on any text, a mistyped scheme included."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    # The last "@" ends the user information even when an unencoded "/", "?" or "#" sits
    # in the password: a path or query never holds one in a URL the sidecar accepts.
    _, at, rest = rest.rpartition("@")
    rest = rest.split("#", 1)[0]
    authority_and_path, q, query = rest.partition("?")
    shown = f"{scheme}{sep}" + (f"{REDACTED}@" if at else "") + authority_and_path
    if q:
        pairs = parse_qsl(query, keep_blank_values=True)
        shown += "?" + "&".join(
            f"{_param(k)}={v if k == 'db' and v.isdigit() else REDACTED}" for k, v in pairs
        )
    return shown


def _param(name: str) -> str:
    """A query parameter's name as a message may show it (an odd one is hidden too)."""
    return name if _PARAM_NAME.fullmatch(name) else REDACTED


def check_query(url: str) -> None:
    """ValueError unless the URL's query holds nothing but `db=N` (never echoing it):
    connection options come from the INFERCACHE_REDIS_* settings only."""
    query = url.split("#", 1)[0].partition("?")[2]
    for name, _ in parse_qsl(query, keep_blank_values=True):
        if name != "db":
            raise ValueError(
                f"the URL's query parameter {_param(name)!r} is not accepted: only db=N is "
                "(TLS and credentials come from the INFERCACHE_REDIS_* settings)"
            )


def is_cluster_url(url: str) -> bool:
    """True when the URL names a Redis Cluster."""
    return CLUSTER_URL.match(url) is not None


def parse_cluster_url(url: str) -> ClusterUrl:
    """The seeds and credentials of a cluster URL; ValueError naming what is wrong
    (never echoing the URL: it may hold a password)."""
    if not is_cluster_url(url):
        raise ValueError("expected redis+cluster:// or rediss+cluster://")
    check_query(url)
    rest = url.split("://", 1)[1]
    netloc = re.split(r"[/?#]", rest, maxsplit=1)[0]
    tail = rest[len(netloc) :]
    username = password = None
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        user, sep, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if sep else None
    if tail.split("?", 1)[0].split("#", 1)[0].strip("/") not in ("", "0"):
        raise ValueError("a Redis Cluster has only database 0 (redis+cluster://HOST:PORT,...)")
    seeds: list[tuple[str, int]] = []
    for part in netloc.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(
                "each cluster node must be HOST:PORT with a port in 1 to 65535 "
                "(redis+cluster://HOST:PORT,HOST:PORT,...)"
            )
        seeds.append((host.strip("[]"), int(port)))
    return ClusterUrl(tuple(seeds), username, password, url.lower().startswith("rediss+"))

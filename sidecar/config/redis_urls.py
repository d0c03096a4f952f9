"""The Redis Cluster URL: `redis+cluster://[USER[:PASSWORD]@]HOST:PORT,HOST:PORT,...`.

Every listed node is a seed: the client asks any reachable one for the cluster's
topology, so listing one node per shard keeps the sidecar starting when some are down.
`rediss+cluster://` is the same with TLS. A cluster has only database 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

CLUSTER_URL = re.compile(r"^rediss?\+cluster://", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ClusterUrl:
    """A parsed redis+cluster:// URL."""

    seeds: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    tls: bool


def is_cluster_url(url: str) -> bool:
    """True when the URL names a Redis Cluster."""
    return CLUSTER_URL.match(url) is not None


def parse_cluster_url(url: str) -> ClusterUrl:
    """The seeds and credentials of a cluster URL; ValueError naming what is wrong
    (never echoing the URL: it may hold a password)."""
    if not is_cluster_url(url):
        raise ValueError("expected redis+cluster:// or rediss+cluster://")
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

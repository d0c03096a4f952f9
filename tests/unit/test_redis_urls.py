"""INFERCACHE_REDIS_URL for a Redis Cluster: seeds, credentials, TLS, refusals."""

from __future__ import annotations

import pytest

from sidecar.config import ConfigError, load_config
from sidecar.config.redis_urls import ClusterUrl, is_cluster_url, parse_cluster_url


def test_cluster_url_lists_every_seed_with_credentials() -> None:
    """Every HOST:PORT is a seed; user and (percent-encoded) password come from the URL."""
    url = "rediss+cluster://cache:p%40ss@10.0.0.1:7000,redis-1.svc:7001,[::1]:7002/0"
    assert parse_cluster_url(url) == ClusterUrl(
        (("10.0.0.1", 7000), ("redis-1.svc", 7001), ("::1", 7002)), "cache", "p@ss", True
    )
    assert parse_cluster_url("redis+cluster://h:1") == ClusterUrl((("h", 1),), None, None, False)


def test_cluster_schemes_are_recognised_and_plain_ones_are_not() -> None:
    """Only redis+cluster:// and rediss+cluster:// name a cluster."""
    assert is_cluster_url("redis+cluster://h:1")
    assert is_cluster_url("REDISS+CLUSTER://h:1")
    assert not is_cluster_url("redis://h:1/0")
    assert not is_cluster_url("rediss://h:1")


def test_a_cluster_url_is_accepted_as_the_redis_url() -> None:
    """load_config keeps a valid cluster URL as given."""
    url = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001"
    assert load_config({"INFERCACHE_REDIS_URL": url}).redis.url == url


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+cluster://h:7000,h", "each cluster node must be HOST:PORT"),
        ("redis+cluster://h:70000", "each cluster node must be HOST:PORT"),
        ("redis+cluster://:7000", "each cluster node must be HOST:PORT"),
        ("redis+cluster://u:secret@h:7000,", "each cluster node must be HOST:PORT"),
        ("redis+cluster://h:7000/3", "a Redis Cluster has only database 0"),
    ],
)
def test_bad_cluster_urls_are_refused_without_echoing_them(url: str, message: str) -> None:
    """A malformed cluster URL names the variable and the problem, never the URL itself."""
    with pytest.raises(ConfigError) as err:
        load_config({"INFERCACHE_REDIS_URL": url})
    assert str(err.value).startswith(f"INFERCACHE_REDIS_URL: {message}")
    assert "secret" not in str(err.value)

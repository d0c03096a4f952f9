"""INFERCACHE_REDIS_URL: Cluster seeds, credentials, TLS, refusals; what messages show of a URL."""

from __future__ import annotations

import pytest

from sidecar.config import ConfigError, load_config
from sidecar.config.redis_urls import ClusterUrl, is_cluster_url, parse_cluster_url, redacted

NO_SECRET = {"INFERCACHE_INSECURE_DEV_NO_FLEET_SECRET": "true"}
"""A valid URL needs a fleet secret to load (issue 25): these tests are about the URL."""


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
    assert load_config({"INFERCACHE_REDIS_URL": url} | NO_SECRET).redis.url == url


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


@pytest.mark.parametrize(
    "url",
    [
        "Rediss://acme:hunter2-pass@redis.internal:6380/0",  # a mistyped scheme
        "https://acme:hunter2-pass@redis.internal:6380/0",
        "redis:/acme:hunter2-pass@redis.internal:6380/0",  # one slash: no authority
        "redis://acme:hunter2-pass@redis.internal:port/0",  # a port that is not a number
        "redis://acme:hunter2-pass@redis.internal:6379/zero",
        "redis://acme:hunter2/pass@redis.internal:6379/0",  # an unencoded "/" in it
        "rediss://redis.internal:6380/0?password=hunter2-pass",
        "rediss://redis.internal:6380/0?hunter2-pass",
        "redis+cluster://acme:hunter2-pass@h:7000?ssl_cert_reqs=none",
    ],
)
def test_a_refused_redis_url_never_shows_its_password(url: str) -> None:
    """Whatever is wrong with the URL, the start-up error names the variable and shows
    neither the password nor any query value (the old message echoed a mistyped
    scheme's URL whole)."""
    with pytest.raises(ConfigError) as err:
        load_config({"INFERCACHE_REDIS_URL": url})
    message = str(err.value)
    assert message.startswith("INFERCACHE_REDIS_URL: ")
    assert "hunter2" not in message


def test_a_mistyped_scheme_is_shown_redacted() -> None:
    """The refusal still shows what was given, the user information replaced."""
    with pytest.raises(ConfigError) as err:
        load_config({"INFERCACHE_REDIS_URL": "Rediss://acme:pw-123@redis.internal:6380/0"})
    assert "'Rediss://***@redis.internal:6380/0'" in str(err.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("rediss://u:p@h:6380/0", "rediss://***@h:6380/0"),
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("redis://u:p/w?x#y@h:1/2", "redis://***@h:1/2"),
        ("unix:///run/redis.sock?db=3&password=p", "unix:///run/redis.sock?db=3&password=***"),
        ("redis://h:1/0?db=x&ssl_cert_reqs=none#frag", "redis://h:1/0?db=***&ssl_cert_reqs=***"),
        ("u:p@h:1", "***@h:1"),
        ("redis+cluster://u:p@w@a:1,b:2", "redis+cluster://***@a:1,b:2"),
    ],
)
def test_redacted_hides_user_information_and_query_values(url: str, shown: str) -> None:
    """What a message may show of a URL: no user, password, query value (but db's) or
    fragment, whatever the scheme."""
    assert redacted(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        "rediss://h:6380/0?ssl_cert_reqs=none",
        "rediss://h:6380/0?ssl_check_hostname=false",
        "redis://h:6379/0?socket_timeout=1",
        "redis://h:6379?db=1&ssl_cert_reqs=",
        "unix:///run/redis.sock?db=0&password=x",
        "rediss+cluster://h:7000?ssl_cert_reqs=none",
    ],
)
def test_query_parameters_other_than_db_are_refused(url: str) -> None:
    """redis-py reads connection options from the query (ssl_cert_reqs=none silently
    turned certificate verification off): only db=N is accepted, the refusal names the
    variable and the parameter."""
    with pytest.raises(ConfigError) as err:
        load_config({"INFERCACHE_REDIS_URL": url})
    assert str(err.value).startswith("INFERCACHE_REDIS_URL: the URL's query parameter")
    assert "is not accepted: only db=N" in str(err.value)


def test_db_in_the_query_is_still_accepted() -> None:
    """db=N is the database of a unix:// URL (and may be given for redis:// too)."""
    for url in ("unix:///run/redis.sock?db=2", "redis://h:6379?db=1", "rediss://h:6380/0"):
        assert load_config({"INFERCACHE_REDIS_URL": url} | NO_SECRET).redis.url == url


def test_the_redis_section_repr_leaves_the_url_out() -> None:
    """A logged Config shows no Redis URL (it may carry a password)."""
    config = load_config({"INFERCACHE_REDIS_URL": "redis://u:hunter2-pass@h:6379/0"} | NO_SECRET)
    assert "hunter2" not in repr(config)

"""Redis connection options: what reaches redis-py, what may be shown, and the
settings refused together (no Redis needed: the TLS and ACL paths against a real
server are in tests/integration/test_redis_security.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.backends.redis.connect import RedisOptions, client_kwargs, read_password, redacted
from sidecar.config import ConfigError, load_config


def kwargs(options: RedisOptions) -> dict[str, object]:
    return client_kwargs(options, connect_timeout_s=1, socket_timeout_s=1)


def test_tls_settings_reach_redis_py_only_for_rediss_with_verification_on() -> None:
    """rediss:// gets the CA, client certificate and key, certificate and host name
    verification on; redis:// gets none of it; no CLIENT SETINFO either way."""
    tls = kwargs(RedisOptions("rediss://h:6380/0", None, "/ca", "/crt", "/key"))
    assert tls["ssl_ca_certs"] == "/ca"
    assert (tls["ssl_certfile"], tls["ssl_keyfile"]) == ("/crt", "/key")
    assert (tls["ssl_cert_reqs"], tls["ssl_check_hostname"]) == ("required", True)
    off = kwargs(RedisOptions("rediss://h:6380/0", tls_verify_hostname=False))
    assert (off["ssl_cert_reqs"], off["ssl_check_hostname"]) == ("required", False)
    plain = kwargs(RedisOptions("redis://h:6379/0"))
    assert not any(k.startswith("ssl") for k in plain)
    assert plain["driver_info"] is None


def test_the_password_file_is_read_as_one_line(tmp_path: Path) -> None:
    """A trailing newline is dropped; an empty file, two lines or a missing file are
    ConfigError naming the variable and never quoting the content."""
    good = tmp_path / "pw"
    good.write_text("hunter2-but-longer\n")
    assert kwargs(RedisOptions("redis://u@h:1/0", str(good)))["password"] == "hunter2-but-longer"
    for content in ("", "\n", "line one\nline two\n"):
        bad = tmp_path / "bad"
        bad.write_text(content)
        with pytest.raises(ConfigError, match="INFERCACHE_REDIS_PASSWORD_FILE") as err:
            read_password(str(bad))
        assert "line one" not in str(err.value)
    with pytest.raises(ConfigError, match="cannot read"):
        read_password(str(tmp_path / "missing"))


def test_redacted_urls_and_reprs_show_no_secret() -> None:
    """What logs and errors may show of a URL has neither the user nor the password,
    and the options' repr leaves the URL out."""
    url = "rediss://infercache:s3cret@redis.internal:6380/0"
    assert redacted(url) == "rediss://***@redis.internal:6380/0"
    assert redacted("redis://h:6379/0") == "redis://h:6379/0"
    # A cluster URL lists several seeds (urlsplit cannot read its port): this raised
    # ValueError while a refused connection was being reported.
    seeds = "redis+cluster://u:p@w@10.0.0.1:7000,10.0.0.2:7001"
    assert redacted(seeds) == "redis+cluster://***@10.0.0.1:7000,10.0.0.2:7001"
    assert "s3cret" not in repr(RedisOptions(url))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"redis_url": "redis://h:6379/0", "redis_tls_ca_file": "{f}"}, "needs a rediss://"),
        (
            {"redis_url": "rediss://h:6380/0", "redis_tls_cert_file": "{f}"},
            "CERT_FILE and INFERCACHE_REDIS_TLS_KEY_FILE go together",
        ),
        (
            {"redis_url": "redis://u:pw@h:6379/0", "redis_password_file": "{f}"},
            "carries a password too",
        ),
        ({"redis_password_file": "{f}"}, "needs an INFERCACHE_REDIS_URL"),
        ({"redis_url": "rediss://h:6380/0", "redis_tls_ca_file": "{f}.missing"}, "not a file"),
    ],
    ids=["tls-without-rediss", "cert-without-key", "two-passwords", "no-url", "missing-ca"],
)
def test_redis_credentials_and_tls_settings_that_do_not_fit_are_refused(
    tmp_path: Path, settings: dict[str, str], message: str
) -> None:
    """Settings valid alone but not together fail load_config naming the variables."""
    f = tmp_path / "file"
    f.write_text("x\n")
    overrides = {k: v.replace("{f}", str(f)) for k, v in settings.items()}
    with pytest.raises(ConfigError, match=message) as err:
        load_config({}, overrides)
    assert "pw@" not in str(err.value)

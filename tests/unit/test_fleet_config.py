"""The fleet secret settings: a shared Redis needs a secret, the embedded store none."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.config import ConfigError, load_config
from sidecar.fleet import fleet_keys

REDIS = {"INFERCACHE_REDIS_URL": "redis://10.0.0.5:6380/0"}


def test_a_shared_redis_without_a_fleet_secret_is_refused_naming_the_variable() -> None:
    """INFERCACHE_REDIS_URL without INFERCACHE_FLEET_SECRET_FILE is a ConfigError."""
    with pytest.raises(ConfigError, match="INFERCACHE_FLEET_SECRET_FILE is not"):
        load_config(REDIS)


def test_the_development_switch_allows_redis_without_a_secret() -> None:
    """INFERCACHE_INSECURE_DEV_NO_FLEET_SECRET=true starts with a fixed public key."""
    config = load_config(REDIS | {"INFERCACHE_INSECURE_DEV_NO_FLEET_SECRET": "true"})
    assert fleet_keys(config).origin == "insecure-dev"


def test_the_embedded_store_needs_no_secret_and_gets_a_random_key() -> None:
    """Without Redis nothing is shared: each process signs with its own random key."""
    config = load_config({})
    a, b = fleet_keys(config), fleet_keys(config)
    assert a.origin == "process"
    assert a.signing_key("entry") != b.signing_key("entry")


def test_secret_files_are_read_newest_first_for_rotation(tmp_path: Path) -> None:
    """The secret file signs; the previous secret file only verifies."""
    new, old = tmp_path / "new", tmp_path / "old"
    new.write_bytes(b"N" * 40 + b"\n")
    old.write_bytes(b"O" * 40)
    config = load_config(
        REDIS
        | {
            "INFERCACHE_FLEET_SECRET_FILE": str(new),
            "INFERCACHE_FLEET_PREVIOUS_SECRET_FILE": str(old),
        }
    )
    keys = fleet_keys(config)
    assert keys.rotating
    tag = keys.sign("rule", b"x")
    assert fleet_keys(load_config(REDIS | {"INFERCACHE_FLEET_SECRET_FILE": str(new)})).verify(
        "rule", tag, b"x"
    )


def test_a_short_secret_is_refused_naming_the_variable(tmp_path: Path) -> None:
    """A secret under 32 bytes is a ConfigError naming INFERCACHE_FLEET_SECRET_FILE."""
    short = tmp_path / "short"
    short.write_bytes(b"too short")
    config = load_config(REDIS | {"INFERCACHE_FLEET_SECRET_FILE": str(short)})
    with pytest.raises(ConfigError, match=r"INFERCACHE_FLEET_SECRET_FILE: .* at least 32"):
        fleet_keys(config)


def test_a_missing_secret_file_is_refused() -> None:
    """A secret file that does not exist is refused at load."""
    with pytest.raises(ConfigError, match=r"INFERCACHE_FLEET_SECRET_FILE: .* not a file"):
        load_config(REDIS | {"INFERCACHE_FLEET_SECRET_FILE": "/nonexistent/secret"})

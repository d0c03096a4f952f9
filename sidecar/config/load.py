"""Reading a Config: defaults < INFERCACHE_* variables < CLI flags, then the cross-checks.

This is the only module of the sidecar that is handed the environment (by the
entry points); invalid values fail here with a message naming the variable or flag.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import stat
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from sidecar.config.fields import ENV_PREFIX, Setting, section_settings
from sidecar.config.parsers import token_map
from sidecar.config.sections import AdminConfig, Config, RedisConfig


class ConfigError(ValueError):
    """A setting is invalid; the message names the variable or flag."""


def _sections() -> tuple[tuple[str, type[Any]], ...]:
    out: list[tuple[str, type[Any]]] = []
    for f in dataclasses.fields(Config):
        factory = f.default_factory
        if isinstance(factory, type) and dataclasses.is_dataclass(factory):
            out.append((f.name, factory))
    return tuple(out)


SECTIONS: tuple[tuple[str, type[Any]], ...] = _sections()
"""(Config field, section class) in declaration order."""

SETTINGS: tuple[Setting, ...] = tuple(
    s for name, section in SECTIONS for s in section_settings(name, section)
)
"""Every setting, walked from the sections: the flags, variables and README rows."""


def load_config(environ: Mapping[str, str], overrides: Mapping[str, str] | None = None) -> Config:
    """Build a Config from defaults < environment < overrides (CLI flags, by setting name)."""
    overrides = overrides or {}
    unknown = set(overrides) - {s.name for s in SETTINGS}
    if unknown:
        raise ConfigError(f"unknown settings: {sorted(unknown)}")
    values: dict[str, dict[str, Any]] = {name: {} for name, _ in SECTIONS}
    for s in SETTINGS:
        if s.name in overrides:
            raw, source = overrides[s.name], s.flag
        elif s.env in environ:
            raw, source = environ[s.env], s.env
        else:
            raw, source = s.default, f"default of {s.env}"
        try:
            values[s.section][s.field] = s.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}") from exc
    admin, identity = values["admin"], values["identity"]
    # Checked here, before the start's slow imports: opening a FIFO would block forever.
    _not_special(values["policy"]["file"], "INFERCACHE_POLICY_FILE")
    _not_special(admin["tokens_file"], "INFERCACHE_ADMIN_TOKENS_FILE")
    for name in ADMIN_TLS_FILES:
        _not_special(admin[name], f"INFERCACHE_ADMIN_{name.upper()}")
    _not_special(values["gateway"]["keys_file"], "INFERCACHE_GATEWAY_KEYS_FILE")
    for name in REDIS_FILES:
        _not_special(values["redis"][name], f"INFERCACHE_REDIS_{name.upper()}")
    for name in ("secret_file", "previous_secret_file"):
        _not_special(values["fleet"][name], f"INFERCACHE_FLEET_{name.upper()}")
    if admin["tokens_file"]:
        admin["tokens"] = _merge_token_file(admin["tokens"], admin["tokens_file"])
    if not identity["fingerprint_cache_file"]:
        from infercache_client.fingerprint import default_cache_file

        identity["fingerprint_cache_file"] = str(default_cache_file(environ))
    config = Config(
        **{name: section(**values[name]) for name, section in SECTIONS},
        otel_env={k: v for k, v in environ.items() if k.startswith("OTEL_")},
    )
    check_consistency(config)
    return config


CLIENT_VARIABLES = ("INFERCACHE_ADMIN_TOKEN",)
"""INFERCACHE_* variables that are not settings: the admin CLI's token (--token-env)."""


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """A warning for each INFERCACHE_* variable that no setting reads (a typo such as
    INFERCACHE_LISTEN_ADDR), naming the closest known variable when one is close."""
    known = [s.env for s in SETTINGS] + list(CLIENT_VARIABLES)
    warnings = []
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX) and name not in known:
            # Compared without the prefix, which every name shares.
            suffixes = [k.removeprefix(ENV_PREFIX) for k in known]
            close = difflib.get_close_matches(name.removeprefix(ENV_PREFIX), suffixes, n=1)
            hint = f"; did you mean {ENV_PREFIX}{close[0]}?" if close else ""
            warnings.append(f"{name} is not a setting and is ignored{hint}")
    return warnings


def _not_special(path: str | None, variable: str) -> None:
    """ConfigError when `path` exists but is not a regular file (a FIFO, a device, a
    directory); a missing file is left to the reader's own error."""
    if path is None:
        return
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{variable}: {path} is not a regular file")


def _merge_token_file(inline: Mapping[str, str], path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            from_file = token_map(f.read())
    except OSError as exc:
        raise ConfigError(f"INFERCACHE_ADMIN_TOKENS_FILE: cannot read {path}: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(f"INFERCACHE_ADMIN_TOKENS_FILE: {path}: {exc}") from exc
    clash = set(inline) & set(from_file)
    if clash:
        raise ConfigError(f"INFERCACHE_ADMIN_TOKENS_FILE: names also set inline: {sorted(clash)}")
    return {**inline, **from_file}


# Header, key material (bounded by the key limits) and checksum, generously.
_ENTRY_OVERHEAD = 512 * 1024
_CHUNK_ROW_BYTES = 12


REDIS_FILES = ("password_file", "tls_ca_file", "tls_cert_file", "tls_key_file")
"""RedisConfig's file settings (INFERCACHE_REDIS_<NAME>)."""


def _check_redis(r: RedisConfig) -> None:
    """The Redis credentials and TLS files fit the URL, and exist (never read here:
    the password is read where the client is made, and never shown)."""
    tls = [f"INFERCACHE_REDIS_{n.upper()}" for n in REDIS_FILES[1:] if getattr(r, n)]
    scheme = urlsplit(r.url).scheme if r.url else ""
    if tls and scheme not in ("rediss", "rediss+cluster"):
        raise ConfigError(f"{tls[0]} needs a rediss:// INFERCACHE_REDIS_URL (TLS)")
    if bool(r.tls_cert_file) != bool(r.tls_key_file):
        raise ConfigError(
            "INFERCACHE_REDIS_TLS_CERT_FILE and INFERCACHE_REDIS_TLS_KEY_FILE go together"
        )
    if r.password_file and not r.url:
        raise ConfigError("INFERCACHE_REDIS_PASSWORD_FILE needs an INFERCACHE_REDIS_URL")
    if r.password_file and r.url and urlsplit(r.url).password is not None:
        raise ConfigError(
            "INFERCACHE_REDIS_PASSWORD_FILE is set and INFERCACHE_REDIS_URL carries a "
            "password too; keep one of them"
        )
    for name in REDIS_FILES:
        path = getattr(r, name)
        if path and not os.path.isfile(path):
            raise ConfigError(f"INFERCACHE_REDIS_{name.upper()}: {path} is not a file")


def _check_fleet(c: Config) -> None:
    """A shared Redis needs the fleet secret (or the explicit development switch)."""
    f = c.fleet
    if f.previous_secret_file and not f.secret_file:
        raise ConfigError(
            "INFERCACHE_FLEET_PREVIOUS_SECRET_FILE needs INFERCACHE_FLEET_SECRET_FILE"
        )
    if c.redis.url and not f.secret_file and not f.insecure_dev_no_secret:
        raise ConfigError(
            "INFERCACHE_REDIS_URL is set but INFERCACHE_FLEET_SECRET_FILE is not: every value "
            "read from a shared Redis is authenticated with the fleet secret (create one with "
            "`openssl rand -base64 48`, see docs/security.md); for a development store only, "
            "INFERCACHE_INSECURE_DEV_NO_FLEET_SECRET=true runs without one"
        )
    if f.secret_file and f.insecure_dev_no_secret:
        raise ConfigError(
            "INFERCACHE_INSECURE_DEV_NO_FLEET_SECRET is set with INFERCACHE_FLEET_SECRET_FILE; "
            "keep one of them"
        )
    for name in ("secret_file", "previous_secret_file"):
        path = getattr(f, name)
        if path and not os.path.isfile(path):
            raise ConfigError(f"INFERCACHE_FLEET_{name.upper()}: {path} is not a file")


ADMIN_TLS_FILES = ("tls_cert_file", "tls_key_file", "tls_client_ca_file")
"""AdminConfig's TLS file settings (INFERCACHE_ADMIN_<NAME>)."""


def _check_admin_tls(a: AdminConfig) -> None:
    """The admin plane's TLS files go together and exist (read when the listener starts)."""
    if bool(a.tls_cert_file) != bool(a.tls_key_file):
        raise ConfigError(
            "INFERCACHE_ADMIN_TLS_CERT_FILE and INFERCACHE_ADMIN_TLS_KEY_FILE go together"
        )
    if a.tls_client_ca_file and not a.tls_cert_file:
        raise ConfigError(
            "INFERCACHE_ADMIN_TLS_CLIENT_CA_FILE needs INFERCACHE_ADMIN_TLS_CERT_FILE and "
            "_KEY_FILE (client certificates are asked for over TLS only)"
        )
    for name in ADMIN_TLS_FILES:
        path = getattr(a, name)
        if path and not os.path.isfile(path):
            raise ConfigError(f"INFERCACHE_ADMIN_{name.upper()}: {path} is not a file")


def check_consistency(c: Config) -> None:
    """Settings that are valid alone but not together: ConfigError naming both."""
    _check_redis(c.redis)
    _check_fleet(c)
    _check_admin_tls(c.admin)
    ttl, limits = c.ttl, c.limits
    if ttl.default_ttl_s > ttl.max_ttl_s:
        raise ConfigError(
            f"INFERCACHE_DEFAULT_TTL_S ({ttl.default_ttl_s}) exceeds INFERCACHE_MAX_TTL_S "
            f"({ttl.max_ttl_s})"
        )
    largest_entry = (
        limits.max_payload_bytes + limits.max_chunks * _CHUNK_ROW_BYTES + _ENTRY_OVERHEAD
    )
    if c.redis.url is None and c.tiers.embedded_max_bytes < largest_entry:
        raise ConfigError(
            f"INFERCACHE_EMBEDDED_MAX_BYTES ({c.tiers.embedded_max_bytes}) cannot hold one entry "
            f"of INFERCACHE_MAX_PAYLOAD_BYTES ({limits.max_payload_bytes}) plus its key material "
            f"and INFERCACHE_MAX_CHUNKS ({limits.max_chunks}) chunk boundaries"
        )
    if c.stream.buffer_max_bytes < limits.max_payload_bytes:
        raise ConfigError(
            f"INFERCACHE_STREAM_BUFFER_MAX_BYTES ({c.stream.buffer_max_bytes}) cannot buffer "
            f"one stream of INFERCACHE_MAX_PAYLOAD_BYTES ({limits.max_payload_bytes})"
        )
    if c.gateway.listen and not c.identity.model_path:
        # The gateway's keys are bound to the weights it serves; without a fingerprint a
        # model upgrade under the same served name would hit the old model's answers.
        raise ConfigError(
            "INFERCACHE_GATEWAY_LISTEN needs INFERCACHE_MODEL_PATH: gateway keys carry the "
            "fingerprint of the model the pod serves"
        )
    if c.kv.events_replay_endpoint and not c.kv.events_endpoint:
        raise ConfigError(
            "INFERCACHE_KV_EVENTS_REPLAY_ENDPOINT needs INFERCACHE_KV_EVENTS_ENDPOINT (it "
            "replays what that endpoint published)"
        )
    if c.kv.lease_ttl_ms > c.kv.max_lease_ttl_ms:
        raise ConfigError(
            f"INFERCACHE_KV_LEASE_TTL_MS ({c.kv.lease_ttl_ms}) exceeds "
            f"INFERCACHE_KV_MAX_LEASE_TTL_MS ({c.kv.max_lease_ttl_ms})"
        )

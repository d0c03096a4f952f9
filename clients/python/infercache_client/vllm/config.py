"""The connector's settings, read from vLLM's kv_connector_extra_config.

    --kv-transfer-config '{"kv_connector": "InfercacheConnector",
        "kv_connector_module_path": "infercache_client.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"sidecar": "127.0.0.1:50051"}}'

Every timeout bounds what a slow or dead sidecar can cost a request: nothing on vLLM's
scheduler path waits longer than lookup_timeout_s for the sidecar, attaches (after the
one at engine start) run in the background, and after a deadline the connector stops
asking for retry_s (vLLM serves with 0 external tokens meanwhile).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_TEXT = 256
"""Longest tenant / fingerprint / address accepted (the sidecar's own limit is the same)."""


class ConfigError(ValueError):
    """kv_connector_extra_config holds a value the connector cannot use."""


def _seconds(extra: Mapping[str, Any], name: str, default: float, *, low: float = 0.0) -> float:
    value = extra.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"kv_connector_extra_config.{name} must be a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= low or seconds > 3600:
        raise ConfigError(f"kv_connector_extra_config.{name} must be in ({low}, 3600] seconds")
    return seconds


def _fraction(extra: Mapping[str, Any], name: str, default: float) -> float:
    value = extra.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"kv_connector_extra_config.{name} must be a number")
    if not math.isfinite(value) or not 0 < value <= 1:
        raise ConfigError(f"kv_connector_extra_config.{name} must be in (0, 1]")
    return float(value)


def _text(extra: Mapping[str, Any], name: str, default: str, *, required: bool) -> str:
    value = extra.get(name, default)
    if not isinstance(value, str) or len(value) > MAX_TEXT or (required and not value):
        need = "a non-empty string" if required else "a string"
        raise ConfigError(f"kv_connector_extra_config.{name} must be {need} of <= {MAX_TEXT} chars")
    return value


@dataclass(frozen=True, slots=True)
class ConnectorConfig:
    """What kv_connector_extra_config may say (every field has a default)."""

    sidecar: str = "127.0.0.1:50051"
    """The sidecar's data-plane address ("host:port" or "unix:/path")."""
    tenant: str = "vllm"
    """Tenant every block is stored under; a request's cache_salt narrows it further."""
    lookup_timeout_s: float = 0.2
    """Deadline of the scheduler's prefix lookups (the most a miss can cost a request)."""
    rpc_timeout_s: float = 2.0
    """Deadline of every other RPC (pinning, allocate, commit, release)."""
    attach_timeout_s: float = 5.0
    """Deadline of AttachHotTier (the pool is created on the first attach); only the
    attach at engine start waits for it, later ones run in the background."""
    retry_s: float = 1.0
    """After a deadline or a refused attach, how long the connector leaves the sidecar
    alone (an attachment the sidecar forgot is replaced at once)."""
    model_fingerprint: str = ""
    """Declare this fingerprint instead of computing it from the model directory
    (`infercache fingerprint DIR`); only for a model vLLM loads from elsewhere."""
    fingerprint_mode: str = "full"
    """fast or full: must be the mode the sidecar fingerprints its --model-path with."""
    load_margin: float = 0.8
    """Load a prefix only when its load is predicted to take at most this fraction of
    recomputing it (cost.py; 1.0: whenever it is predicted faster)."""
    serving_config: str = ""
    """The serving-config file the sidecar declares (its INFERCACHE_SERVING_CONFIG, the
    same content): a component of the fingerprint, so both must name the same options."""
    fingerprint_cache_file: str = ""
    """Full-mode memo file ("": $XDG_CACHE_HOME/infercache/fingerprints.json, the
    sidecar's default); it spares a restart the rehash and never changes the value."""
    domain_key_file: str = ""
    """The trust domain's key file (`<INFERCACHE_KV_SHM_DIR>/<domain>/infercache-kv-domain.key`)
    when the sidecar has INFERCACHE_KV_TRUST_DOMAINS: the attach proves with it that this
    engine may use the pool of the domain `tenant` is in (docs/security.md)."""

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any] | None) -> ConnectorConfig:
        """Parse kv_connector_extra_config; ConfigError names a bad or unknown key."""
        extra = dict(extra or {})
        d = _DEFAULT
        unknown = sorted(set(extra) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"unknown kv_connector_extra_config keys: {', '.join(unknown)}")
        mode = _text(extra, "fingerprint_mode", d.fingerprint_mode, required=True)
        if mode not in ("fast", "full"):
            raise ConfigError("kv_connector_extra_config.fingerprint_mode must be fast or full")
        return cls(
            sidecar=_text(extra, "sidecar", d.sidecar, required=True),
            tenant=_text(extra, "tenant", d.tenant, required=True),
            lookup_timeout_s=_seconds(extra, "lookup_timeout_s", d.lookup_timeout_s),
            rpc_timeout_s=_seconds(extra, "rpc_timeout_s", d.rpc_timeout_s),
            attach_timeout_s=_seconds(extra, "attach_timeout_s", d.attach_timeout_s),
            retry_s=_seconds(extra, "retry_s", d.retry_s),
            load_margin=_fraction(extra, "load_margin", d.load_margin),
            model_fingerprint=_text(
                extra, "model_fingerprint", d.model_fingerprint, required=False
            ),
            fingerprint_mode=mode,
            serving_config=_text(extra, "serving_config", d.serving_config, required=False),
            fingerprint_cache_file=_text(
                extra, "fingerprint_cache_file", d.fingerprint_cache_file, required=False
            ),
            domain_key_file=_text(extra, "domain_key_file", d.domain_key_file, required=False),
        )


_DEFAULT = ConnectorConfig()

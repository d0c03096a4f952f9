"""The configuration sections: each setting declared once, with its default, parser and help.

A section's field `pool_bytes` with PREFIX "kv_" is the setting kv_pool_bytes:
INFERCACHE_KV_POOL_BYTES, --kv-pool-bytes, one README row. `name=` keeps a
setting's historical name where the prefix rule would not give it.
`Config()` is the all-defaults configuration (before load_config derives
fingerprint_cache_file from the environment).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import sidecar.config.parsers as p
from sidecar.config.feature_sections import (
    GatewayConfig,
    HitsConfig,
    IdentityConfig,
    KvConfig,
    PolicyConfig,
    PrewarmConfig,
    TelemetryConfig,
)
from sidecar.config.fields import setting
from sidecar.config.verify_section import VerifyConfig


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Where the data plane listens and how the process runs."""

    PREFIX: ClassVar[str] = ""
    listen: tuple[str, ...] = setting(
        ("127.0.0.1:50051",),
        "Data-plane addresses, comma-separated: HOST:PORT and/or unix:/path/to.sock",
        p.listen,
    )
    health_listen: tuple[str, ...] = setting(
        (),
        "Health-only addresses (grpc.health.v1 and nothing else, for kubelet probes); "
        "empty disables it",
        p.optional_listen,
    )
    grace_period_s: int = setting(
        10, "On SIGTERM, seconds in-flight RPCs get before the server stops", p.positive_int
    )
    uvloop: bool = setting(True, "Run the event loop on uvloop")


@dataclass(frozen=True, slots=True)
class RedisConfig:
    """The shared warm tier and control store (empty URL: the embedded stores)."""

    PREFIX: ClassVar[str] = "redis_"
    url: str | None = setting(
        None,
        "Warm tier Redis URL (redis://[USER[:PASSWORD]@]host:port/db; rediss:// for TLS; "
        "redis+cluster://host:port,host:port,... for a Redis Cluster, docs/deploy.md); "
        "empty = embedded in-process warm tier",
        p.redis_url,
        secret=True,  # it may carry a password: the section's repr leaves it out
    )
    key_prefix: str = setting("ic:v2:", "Prefix of every Redis key the sidecar writes")
    password_file: str | None = setting(
        None,
        "File holding the Redis password (one line), for a URL that names only the user "
        "(rediss://USER@host:port/db); never logged",
        p.optional_str,
    )
    tls_ca_file: str | None = setting(
        None,
        "rediss:// only: CA file to verify Redis's certificate (empty = system CAs)",
        p.optional_str,
    )
    tls_cert_file: str | None = setting(
        None, "rediss:// only: client certificate file (Redis's tls-auth-clients)", p.optional_str
    )
    tls_key_file: str | None = setting(
        None, "rediss:// only: the client certificate's private key file", p.optional_str
    )
    tls_verify_hostname: bool = setting(
        True, "rediss:// only: check that Redis's certificate names the URL's host"
    )
    lookup_timeout_ms: int = setting(
        50,
        "Warm-tier read deadline; past it a lookup answers MISS with degraded=true",
        p.positive_int,
        name="lookup_timeout_ms",
    )
    write_timeout_ms: int = setting(
        500,
        "Warm-tier write deadline; also the control plane's (Invalidate, refreshes), "
        "counted as Redis's time, not the sidecar's own CPU, waits or stops",
        p.positive_int,
        name="write_timeout_ms",
    )


@dataclass(frozen=True, slots=True)
class TiersConfig:
    """Budgets of the in-process result tiers."""

    PREFIX: ClassVar[str] = ""
    hot_max_bytes: int = setting(256 * 1024**2, "Hot tier byte budget", p.parse_bytes)
    hot_max_entries: int = setting(
        100_000, "Hot tier entry cap (0 disables it)", p.non_negative_int
    )
    embedded_max_bytes: int = setting(1024**3, "Embedded warm tier byte budget", p.parse_bytes)
    embedded_max_entries: int = setting(1_000_000, "Embedded warm tier entry cap", p.positive_int)


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """Sizes a request may have."""

    PREFIX: ClassVar[str] = ""
    max_payload_bytes: int = setting(
        4 * 1024**2, "Largest result payload a Store accepts", p.parse_bytes
    )
    max_input_bytes: int = setting(
        8 * 1024**2, "Largest text/chat input a key accepts", p.parse_bytes
    )
    max_batch: int = setting(1024, "Most lookups in one LookupBatch", p.positive_int)
    max_chunks: int = setting(
        32768,
        "Most chunks one result may have (Store chunk boundaries, StoreStream chunks)",
        p.positive_int,
    )


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """The streaming RPCs and ReportOutcome."""

    PREFIX: ClassVar[str] = "stream_"
    idle_timeout_ms: int = setting(
        30000,
        "A StoreStream silent for this long fails DEADLINE_EXCEEDED and stores nothing",
        p.positive_int,
    )
    buffer_max_bytes: int = setting(
        256 * 1024**2,
        "Bytes all open StoreStreams may buffer together; past it RESOURCE_EXHAUSTED",
        p.parse_bytes,
    )
    replay_max_gap_ms: int = setting(
        5000,
        "Longest pause LookupStream pacing puts between two chunks",
        p.positive_int,
        name="replay_max_gap_ms",
    )
    evict_rejected: bool = setting(
        True,
        "ReportOutcome(REJECTED) evicts the entry, so the next request recomputes",
        name="evict_rejected",
    )
    outcome_reasons: tuple[str, ...] = setting(
        ("format", "grader", "hallucination", "policy", "quality", "refusal", "safety", "schema"),
        "ReportOutcome reasons that get their own metric label; any other counts as other",
        p.reason_labels,
        name="outcome_reasons",
    )
    replay_max_duration_ms: int = setting(
        600000,
        "Longest a LookupStream replay may pace; past it the stream ends DEADLINE_EXCEEDED",
        p.positive_int,
        name="replay_max_duration_ms",
    )


@dataclass(frozen=True, slots=True)
class TtlConfig:
    """TTL bounds of stored results (the policy file chooses within them)."""

    PREFIX: ClassVar[str] = ""
    default_ttl_s: int = setting(3600, "TTL of a Store that does not ask for one", p.positive_int)
    max_ttl_s: int = setting(86400, "Largest TTL any Store gets", p.positive_int)
    tenant_max_ttl_s: Mapping[str, int] = setting(
        {}, "Per-tenant TTL caps, TENANT=SECONDS pairs, comma-separated", p.tenant_map
    )


@dataclass(frozen=True, slots=True)
class AdminConfig:
    """The admin plane: listener, bearer tokens and TLS."""

    PREFIX: ClassVar[str] = "admin_"
    listen: tuple[str, ...] = setting(
        ("127.0.0.1:50052",),
        "Admin-plane addresses (Invalidate, audit, stats, Prewarm); empty disables it",
        p.optional_listen,
    )
    tokens: Mapping[str, str] = setting(
        {},
        "Admin bearer tokens as NAME=TOKEN pairs, comma-separated (tokens >= 16 chars)",
        p.token_map,
        secret=True,
    )
    tokens_file: str | None = setting(
        None,
        "File with one NAME=TOKEN per line, merged with INFERCACHE_ADMIN_TOKENS",
        p.optional_str,
    )
    tls_cert_file: str | None = setting(
        None,
        "PEM certificate (chain) the admin listener serves TLS with; empty = plaintext",
        p.optional_str,
    )
    tls_key_file: str | None = setting(
        None, "PEM private key of INFERCACHE_ADMIN_TLS_CERT_FILE", p.optional_str
    )
    tls_client_ca_file: str | None = setting(
        None,
        "PEM CA(s): admin clients must present a certificate they signed (mTLS), on top "
        "of the bearer token; empty = no client certificate asked",
        p.optional_str,
    )


@dataclass(frozen=True, slots=True)
class LeaseConfig:
    """Leases of MISS results and the single-flight wait."""

    PREFIX: ClassVar[str] = "lease_"
    secret: str = setting(
        "",
        "Lease signing secret (>= 16 chars); empty = generated once and shared via the store",
        p.lease_secret,
        secret=True,
    )
    ttl_s: int = setting(60, "How long a MISS's lease stays valid for Store", p.positive_int)
    hold_ttl_ms: int = setting(
        800,
        "A single-flight hold lapses this long after its holder last renewed it (renewed "
        "every quarter of it while the result is computed): how soon waiters replace a "
        "dead holder",
        p.positive_int,
    )
    allow_unleased_store: bool = setting(
        False,
        "Accept Store without a lease (stamped as if computed unleased_window_s ago)",
        name="allow_unleased_store",
    )
    # An unleased result may have been computed this long before it is stored: it is
    # stamped with the epoch current then (conservative).
    unleased_window_s: int = setting(
        300,
        "Assumed longest computation for unleased stores",
        p.positive_int,
        name="unleased_window_s",
    )
    max_wait_ms: int = setting(
        30000, "Cap on a Lookup's single-flight wait_ms", p.non_negative_int, name="max_wait_ms"
    )
    max_waiters: int = setting(
        4096,
        "Most Lookups waiting on held keys at once; past it RESOURCE_EXHAUSTED",
        p.positive_int,
    )


@dataclass(frozen=True, slots=True)
class InvalidationConfig:
    """How current this sidecar must be, and the reclaim of dead entries."""

    PREFIX: ClassVar[str] = ""
    freshness_bound_ms: int = setting(
        1000,
        "A sidecar that has not confirmed it is current for this long serves no hot hits",
        p.positive_int,
    )
    reclaim_keys_per_s: int = setting(
        2000, "Background reclaim scan rate for dead entries", p.positive_int
    )
    invalidate_wait_replicas: int = setting(
        0,
        "Invalidate answers OK only once this many Redis replicas hold the rule (WAIT); "
        "0 = once the primary holds it",
        p.non_negative_int,
    )
    invalidate_wait_aof: bool = setting(
        False,
        "Invalidate answers OK only once the rule is in the primary's AOF on disk (and "
        "the replicas' above) (WAITAOF: Redis >= 7.2 with appendonly yes)",
    )
    invalidate_wait_timeout_ms: int = setting(
        1000, "How long Invalidate waits for that durability before UNAVAILABLE", p.positive_int
    )


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """The fleet secret: what authenticates every value read back from a shared store."""

    PREFIX: ClassVar[str] = "fleet_"
    secret_file: str | None = setting(
        None,
        "File holding the fleet secret (>= 32 bytes, e.g. `openssl rand -base64 48`): it "
        "signs and verifies every value in Redis; required with INFERCACHE_REDIS_URL",
        p.optional_str,
    )
    previous_secret_file: str | None = setting(
        None,
        "File holding a second fleet secret that verifies but never signs: the one being "
        "rotated out, or in (docs/security.md, rotation)",
        p.optional_str,
    )
    insecure_dev_no_secret: bool = setting(
        False,
        "Development only: run on a shared Redis without a fleet secret (a fixed public key "
        "signs; anyone who can write to Redis can forge hits)",
        name="insecure_dev_no_fleet_secret",
    )
    min_epoch: int = setting(
        0,
        "Serve no hits until the store's signed rule set reaches this epoch (the receipt "
        "epoch of the last Invalidate the release recorded; closes a store rollback)",
        p.non_negative_int,
        name="min_epoch",
    )


@dataclass(frozen=True, slots=True)
class Config:
    """Validated sidecar configuration: one frozen section per concern."""

    server: ServerConfig = field(default_factory=ServerConfig)
    redis: RedisConfig = field(default_factory=RedisConfig)
    tiers: TiersConfig = field(default_factory=TiersConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    stream: StreamConfig = field(default_factory=StreamConfig)
    ttl: TtlConfig = field(default_factory=TtlConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)
    lease: LeaseConfig = field(default_factory=LeaseConfig)
    invalidation: InvalidationConfig = field(default_factory=InvalidationConfig)
    fleet: FleetConfig = field(default_factory=FleetConfig)
    identity: IdentityConfig = field(default_factory=IdentityConfig)
    prewarm: PrewarmConfig = field(default_factory=PrewarmConfig)
    hits: HitsConfig = field(default_factory=HitsConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    kv: KvConfig = field(default_factory=KvConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    otel_env: Mapping[str, str] = field(default_factory=dict)
    """The standard OTEL_* variables (not settings of ours; see observability/telemetry.py)."""


DEFAULTS = Config()
"""The declared defaults: a component's keyword default names one of these rather than
repeating its value (`bound_s=DEFAULTS.invalidation.freshness_bound_ms / 1000`)."""

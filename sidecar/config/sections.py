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
from typing import ClassVar, Literal

import sidecar.config.parsers as p
from sidecar.config.fields import setting
from sidecar.kv.types import KvSettings


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
        "Warm tier Redis URL (redis://host:port/db); empty = embedded in-process warm tier",
        p.redis_url,
    )
    key_prefix: str = setting("ic:v1:", "Prefix of every Redis key the sidecar writes")
    lookup_timeout_ms: int = setting(
        50,
        "Warm-tier read deadline; past it a lookup answers MISS with degraded=true",
        p.positive_int,
        name="lookup_timeout_ms",
    )
    write_timeout_ms: int = setting(
        500, "Warm-tier write deadline", p.positive_int, name="write_timeout_ms"
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
    """The admin plane: listener and bearer tokens."""

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
class IdentityConfig:
    """The pod's model and adapters, fingerprinted at start."""

    PREFIX: ClassVar[str] = ""
    model_path: str | None = setting(
        None,
        "Model directory to fingerprint at start; then an empty key.model_version means it",
        p.optional_str,
    )
    adapters: Mapping[str, str] = setting(
        {},
        "LoRA adapters to fingerprint at start, NAME=DIR pairs (also --adapter NAME=DIR)",
        p.path_map,
    )
    fingerprint_mode: Literal["fast", "full"] = setting(
        "fast", "fast (sampled) or full (every byte)", p.fingerprint_mode
    )
    fingerprint_cache_file: str | None = setting(
        None,
        "Full-mode memo file; empty = $XDG_CACHE_HOME/infercache/fingerprints.json",
        p.optional_str,
    )
    allow_foreign_model_store: bool = setting(
        False, "With a model path, accept Stores for a model_version other than the pod's"
    )
    serving_config: str | None = setting(
        None,
        "JSON file of the model server's output-shaping options (--dtype, --max-model-len, "
        "...); a component of the model fingerprint",
        p.optional_str,
    )


@dataclass(frozen=True, slots=True)
class PrewarmConfig:
    """Prewarm runs: the model server and the bounds of one run."""

    PREFIX: ClassVar[str] = "prewarm_"
    model_server_url: str = setting(
        "http://127.0.0.1:8000",
        "Base URL of the pod's OpenAI-compatible model server (prewarm sends requests there)",
        p.http_url,
        name="model_server_url",
    )
    model_server_model: str = setting(
        "",
        "Served model name at the model server (`model` of prewarm requests); required to prewarm",
        p.model_name,
        name="model_server_model",
    )
    concurrency: int = setting(4, "Most model-server calls in flight per prewarm", p.positive_int)
    timeout_s: int = setting(120, "Deadline of one prewarm model-server call", p.positive_int)
    max_requests: int = setting(10000, "Most requests in one prewarm run", p.positive_int)
    max_message_bytes: int = setting(
        16 * 1024**2,
        "Largest admin-plane message (a Prewarm carries a file's requests inline)",
        p.parse_bytes,
    )
    payload: Literal["text", "openai_json"] = setting(
        "text",
        "What prewarm stores: text (the answer's text) or openai_json (the whole response)",
        p.payload_format,
    )


@dataclass(frozen=True, slots=True)
class HitsConfig:
    """Hit recording for prewarm's top-K."""

    PREFIX: ClassVar[str] = "hit_"
    sample_rate: float = setting(
        0.01,
        "Fraction of hits recorded for prewarm's top-K (retaining tenants only); 0 = off",
        p.fraction,
    )
    record_max_per_version: int = setting(
        10000, "Most distinct requests ranked per model version for prewarm", p.positive_int
    )
    record_ttl_s: int = setting(
        604800,
        "Recorded requests and hit counts expire this long after their last sampled hit",
        p.positive_int,
    )


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """The cacheability policy file."""

    PREFIX: ClassVar[str] = "policy_"
    file: str | None = setting(
        None,
        "Cacheability policy YAML (per-tenant rules); empty = everything cacheable",
        p.optional_str,
    )
    poll_ms: int = setting(
        2000,
        "How often the policy file is checked for changes (0 = reload on SIGHUP only)",
        p.non_negative_int,
    )


@dataclass(frozen=True, slots=True)
class KvConfig:
    """The KV hot tier."""

    PREFIX: ClassVar[str] = "kv_"
    enabled: bool = setting(True, "Serve KvCacheService (the KV hot tier) on the data plane")
    device: str = setting(
        "cpu",
        "KV pool device: cpu (shared-memory file) or cuda[:N] (CUDA IPC export)",
        p.kv_device,
    )
    pool_bytes: int = setting(
        1024**3, "KV pool size; created on the first AttachHotTier, never exceeded", p.parse_bytes
    )
    slot_bytes: int = setting(
        0, "Bytes per KV slot; 0 = the first attachment's block size", p.parse_bytes
    )
    shm_dir: str = setting(
        "/dev/shm", "Directory of the CPU pool's shared-memory file", p.absolute_path
    )
    promote_timeout_ms: int = setting(
        50,
        "LookupPrefix waits this long for warm blocks to be promoted, then says retry_later",
        p.positive_int,
    )
    warm_ttl_s: int = setting(86400, "TTL of KV blocks demoted to Redis", p.positive_int)
    lease_ttl_ms: int = setting(30000, "KV lease TTL when a request gives none", p.positive_int)
    max_lease_ttl_ms: int = setting(600000, "Longest KV lease TTL granted", p.positive_int)
    max_chain_blocks: int = setting(4096, "Most block hashes in one LookupPrefix", p.positive_int)

    def to_settings(self) -> KvSettings:
        """The KV hot tier's own settings value (kv/ does not import config)."""
        return KvSettings(
            pool_bytes=self.pool_bytes,
            slot_bytes=self.slot_bytes,
            promote_timeout_ms=self.promote_timeout_ms,
            warm_ttl_s=self.warm_ttl_s,
            default_lease_ms=self.lease_ttl_ms,
            max_lease_ms=self.max_lease_ttl_ms,
            max_chain_blocks=self.max_chain_blocks,
        )


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    """Logs, the Prometheus endpoint and span attributes."""

    PREFIX: ClassVar[str] = ""
    log_level: str = setting("info", "debug, info, warning or error", p.log_level)
    log_format: str = setting(
        "auto", "json, console, or auto (console on a terminal, JSON lines otherwise)", p.log_format
    )
    log_repeat_interval_s: int = setting(
        10, "A repeated failure is logged once per this interval, with a count", p.positive_int
    )
    metrics_listen: str = setting(
        "127.0.0.1:9464",
        "Prometheus scrape endpoint HOST:PORT (serves /metrics); empty disables it",
        p.optional_hostport,
    )
    metrics_max_model_versions: int = setting(
        32,
        "Model versions that get their own metric label; later ones count as _other",
        p.positive_int,
    )
    tenants_in_clear: bool = setting(
        False,
        "Put tenant names in span attributes in clear (default: a SHA-256 prefix)",
        name="telemetry_tenants_in_clear",
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
    identity: IdentityConfig = field(default_factory=IdentityConfig)
    prewarm: PrewarmConfig = field(default_factory=PrewarmConfig)
    hits: HitsConfig = field(default_factory=HitsConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    kv: KvConfig = field(default_factory=KvConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    otel_env: Mapping[str, str] = field(default_factory=dict)
    """The standard OTEL_* variables (not settings of ours; see observability/telemetry.py)."""


DEFAULTS = Config()
"""The declared defaults: a component's keyword default names one of these rather than
repeating its value (`bound_s=DEFAULTS.invalidation.freshness_bound_ms / 1000`)."""

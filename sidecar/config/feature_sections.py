"""The sections of the optional features: model identity, prewarm, hit recording,
cacheability policy, the KV tier, telemetry and the OpenAI gateway (same rules as
sections.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

import sidecar.config.parsers as p
from sidecar.config.fields import setting
from sidecar.kv.types import KvSettings, parse_trust_domains


@dataclass(frozen=True, slots=True)
class IdentityConfig:
    """The pod's model and adapters: fingerprinted at start, re-checked when files change."""

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
    # Full by default: fast mode samples bytes and can miss a few rows edited in place
    # (a vocabulary extension), and the identity that keys every cache must not.
    fingerprint_mode: Literal["fast", "full"] = setting(
        "full",
        "full (every byte) or fast (sampled: can miss a few edited rows)",
        p.fingerprint_mode,
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
    model_recheck_interval_s: int = setting(
        10,
        "Seconds between checks of the fingerprinted files' stat identity; on a change "
        "stores under the old fingerprint are refused until it is re-measured (0 = off)",
        p.non_negative_int,
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
        "What prewarm stores for a request not recorded by the gateway: text (the answer's "
        "text) or openai_json (the whole response); gateway records keep the gateway's form",
        p.payload_format,
    )


@dataclass(frozen=True, slots=True)
class HitsConfig:
    """Hit recording for prewarm's top-K."""

    PREFIX: ClassVar[str] = "hit_"
    sketch_size: int = setting(
        10000,
        "Distinct requests whose hits are counted in memory between two merges into the "
        "ranking (retaining tenants only; exact up to this many); 0 = off",
        p.non_negative_int,
    )
    merge_interval_ms: int = setting(
        5000,
        "How often in-memory hit counts are merged into the shared ranking (also before "
        "this pod's prewarm and at shutdown)",
        p.positive_int,
    )
    record_max_per_version: int = setting(
        10000, "Most distinct requests ranked per model version for prewarm", p.positive_int
    )
    record_ttl_s: int = setting(
        604800,
        "Recorded requests and hit counts expire this long after their last counted hit",
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
    attachment_ttl_ms: int = setting(
        30000,
        "A KV attachment not heard from this long (no RPC, no RenewAttachment) is reclaimed "
        "with its leases",
        p.positive_int,
    )
    max_attachments: int = setting(
        256,
        "Most live KV attachments; AttachHotTier beyond it is RESOURCE_EXHAUSTED",
        p.positive_int,
    )
    trust_domains: tuple[tuple[str, tuple[str, ...]], ...] = setting(
        (),
        "KV trust domains DOMAIN=TENANT[,TENANT...][;...]: one pool (and key file) per "
        "domain under KV_SHM_DIR/DOMAIN; empty = one pool for every tenant",
        parse_trust_domains,
    )
    verify_hits: float = setting(
        0.1,
        "Fraction of KV prefix hits whose blocks are checked against their commit-time "
        "hash before LookupPrefix answers (sampled; demotions are always checked)",
        p.fraction,
    )
    events_endpoint: str = setting(
        "",
        "Publish the KV pool's and warm tier's blocks as vLLM KV events (ZMQ PUB, msgpack "
        "KVEventBatch; needs the `events` extra): tcp://*:PORT binds, tcp://HOST:PORT "
        "connects; empty = off",
        p.zmq_endpoint,
    )
    events_replay_endpoint: str = setting(
        "",
        "ZMQ ROUTER endpoint (bound) replaying recent KV event batches from a sequence "
        "number, as vLLM's replay_endpoint; empty = none",
        p.zmq_endpoint,
    )

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
            attachment_ttl_ms=self.attachment_ttl_ms,
            max_attachments=self.max_attachments,
            verify_hits=self.verify_hits,
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
class GatewayConfig:
    """The OpenAI-compatible HTTP gateway (sidecar/gateway); upstream is model_server_url."""

    PREFIX: ClassVar[str] = "gateway_"
    listen: str = setting(
        "",
        "OpenAI-compatible caching gateway HOST:PORT (in the sidecar's process); empty disables it",
        p.optional_hostport,
    )
    keys_file: str | None = setting(
        None,
        "File of gateway API keys, one TENANT=KEY per line (keys >= 16 chars); re-read "
        "when it changes",
        p.optional_str,
    )
    keys_poll_ms: int = setting(
        2000, "How often the keys file is checked for changes (0 = never)", p.non_negative_int
    )
    tenant_header: str = setting(
        "",
        "Request header naming the tenant: with a keys file it must match the key's "
        "tenant; without one it alone names the tenant (only behind an authenticating "
        "proxy that strips it from clients); empty = API keys only",
        p.header_name,
    )
    default_prompt_version: str = setting(
        "default",
        "Prompt version of requests without an x-infercache-prompt-version header",
        p.prompt_version,
    )
    max_body_bytes: int = setting(
        16 * 1024**2, "Largest request body; larger is 413", p.parse_bytes
    )
    body_timeout_s: int = setting(
        30,
        "Deadline for a request's body to arrive whole once its headers have; "
        "slower is 408 and the connection is closed",
        p.positive_int,
    )
    max_header_bytes: int = setting(
        64 * 1024,
        "Largest request head (header names and values together); larger is 431",
        p.parse_bytes,
    )
    wait_ms: int = setting(
        30000,
        "Concurrent identical requests wait this long for the first one's answer "
        "(single flight; capped by INFERCACHE_LEASE_MAX_WAIT_MS), 0 = no waiting",
        p.non_negative_int,
    )
    upstream_timeout_s: int = setting(
        600, "Deadline of one upstream call (a whole answer or stream)", p.positive_int
    )
    upstream_max_connections: int = setting(
        256, "Most connections to the model server", p.positive_int
    )
    upstream_api_key: str = setting(
        "",
        "Bearer token the gateway and prewarm send to the model server (vLLM --api-key); "
        "empty = none",
        secret=True,
    )
    replay_pace: str = setting(
        "fastest",
        "Default pace of a streamed hit: fastest, original, or tokens per second "
        "(x-infercache-replay-pace overrides it)",
        p.replay_pace,
    )

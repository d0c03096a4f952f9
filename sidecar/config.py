"""Configuration: one frozen dataclass, read once from INFERCACHE_* variables and CLI flags.

Every setting is declared once in SETTINGS (name, parser, default, help); the
CLI flags and the README table are derived from it. No other module reads
os.environ. Invalid values fail at start with a message naming the variable.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

ENV_PREFIX = "INFERCACHE_"


class ConfigError(ValueError):
    """A setting is invalid; the message names the variable or flag."""


@dataclass(frozen=True, slots=True)
class Setting:
    """One configurable value: its field name, parser, default (as text) and help."""

    name: str
    parse: Callable[[str], Any]
    default: str
    help: str

    @property
    def env(self) -> str:
        """The environment variable that sets it."""
        return ENV_PREFIX + self.name.upper()

    @property
    def flag(self) -> str:
        """The CLI flag that sets it."""
        return "--" + self.name.replace("_", "-")


_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 10**6, "gb": 10**9}
_SIZE_UNITS |= {"kib": 1024, "mib": 1024**2, "gib": 1024**3}


def parse_bytes(text: str) -> int:
    """Parse "1048576", "256MiB", "1GB" into bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"expected a size such as 268435456 or 256MiB, got {text!r}")
    return int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(f"expected a positive integer, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"expected an integer >= 0, got {text!r}")
    return value


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _listen(text: str) -> tuple[str, ...]:
    addrs = tuple(a.strip() for a in text.split(",") if a.strip())
    if not addrs:
        raise ValueError("expected at least one address")
    for a in addrs:
        if not (a.startswith("unix:") or re.fullmatch(r"(\[[0-9a-fA-F:]+\]|[\w.-]+):\d+", a)):
            raise ValueError(f"{a!r} is neither HOST:PORT nor unix:PATH")
    return addrs


def _tenant_map(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        tenant, sep, value = part.partition("=")
        if not sep or not tenant.strip():
            raise ValueError(f"expected TENANT=SECONDS pairs, got {part!r}")
        out[tenant.strip()] = _positive_int(value)
    return out


def _optional_listen(text: str) -> tuple[str, ...]:
    return _listen(text) if text.strip() else ()


def _token_map(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.replace("\n", ",").split(",")):
        if not part or part.startswith("#"):
            continue
        name, sep, token = part.partition("=")
        name, token = name.strip(), token.strip()
        if not sep or not name:
            raise ValueError("expected NAME=TOKEN pairs")
        if len(token) < 16:
            raise ValueError(f"token of {name!r} is shorter than 16 characters")
        if name in out:
            raise ValueError(f"token name {name!r} appears twice")
        out[name] = token
    return out


def _path_map(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, path = part.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ValueError(f"expected NAME=DIR pairs, got {part!r}")
        if name.strip() in out:
            raise ValueError(f"adapter name {name.strip()!r} appears twice")
        out[name.strip()] = path.strip()
    return out


def _fingerprint_mode(text: str) -> str:
    mode = text.strip().lower()
    if mode not in ("fast", "full"):
        raise ValueError(f"expected fast or full, got {text!r}")
    return mode


def _log_level(text: str) -> str:
    level = text.strip().lower()
    if level not in ("debug", "info", "warning", "error"):
        raise ValueError(f"expected debug, info, warning or error, got {text!r}")
    return level


def _optional_hostport(text: str) -> str:
    addr = text.strip()
    if addr and not re.fullmatch(r"(\[[0-9a-fA-F:]+\]|[\w.-]+):\d+", addr):
        raise ValueError(f"expected HOST:PORT (or empty to disable), got {text!r}")
    return addr


def _log_format(text: str) -> str:
    fmt = text.strip().lower()
    if fmt not in ("auto", "json", "console"):
        raise ValueError(f"expected auto, json or console, got {text!r}")
    return fmt


def _kv_device(text: str) -> str:
    device = text.strip().lower()
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise ValueError(f"expected cpu, cuda or cuda:N, got {text!r}")
    return device


def _absolute_path(text: str) -> str:
    path = text.strip()
    if not path.startswith("/"):
        raise ValueError(f"expected an absolute path, got {text!r}")
    return path


def _optional_str(text: str) -> str | None:
    return text.strip() or None


def _http_url(text: str) -> str:
    url = text.strip().rstrip("/")
    if not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", url):
        raise ValueError(f"expected an http:// or https:// base URL, got {text!r}")
    return url


def _model_name(text: str) -> str:
    name = text.strip()
    if name and not re.fullmatch(r"[\w./:@+-]{1,256}", name):
        raise ValueError(f"expected a served model name such as org/model-7b, got {text!r}")
    return name


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"expected a number in [0, 1], got {text!r}")
    return value


def _payload_format(text: str) -> str:
    value = text.strip().lower()
    if value not in ("text", "openai_json"):
        raise ValueError(f"expected text or openai_json, got {text!r}")
    return value


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "listen",
        _listen,
        "127.0.0.1:50051",
        "Data-plane addresses, comma-separated: HOST:PORT and/or unix:/path/to.sock",
    ),
    Setting(
        "redis_url",
        _optional_str,
        "",
        "Warm tier Redis URL (redis://host:port/db); empty = embedded in-process warm tier",
    ),
    Setting("redis_key_prefix", str, "ic:v1:", "Prefix of every Redis key the sidecar writes"),
    Setting(
        "lookup_timeout_ms",
        _positive_int,
        "50",
        "Warm-tier read deadline; past it a lookup answers MISS with degraded=true",
    ),
    Setting("write_timeout_ms", _positive_int, "500", "Warm-tier write deadline"),
    Setting("hot_max_bytes", parse_bytes, "256MiB", "Hot tier byte budget"),
    Setting("hot_max_entries", _non_negative_int, "100000", "Hot tier entry cap (0 disables it)"),
    Setting("embedded_max_bytes", parse_bytes, "1GiB", "Embedded warm tier byte budget"),
    Setting("embedded_max_entries", _positive_int, "1000000", "Embedded warm tier entry cap"),
    Setting("max_payload_bytes", parse_bytes, "4MiB", "Largest result payload a Store accepts"),
    Setting("max_input_bytes", parse_bytes, "8MiB", "Largest text/chat input a key accepts"),
    Setting("max_batch", _positive_int, "1024", "Most lookups in one LookupBatch"),
    Setting(
        "max_chunks",
        _positive_int,
        "32768",
        "Most chunks one result may have (Store chunk boundaries, StoreStream chunks)",
    ),
    Setting(
        "stream_idle_timeout_ms",
        _positive_int,
        "30000",
        "A StoreStream silent for this long fails DEADLINE_EXCEEDED and stores nothing",
    ),
    Setting(
        "stream_buffer_max_bytes",
        parse_bytes,
        "256MiB",
        "Bytes all open StoreStreams may buffer together; past it RESOURCE_EXHAUSTED",
    ),
    Setting(
        "replay_max_gap_ms",
        _positive_int,
        "5000",
        "Longest pause LookupStream pacing puts between two chunks",
    ),
    Setting(
        "evict_rejected",
        _bool,
        "true",
        "ReportOutcome(REJECTED) evicts the entry, so the next request recomputes",
    ),
    Setting("default_ttl_s", _positive_int, "3600", "TTL of a Store that does not ask for one"),
    Setting("max_ttl_s", _positive_int, "86400", "Largest TTL any Store gets"),
    Setting(
        "tenant_max_ttl_s",
        _tenant_map,
        "",
        "Per-tenant TTL caps, TENANT=SECONDS pairs, comma-separated",
    ),
    Setting(
        "grace_period_s",
        _positive_int,
        "10",
        "On SIGTERM, seconds in-flight RPCs get before the server stops",
    ),
    Setting(
        "admin_listen",
        _optional_listen,
        "127.0.0.1:50052",
        "Admin-plane addresses (Invalidate, audit, stats, Prewarm); empty disables it",
    ),
    Setting(
        "admin_tokens",
        _token_map,
        "",
        "Admin bearer tokens as NAME=TOKEN pairs, comma-separated (tokens >= 16 chars)",
    ),
    Setting(
        "admin_tokens_file",
        _optional_str,
        "",
        "File with one NAME=TOKEN per line, merged with INFERCACHE_ADMIN_TOKENS",
    ),
    Setting(
        "lease_secret",
        str,
        "",
        "Lease signing secret (>= 16 chars); empty = generated once and shared via the store",
    ),
    Setting("lease_ttl_s", _positive_int, "60", "How long a MISS's lease stays valid for Store"),
    Setting(
        "allow_unleased_store",
        _bool,
        "false",
        "Accept Store without a lease (stamped as if computed unleased_window_s ago)",
    ),
    Setting(
        "unleased_window_s", _positive_int, "300", "Assumed longest computation for unleased stores"
    ),
    Setting("max_wait_ms", _non_negative_int, "30000", "Cap on a Lookup's single-flight wait_ms"),
    Setting(
        "freshness_bound_ms",
        _positive_int,
        "1000",
        "A sidecar that has not confirmed it is current for this long serves no hot hits",
    ),
    Setting(
        "reclaim_keys_per_s", _positive_int, "2000", "Background reclaim scan rate for dead entries"
    ),
    Setting(
        "model_path",
        _optional_str,
        "",
        "Model directory to fingerprint at start; then an empty key.model_version means it",
    ),
    Setting(
        "adapters",
        _path_map,
        "",
        "LoRA adapters to fingerprint at start, NAME=DIR pairs (also --adapter NAME=DIR)",
    ),
    Setting("fingerprint_mode", _fingerprint_mode, "fast", "fast (sampled) or full (every byte)"),
    Setting(
        "fingerprint_cache_file",
        _optional_str,
        "",
        "Full-mode memo file; empty = $XDG_CACHE_HOME/infercache/fingerprints.json",
    ),
    Setting(
        "allow_foreign_model_store",
        _bool,
        "false",
        "With a model path, accept Stores for a model_version other than the pod's",
    ),
    Setting(
        "model_server_url",
        _http_url,
        "http://127.0.0.1:8000",
        "Base URL of the pod's OpenAI-compatible model server (prewarm sends requests there)",
    ),
    Setting(
        "model_server_model",
        _model_name,
        "",
        "Served model name at the model server (`model` of prewarm requests); required to prewarm",
    ),
    Setting(
        "prewarm_concurrency", _positive_int, "4", "Most model-server calls in flight per prewarm"
    ),
    Setting("prewarm_timeout_s", _positive_int, "120", "Deadline of one prewarm model-server call"),
    Setting("prewarm_max_requests", _positive_int, "10000", "Most requests in one prewarm run"),
    Setting(
        "prewarm_max_message_bytes",
        parse_bytes,
        "16MiB",
        "Largest admin-plane message (a Prewarm carries a file's requests inline)",
    ),
    Setting(
        "prewarm_payload",
        _payload_format,
        "text",
        "What prewarm stores: text (the answer's text) or openai_json (the whole response)",
    ),
    Setting(
        "hit_sample_rate",
        _fraction,
        "0.01",
        "Fraction of hits recorded for prewarm's top-K (retaining tenants only); 0 = off",
    ),
    Setting(
        "hit_record_max_per_version",
        _positive_int,
        "10000",
        "Most distinct requests ranked per model version for prewarm",
    ),
    Setting(
        "hit_record_ttl_s",
        _positive_int,
        "604800",
        "Recorded requests and hit counts expire this long after their last sampled hit",
    ),
    Setting(
        "policy_file",
        _optional_str,
        "",
        "Cacheability policy YAML (per-tenant rules); empty = everything cacheable",
    ),
    Setting(
        "policy_poll_ms",
        _non_negative_int,
        "2000",
        "How often the policy file is checked for changes (0 = reload on SIGHUP only)",
    ),
    Setting(
        "kv_enabled", _bool, "true", "Serve KvCacheService (the KV hot tier) on the data plane"
    ),
    Setting(
        "kv_device",
        _kv_device,
        "cpu",
        "KV pool device: cpu (shared-memory file) or cuda[:N] (CUDA IPC export)",
    ),
    Setting(
        "kv_pool_bytes",
        parse_bytes,
        "1GiB",
        "KV pool size; created on the first AttachHotTier, never exceeded",
    ),
    Setting(
        "kv_slot_bytes",
        parse_bytes,
        "0",
        "Bytes per KV slot; 0 = the first attachment's block size",
    ),
    Setting(
        "kv_shm_dir", _absolute_path, "/dev/shm", "Directory of the CPU pool's shared-memory file"
    ),
    Setting(
        "kv_promote_timeout_ms",
        _positive_int,
        "50",
        "LookupPrefix waits this long for warm blocks to be promoted, then says retry_later",
    ),
    Setting("kv_warm_ttl_s", _positive_int, "86400", "TTL of KV blocks demoted to Redis"),
    Setting("kv_lease_ttl_ms", _positive_int, "30000", "KV lease TTL when a request gives none"),
    Setting("kv_max_lease_ttl_ms", _positive_int, "600000", "Longest KV lease TTL granted"),
    Setting("kv_max_chain_blocks", _positive_int, "4096", "Most block hashes in one LookupPrefix"),
    Setting("log_level", _log_level, "info", "debug, info, warning or error"),
    Setting(
        "log_format",
        _log_format,
        "auto",
        "json, console, or auto (console on a terminal, JSON lines otherwise)",
    ),
    Setting(
        "metrics_listen",
        _optional_hostport,
        "127.0.0.1:9464",
        "Prometheus scrape endpoint HOST:PORT (serves /metrics); empty disables it",
    ),
    Setting(
        "metrics_max_model_versions",
        _positive_int,
        "32",
        "Model versions that get their own metric label; later ones count as _other",
    ),
    Setting(
        "telemetry_tenants_in_clear",
        _bool,
        "false",
        "Put tenant names in span attributes in clear (default: a SHA-256 prefix)",
    ),
    Setting("uvloop", _bool, "true", "Run the event loop on uvloop"),
)


@dataclass(frozen=True, slots=True)
class Config:
    """Validated sidecar configuration. See SETTINGS for each field's meaning."""

    listen: tuple[str, ...]
    redis_url: str | None
    redis_key_prefix: str
    lookup_timeout_ms: int
    write_timeout_ms: int
    hot_max_bytes: int
    hot_max_entries: int
    embedded_max_bytes: int
    embedded_max_entries: int
    max_payload_bytes: int
    max_input_bytes: int
    max_batch: int
    max_chunks: int
    stream_idle_timeout_ms: int
    stream_buffer_max_bytes: int
    replay_max_gap_ms: int
    evict_rejected: bool
    default_ttl_s: int
    max_ttl_s: int
    tenant_max_ttl_s: Mapping[str, int]
    grace_period_s: int
    admin_listen: tuple[str, ...]
    admin_tokens: Mapping[str, str]
    admin_tokens_file: str | None
    lease_secret: str
    lease_ttl_s: int
    allow_unleased_store: bool
    unleased_window_s: int
    max_wait_ms: int
    freshness_bound_ms: int
    reclaim_keys_per_s: int
    model_path: str | None
    adapters: Mapping[str, str]
    fingerprint_mode: Literal["fast", "full"]
    fingerprint_cache_file: str | None
    allow_foreign_model_store: bool
    model_server_url: str
    model_server_model: str
    prewarm_concurrency: int
    prewarm_timeout_s: int
    prewarm_max_requests: int
    prewarm_max_message_bytes: int
    prewarm_payload: Literal["text", "openai_json"]
    hit_sample_rate: float
    hit_record_max_per_version: int
    hit_record_ttl_s: int
    policy_file: str | None
    policy_poll_ms: int
    kv_enabled: bool
    kv_device: str
    kv_pool_bytes: int
    kv_slot_bytes: int
    kv_shm_dir: str
    kv_promote_timeout_ms: int
    kv_warm_ttl_s: int
    kv_lease_ttl_ms: int
    kv_max_lease_ttl_ms: int
    kv_max_chain_blocks: int
    log_level: str
    log_format: str
    metrics_listen: str
    metrics_max_model_versions: int
    telemetry_tenants_in_clear: bool
    uvloop: bool
    otel_env: Mapping[str, str] = field(default_factory=dict)
    """The standard OTEL_* variables (not settings of ours; see observability/telemetry.py)."""


def load_config(environ: Mapping[str, str], overrides: Mapping[str, str] | None = None) -> Config:
    """Build a Config from defaults < environment < overrides (CLI flags, by field name)."""
    overrides = overrides or {}
    values: dict[str, Any] = {}
    for s in SETTINGS:
        if s.name in overrides:
            raw, source = overrides[s.name], s.flag
        elif s.env in environ:
            raw, source = environ[s.env], s.env
        else:
            raw, source = s.default, f"default of {s.env}"
        try:
            values[s.name] = s.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}") from exc
    if values["admin_tokens_file"]:
        values["admin_tokens"] = _merge_token_file(
            values["admin_tokens"], values["admin_tokens_file"]
        )
    if not values["fingerprint_cache_file"]:
        from sidecar.fingerprint import default_cache_file

        values["fingerprint_cache_file"] = str(default_cache_file(environ))
    if values["lease_secret"] and len(values["lease_secret"]) < 16:
        raise ConfigError("INFERCACHE_LEASE_SECRET: must be at least 16 characters")
    values["otel_env"] = {k: v for k, v in environ.items() if k.startswith("OTEL_")}
    config = Config(**values)
    _check_consistency(config)
    return config


def _merge_token_file(inline: Mapping[str, str], path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            from_file = _token_map(f.read())
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


def _check_consistency(c: Config) -> None:
    if c.default_ttl_s > c.max_ttl_s:
        raise ConfigError(
            f"INFERCACHE_DEFAULT_TTL_S ({c.default_ttl_s}) exceeds INFERCACHE_MAX_TTL_S "
            f"({c.max_ttl_s})"
        )
    largest_entry = c.max_payload_bytes + c.max_chunks * _CHUNK_ROW_BYTES + _ENTRY_OVERHEAD
    if c.redis_url is None and c.embedded_max_bytes < largest_entry:
        raise ConfigError(
            f"INFERCACHE_EMBEDDED_MAX_BYTES ({c.embedded_max_bytes}) cannot hold one entry of "
            f"INFERCACHE_MAX_PAYLOAD_BYTES ({c.max_payload_bytes}) plus its key material "
            f"and INFERCACHE_MAX_CHUNKS ({c.max_chunks}) chunk boundaries"
        )
    if c.stream_buffer_max_bytes < c.max_payload_bytes:
        raise ConfigError(
            f"INFERCACHE_STREAM_BUFFER_MAX_BYTES ({c.stream_buffer_max_bytes}) cannot buffer "
            f"one stream of INFERCACHE_MAX_PAYLOAD_BYTES ({c.max_payload_bytes})"
        )
    if c.kv_lease_ttl_ms > c.kv_max_lease_ttl_ms:
        raise ConfigError(
            f"INFERCACHE_KV_LEASE_TTL_MS ({c.kv_lease_ttl_ms}) exceeds "
            f"INFERCACHE_KV_MAX_LEASE_TTL_MS ({c.kv_max_lease_ttl_ms})"
        )
    if c.redis_url is not None and not re.match(r"^(redis|rediss|unix)://", c.redis_url):
        raise ConfigError(
            f"INFERCACHE_REDIS_URL: expected redis://, rediss:// or unix://, got {c.redis_url!r}"
        )

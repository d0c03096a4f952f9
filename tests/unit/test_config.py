"""Configuration: defaults, INFERCACHE_* parsing, flag precedence, loud errors, docs in sync."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from infercache_client.fingerprint import default_cache_file

from sidecar.api.streams import StreamSettings
from sidecar.backends.redis.client import RedisKeys
from sidecar.backends.redis.control import RedisControlStore
from sidecar.backends.redis.warm import RedisWarmTier
from sidecar.cli.main import build_parser
from sidecar.config import (
    SECTIONS,
    SETTINGS,
    Config,
    ConfigError,
    LimitsConfig,
    Setting,
    load_config,
    parse_bytes,
    setting,
)
from sidecar.config.fields import section_settings
from sidecar.config.table import markdown_table, row, splice, spliced_block
from sidecar.invalidation.freshness import Freshness
from sidecar.invalidation.reclaim import Reclaimer
from sidecar.observability.stats import CacheStats
from sidecar.policy.file import PolicyBounds
from sidecar.policy.ttl import TtlPolicy
from sidecar.prewarm.runner import PrewarmSettings
from sidecar.results.cache import ResultCache
from sidecar.results.stream_store import StreamLimits
from sidecar.wire.openai.answers import PayloadFormat

ROOT = Path(__file__).resolve().parents[2]
BY_NAME = {s.name: s for s in SETTINGS}


def value(config: Config, s: Setting) -> object:
    """The loaded value of one setting, read through its section."""
    return getattr(getattr(config, s.section), s.field)


def test_settings_match_the_config_fields() -> None:
    """SETTINGS is walked from the sections: exactly their fields, in the same order (the
    Config holds one section per field, plus the collected OTEL_* variables, which are
    OpenTelemetry's, not settings of ours)."""
    fields = [f.name for f in dataclasses.fields(Config)]
    assert fields[-1] == "otel_env"
    assert [name for name, _ in SECTIONS] == fields[:-1]
    walked = [(name, f.name) for name, section in SECTIONS for f in dataclasses.fields(section)]
    assert [(s.section, s.field) for s in SETTINGS] == walked


def test_otel_variables_are_collected_for_telemetry() -> None:
    """load_config keeps the OTEL_* variables (and only those) for the telemetry set-up."""
    config = load_config({"OTEL_TRACES_SAMPLER": "always_off", "OTHER": "x"})
    assert dict(config.otel_env) == {"OTEL_TRACES_SAMPLER": "always_off"}


def test_every_setting_has_a_prefixed_variable_and_a_flag() -> None:
    """Each setting is INFERCACHE_<NAME> and --<name-with-dashes>."""
    for s in SETTINGS:
        assert s.env == "INFERCACHE_" + s.name.upper()
        assert s.flag == "--" + s.name.replace("_", "-")


def test_defaults() -> None:
    """With nothing set, every field is its parsed documented default."""
    config = load_config({})
    for s in SETTINGS:
        if s.name == "fingerprint_cache_file":
            continue  # derived default, checked below
        assert value(config, s) == s.parse(s.default), s.name
    assert config.identity.fingerprint_cache_file == str(default_cache_file({}))
    assert load_config({"XDG_CACHE_HOME": "/xdg"}).identity.fingerprint_cache_file == (
        "/xdg/infercache/fingerprints.json"
    )
    assert config.server.listen == ("127.0.0.1:50051",)
    assert config.redis.url is None
    assert config.redis.key_prefix == "ic:v2:"
    assert config.redis.lookup_timeout_ms == 50
    assert config.redis.write_timeout_ms == 500
    assert config.tiers.hot_max_bytes == 256 * 1024**2
    assert config.tiers.hot_max_entries == 100_000
    assert config.tiers.embedded_max_bytes == 1024**3
    assert config.limits.max_payload_bytes == 4 * 1024**2
    assert config.limits.max_input_bytes == 8 * 1024**2
    assert config.limits.max_batch == 1024
    assert (config.ttl.default_ttl_s, config.ttl.max_ttl_s) == (3600, 86400)
    assert config.ttl.tenant_max_ttl_s == {}
    assert config.server.grace_period_s == 10
    assert config.telemetry.log_level == "info"
    assert config.server.uvloop is True


def test_config_is_frozen() -> None:
    """A Config cannot be changed after it is read."""
    config = load_config({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.limits.max_batch = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.limits = LimitsConfig()  # type: ignore[misc]


def test_environment_is_parsed() -> None:
    """INFERCACHE_* values are parsed into typed fields."""
    config = load_config(
        {
            "INFERCACHE_LISTEN": "127.0.0.1:7000, unix:/tmp/ic.sock,[::1]:7001",
            "INFERCACHE_REDIS_URL": "redis://10.0.0.5:6380/2",
            "INFERCACHE_REDIS_KEY_PREFIX": "blue:",
            "INFERCACHE_INSECURE_DEV_NO_FLEET_SECRET": "true",
            "INFERCACHE_LOOKUP_TIMEOUT_MS": "20",
            "INFERCACHE_HOT_MAX_BYTES": "64MiB",
            "INFERCACHE_HOT_MAX_ENTRIES": "0",
            "INFERCACHE_EMBEDDED_MAX_BYTES": "2GB",
            "INFERCACHE_MAX_PAYLOAD_BYTES": "1048576",
            "INFERCACHE_MAX_BATCH": "16",
            "INFERCACHE_DEFAULT_TTL_S": "60",
            "INFERCACHE_MAX_TTL_S": "600",
            "INFERCACHE_TENANT_MAX_TTL_S": "acme=30, beta = 90,",
            "INFERCACHE_LOG_LEVEL": "WARNING",
            "INFERCACHE_UVLOOP": "no",
            "UNRELATED": "ignored",
        }
    )
    assert config.server.listen == ("127.0.0.1:7000", "unix:/tmp/ic.sock", "[::1]:7001")
    assert config.redis.url == "redis://10.0.0.5:6380/2"
    assert config.redis.key_prefix == "blue:"
    assert config.redis.lookup_timeout_ms == 20
    assert config.tiers.hot_max_bytes == 64 * 1024**2
    assert config.tiers.hot_max_entries == 0
    assert config.tiers.embedded_max_bytes == 2 * 10**9
    assert config.limits.max_payload_bytes == 1048576
    assert config.limits.max_batch == 16
    assert (config.ttl.default_ttl_s, config.ttl.max_ttl_s) == (60, 600)
    assert config.ttl.tenant_max_ttl_s == {"acme": 30, "beta": 90}
    assert config.telemetry.log_level == "warning"
    assert config.server.uvloop is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("1536", 1536),
        ("1KiB", 1024),
        ("1kb", 1000),
        ("3 MiB", 3 * 1024**2),
        ("2MB", 2 * 10**6),
        ("1GiB", 1024**3),
        ("5b", 5),
    ],
)
def test_sizes_accept_plain_bytes_and_units(text: str, expected: int) -> None:
    """Sizes are bytes or KiB/MiB/GiB/KB/MB/GB multiples."""
    assert parse_bytes(text) == expected


def test_flags_win_over_the_environment() -> None:
    """A CLI override beats the environment, which beats the default."""
    env = {"INFERCACHE_MAX_BATCH": "5", "INFERCACHE_LOG_LEVEL": "debug"}
    config = load_config(env, {"max_batch": "7"})
    assert config.limits.max_batch == 7
    assert config.telemetry.log_level == "debug"


def test_every_setting_is_a_serve_flag() -> None:
    """`infercache serve` accepts each setting's flag and passes its value through by name."""
    for s in SETTINGS:
        args = build_parser().parse_args(["serve", s.flag, "VALUE"])
        assert getattr(args, s.name) == "VALUE", s.flag
    unset = build_parser().parse_args(["serve"])
    assert all(getattr(unset, s.name) is None for s in SETTINGS)


BAD_VALUES = [
    ("INFERCACHE_LISTEN", "nonsense"),
    ("INFERCACHE_LISTEN", " , "),
    ("INFERCACHE_LISTEN", "127.0.0.1"),
    ("INFERCACHE_REDIS_URL", "http://redis:6379"),
    ("INFERCACHE_LOOKUP_TIMEOUT_MS", "0"),
    ("INFERCACHE_LOOKUP_TIMEOUT_MS", "-5"),
    ("INFERCACHE_LOOKUP_TIMEOUT_MS", "fast"),
    ("INFERCACHE_WRITE_TIMEOUT_MS", "1.5"),
    ("INFERCACHE_HOT_MAX_BYTES", "lots"),
    ("INFERCACHE_HOT_MAX_BYTES", "1TB"),
    ("INFERCACHE_HOT_MAX_BYTES", "-1"),
    ("INFERCACHE_HOT_MAX_ENTRIES", "-1"),
    ("INFERCACHE_EMBEDDED_MAX_BYTES", "1.5GiB"),
    ("INFERCACHE_EMBEDDED_MAX_ENTRIES", "0"),
    ("INFERCACHE_MAX_PAYLOAD_BYTES", "4 MiBs"),
    ("INFERCACHE_MAX_INPUT_BYTES", ""),
    ("INFERCACHE_MAX_BATCH", "0"),
    ("INFERCACHE_DEFAULT_TTL_S", "0"),
    ("INFERCACHE_MAX_TTL_S", "forever"),
    ("INFERCACHE_TENANT_MAX_TTL_S", "acme"),
    ("INFERCACHE_TENANT_MAX_TTL_S", "acme=0"),
    ("INFERCACHE_TENANT_MAX_TTL_S", "=60"),
    ("INFERCACHE_GRACE_PERIOD_S", "0"),
    ("INFERCACHE_LOG_LEVEL", "verbose"),
    ("INFERCACHE_UVLOOP", "maybe"),
]


@pytest.mark.parametrize(("env", "value"), BAD_VALUES)
def test_bad_environment_value_names_the_variable(env: str, value: str) -> None:
    """An invalid INFERCACHE_* value stops the load with a message naming that variable."""
    with pytest.raises(ConfigError, match=re.escape(env)):
        load_config({env: value})


FREE_TEXT_SETTINGS = {
    "redis_key_prefix",
    "admin_tokens_file",
    "lease_secret",
    "model_path",
    "fingerprint_cache_file",
    "policy_file",  # a path; its content is validated when the server loads it
    "serving_config",  # a path; its content is validated when the pod is fingerprinted
    "gateway_keys_file",  # a path; its content is validated when the gateway starts
    "gateway_upstream_api_key",  # a bearer token, passed on as it is
    # Paths, read when the sidecar is built (fleet secrets) or the client is made.
    "fleet_secret_file",
    "fleet_previous_secret_file",
    "redis_password_file",
    "redis_tls_ca_file",
    "redis_tls_cert_file",
    "redis_tls_key_file",
    # Paths, checked against each other (and read when the admin listener starts).
    "admin_tls_cert_file",
    "admin_tls_key_file",
    "admin_tls_client_ca_file",
}


def test_every_setting_rejects_garbage_naming_its_variable() -> None:
    """Every setting that is not free text refuses garbage with an error naming its variable."""
    garbage = "%%not a valid value%%"
    for s in SETTINGS:
        if s.name in FREE_TEXT_SETTINGS:
            continue
        with pytest.raises(ConfigError, match=re.escape(s.env)):
            load_config({s.env: garbage})


@pytest.mark.parametrize(
    ("env", "value", "message"),
    [
        ("INFERCACHE_LOOKUP_TIMEOUT_MS", "fast", "expected a positive integer, got 'fast'"),
        ("INFERCACHE_HOT_MAX_ENTRIES", "-1", "expected an integer >= 0, got '-1'"),
        ("INFERCACHE_HIT_SKETCH_SIZE", "many", "expected an integer >= 0, got 'many'"),
        ("INFERCACHE_KV_DEVICE", "gpu", "expected cpu, cuda or cuda:N, got 'gpu'"),
        ("INFERCACHE_HOT_MAX_BYTES", "1TB", "expected a size such as 268435456 or 256MiB"),
        ("INFERCACHE_REDIS_URL", "http://r:6379", "expected redis://, rediss:// or unix://"),
        ("INFERCACHE_LEASE_SECRET", "short", "must be at least 16 characters"),
    ],
)
def test_bad_value_message_says_what_was_expected(env: str, value: str, message: str) -> None:
    """The error is `VARIABLE: what was expected, got what`, never a bare parser message."""
    with pytest.raises(ConfigError) as err:
        load_config({env: value})
    assert str(err.value).startswith(f"{env}: {message}")


def test_bad_flag_value_names_the_flag() -> None:
    """An invalid override names the flag it came from."""
    with pytest.raises(ConfigError, match="--max-batch"):
        load_config({}, {"max_batch": "many"})


def test_default_ttl_above_max_ttl_is_refused() -> None:
    """A default TTL above the maximum names both variables."""
    with pytest.raises(ConfigError) as err:
        load_config({"INFERCACHE_DEFAULT_TTL_S": "100", "INFERCACHE_MAX_TTL_S": "10"})
    assert "INFERCACHE_DEFAULT_TTL_S" in str(err.value)
    assert "INFERCACHE_MAX_TTL_S" in str(err.value)


def _readme_settings() -> dict[str, tuple[str, str, str]]:
    """README configuration table rows: variable -> (flag, default, meaning)."""
    rows: dict[str, tuple[str, str, str]] = {}
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        m = re.fullmatch(r"\|\s*`(INFERCACHE_\w+)`\s*\|(.*)\|\s*", line)
        if not m:
            continue
        flag, default, meaning = (c.strip() for c in m.group(2).split("|"))
        assert m.group(1) not in rows, f"{m.group(1)} listed twice"
        rows[m.group(1)] = (flag.strip("`"), default, meaning)
    return rows


def test_readme_lists_every_setting_with_its_flag_and_default() -> None:
    """README's configuration table has one row per setting with the right flag and default."""
    rows = _readme_settings()
    assert sorted(rows) == sorted(s.env for s in SETTINGS)
    for s in SETTINGS:
        flag, default, meaning = rows[s.env]
        assert flag == s.flag, s.env
        assert default == (f"`{s.default}`" if s.default else "(empty)"), s.env
        assert meaning == s.help, s.env


def test_readme_table_is_the_generated_one() -> None:
    """The block between README's config-table markers is byte for byte what the settings'
    declarations generate (`make config-table` rewrites it)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert spliced_block(readme) == markdown_table(), "stale: run `make config-table`"
    assert splice(readme) == readme


def test_gen_config_table_check_catches_a_stale_table(tmp_path: Path) -> None:
    """scripts/gen_config_table.py --check passes on README and fails on an edited table;
    without --check it regenerates the table."""
    script = [sys.executable, str(ROOT / "scripts" / "gen_config_table.py")]
    assert subprocess.run([*script, "--check"], capture_output=True).returncode == 0
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    stale = tmp_path / "README.md"
    stale.write_text(readme.replace("Hot tier byte budget", "Hot tier budget"), encoding="utf-8")
    assert subprocess.run([*script, "--check", str(stale)], capture_output=True).returncode == 1
    assert subprocess.run([*script, str(stale)], capture_output=True).returncode == 0
    assert stale.read_text(encoding="utf-8") == readme


def test_python_m_sidecar_config_prints_the_table() -> None:
    """`python -m sidecar.config --markdown` prints the generated table."""
    out = subprocess.run(
        [sys.executable, "-m", "sidecar.config", "--markdown"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == markdown_table()


def test_each_row_flag_and_variable_come_from_the_declaration() -> None:
    """A setting's variable, flag, table row and --help text are all generated from its one
    setting() declaration: its name (section PREFIX plus field, or name=), default and help."""
    parser: Any = build_parser()
    (subcommands,) = (a for a in parser._actions if a.dest == "command")
    helps = {
        a.option_strings[0]: a.help
        for a in subcommands.choices["serve"]._actions
        if a.option_strings
    }
    for name, section in SECTIONS:
        prefix = section.PREFIX
        declared = {f.name: f for f in dataclasses.fields(section)}
        for s in (s for s in SETTINGS if s.section == name):
            f: Any = declared[s.field]
            explicit = f.metadata["infercache.setting"].name
            assert s.name == (explicit or prefix + s.field), s.name
            assert s.env == "INFERCACHE_" + s.name.upper()
            assert s.flag == "--" + s.name.replace("_", "-")
            default = f.default_factory() if callable(f.default_factory) else f.default
            if s.name != "fingerprint_cache_file":
                assert s.parse(s.default) == default, f"{s.env}: default does not round-trip"
            shown = f"`{s.default}`" if s.default else "(empty)"
            assert row(s) == f"| `{s.env}` | `{s.flag}` | {shown} | {s.help} |\n"
            if s.is_switch:  # --flag / --no-flag
                off = f"--no-{s.flag[2:]}"
                assert helps[s.flag] == (
                    f"{s.help} ({off} to turn off; env {s.env}, default {s.default})"
                )
                assert off in helps
            else:
                assert helps[s.flag] == f"{s.help} (env {s.env}, default {s.default!r})"


HISTORICAL_VARIABLES = [
    "LISTEN",
    "REDIS_URL",
    "REDIS_KEY_PREFIX",
    "LOOKUP_TIMEOUT_MS",
    "WRITE_TIMEOUT_MS",
    "HOT_MAX_BYTES",
    "HOT_MAX_ENTRIES",
    "EMBEDDED_MAX_BYTES",
    "EMBEDDED_MAX_ENTRIES",
    "MAX_PAYLOAD_BYTES",
    "MAX_INPUT_BYTES",
    "MAX_BATCH",
    "MAX_CHUNKS",
    "STREAM_IDLE_TIMEOUT_MS",
    "STREAM_BUFFER_MAX_BYTES",
    "REPLAY_MAX_GAP_MS",
    "EVICT_REJECTED",
    "OUTCOME_REASONS",
    "SERVING_CONFIG",
    "REPLAY_MAX_DURATION_MS",
    "DEFAULT_TTL_S",
    "MAX_TTL_S",
    "TENANT_MAX_TTL_S",
    "GRACE_PERIOD_S",
    "ADMIN_LISTEN",
    "ADMIN_TOKENS",
    "ADMIN_TOKENS_FILE",
    "LEASE_SECRET",
    "LEASE_TTL_S",
    "ALLOW_UNLEASED_STORE",
    "UNLEASED_WINDOW_S",
    "MAX_WAIT_MS",
    "FRESHNESS_BOUND_MS",
    "RECLAIM_KEYS_PER_S",
    # Added after the sections (issue 13, durable invalidation): not historical, new.
    "INVALIDATE_WAIT_REPLICAS",
    "INVALIDATE_WAIT_AOF",
    "INVALIDATE_WAIT_TIMEOUT_MS",
    "MODEL_PATH",
    "ADAPTERS",
    "FINGERPRINT_MODE",
    "FINGERPRINT_CACHE_FILE",
    "ALLOW_FOREIGN_MODEL_STORE",
    "MODEL_SERVER_URL",
    "MODEL_SERVER_MODEL",
    "PREWARM_CONCURRENCY",
    "PREWARM_TIMEOUT_S",
    "PREWARM_MAX_REQUESTS",
    "PREWARM_MAX_MESSAGE_BYTES",
    "PREWARM_PAYLOAD",
    "HIT_SKETCH_SIZE",
    "HIT_MERGE_INTERVAL_MS",
    "HIT_RECORD_MAX_PER_VERSION",
    "HIT_RECORD_TTL_S",
    "POLICY_FILE",
    "POLICY_POLL_MS",
    "KV_ENABLED",
    "KV_DEVICE",
    "KV_POOL_BYTES",
    "KV_SLOT_BYTES",
    "KV_SHM_DIR",
    "KV_PROMOTE_TIMEOUT_MS",
    "KV_WARM_TTL_S",
    "KV_LEASE_TTL_MS",
    "KV_MAX_LEASE_TTL_MS",
    "KV_MAX_CHAIN_BLOCKS",
    "LOG_LEVEL",
    "LOG_FORMAT",
    "METRICS_LISTEN",
    "METRICS_MAX_MODEL_VERSIONS",
    "TELEMETRY_TENANTS_IN_CLEAR",
    "UVLOOP",
    # Added since the sections refactor (new settings, not renames):
    "HEALTH_LISTEN",
    "LEASE_MAX_WAITERS",
    "LOG_REPEAT_INTERVAL_S",
    # Issue 15 item 4 (KV attachment liveness): new settings.
    "KV_ATTACHMENT_TTL_MS",
    "KV_MAX_ATTACHMENTS",
    # Issue 28 item 1 (the sidecar's KV event publisher): new settings.
    "KV_EVENTS_ENDPOINT",
    "KV_EVENTS_REPLAY_ENDPOINT",
    # Issue 25 item 5 (the KV pool's trust boundary): new settings.
    "KV_TRUST_DOMAINS",
    "KV_VERIFY_HITS",
    # The OpenAI gateway (issue 16):
    "GATEWAY_LISTEN",
    "GATEWAY_KEYS_FILE",
    "GATEWAY_KEYS_POLL_MS",
    "GATEWAY_TENANT_HEADER",
    "GATEWAY_DEFAULT_PROMPT_VERSION",
    "GATEWAY_MAX_BODY_BYTES",
    "GATEWAY_BODY_TIMEOUT_S",
    "GATEWAY_MAX_HEADER_BYTES",
    "GATEWAY_WAIT_MS",
    "GATEWAY_UPSTREAM_TIMEOUT_S",
    "GATEWAY_UPSTREAM_MAX_CONNECTIONS",
    "GATEWAY_UPSTREAM_API_KEY",
    "GATEWAY_REPLAY_PACE",
    # Issue 13 item 4: the fingerprint re-checked while serving (new).
    "MODEL_RECHECK_INTERVAL_S",
    # Issue 18 item 3: Redis ACL users and TLS (new).
    "REDIS_PASSWORD_FILE",
    "REDIS_TLS_CA_FILE",
    "REDIS_TLS_CERT_FILE",
    "REDIS_TLS_KEY_FILE",
    "REDIS_TLS_VERIFY_HOSTNAME",
    # Issue 25 item 2: the fleet secret that authenticates the shared store (new).
    "FLEET_SECRET_FILE",
    "FLEET_PREVIOUS_SECRET_FILE",
    "INSECURE_DEV_NO_FLEET_SECRET",
    "MIN_EPOCH",
    # Added with the admin plane's TLS (issue 25).
    "ADMIN_TLS_CERT_FILE",
    "ADMIN_TLS_KEY_FILE",
    "ADMIN_TLS_CLIENT_CA_FILE",
    # Issue 26 item 1: a single-flight hold lapses unless its holder renews it (new).
    "LEASE_HOLD_TTL_MS",
    # Issue 29: shadow verification of hits (new).
    "VERIFY_RATE",
    "VERIFY_BASELINE_RATE",
    "VERIFY_CONFIRM_RATE",
    "VERIFY_BUDGET",
    "VERIFY_FALSE_ALARM",
    "VERIFY_MAX_CONCURRENCY",
    "VERIFY_MAX_PER_S",
    "VERIFY_BUSY_CALLS",
    "VERIFY_MAX_SCOPES",
    "VERIFY_DATA_PLANE",
]


def test_variable_names_are_the_historical_ones() -> None:
    """Sections did not rename anything: the variables (and so the flags) operators set are
    exactly the ones of the flat configuration, each once."""
    assert sorted(s.env for s in SETTINGS) == sorted(
        "INFERCACHE_" + v for v in HISTORICAL_VARIABLES
    )
    assert len({s.name for s in SETTINGS}) == len(SETTINGS)


def test_a_section_field_without_setting_is_refused() -> None:
    """Every section field must be declared with setting(): a bare field would have no
    variable, flag or row, so walking such a section fails."""

    @dataclasses.dataclass(frozen=True, slots=True)
    class Bare:
        declared: int = setting(1, "declared", parse_bytes)
        bare: int = 2

    with pytest.raises(TypeError, match=r"Bare\.bare"):
        list(section_settings("bare", Bare))


def test_a_flag_value_error_names_the_flag_for_every_setting() -> None:
    """Every setting that is not free text refuses garbage given as a flag, naming the flag."""
    garbage = "%%not a valid value%%"
    for s in SETTINGS:
        if s.name in FREE_TEXT_SETTINGS:
            continue
        with pytest.raises(ConfigError, match=re.escape(s.flag)):
            load_config({}, {s.name: garbage})


def test_an_unknown_override_is_refused() -> None:
    """A misspelt override (a test's or an embedder's) is an error, not silently ignored."""
    with pytest.raises(ConfigError, match="max_bacth"):
        load_config({}, {"max_bacth": "5"})


def test_config_without_arguments_is_the_defaults() -> None:
    """Config() holds the declared defaults: load_config({}) differs only in what it derives
    from the environment (the fingerprint memo file)."""
    loaded = load_config({})
    identity = dataclasses.replace(loaded.identity, fingerprint_cache_file=None)
    assert dataclasses.replace(loaded, identity=identity) == Config()


def test_sections_build_the_values_their_consumers_take() -> None:
    """Each consumer's settings value is built from the sections by one function, field for
    field (non-default values, so a mapping that fell back to a default would show)."""
    config = load_config(
        {},
        {
            "max_payload_bytes": "1MiB",
            "max_chunks": "77",
            "stream_idle_timeout_ms": "1500",
            "stream_buffer_max_bytes": "3MiB",
            "replay_max_gap_ms": "40",
            "evict_rejected": "false",
            "default_ttl_s": "5",
            "max_ttl_s": "50",
            "tenant_max_ttl_s": "acme=7",
            "model_server_url": "http://model:9000/",
            "model_server_model": "org/m",
            "prewarm_concurrency": "3",
            "prewarm_max_requests": "9",
            "prewarm_payload": "openai_json",
            "kv_pool_bytes": "2MiB",
            "kv_slot_bytes": "4KiB",
            "kv_promote_timeout_ms": "11",
            "kv_warm_ttl_s": "12",
            "kv_lease_ttl_ms": "13",
            "kv_max_lease_ttl_ms": "14",
            "kv_max_chain_blocks": "15",
        },
    )
    streams = StreamSettings.from_config(config)
    assert streams.limits == StreamLimits(1024**2, 77, 1.5)
    assert (streams.buffer_max_bytes, streams.replay_max_gap_ms, streams.evict_rejected) == (
        3 * 1024**2,
        40,
        False,
    )
    assert TtlPolicy.from_config(config.ttl) == TtlPolicy(5, 50, {"acme": 7})
    assert PolicyBounds.from_config(config) == PolicyBounds(max_ttl_s=50, max_entry_bytes=1024**2)
    assert PrewarmSettings.from_config(config.prewarm) == PrewarmSettings(
        "org/m", "http://model:9000", 3, 9, PayloadFormat.OPENAI_JSON
    )
    kv = config.kv.to_settings()
    assert (kv.pool_bytes, kv.slot_bytes, kv.promote_timeout_ms, kv.warm_ttl_s) == (
        2 * 1024**2,
        4096,
        11,
        12,
    )
    assert (kv.default_lease_ms, kv.max_lease_ms, kv.max_chain_blocks) == (13, 14, 15)


def test_max_chunks_default_is_the_documented_one() -> None:
    """The one chunk limit (Store chunk boundaries and StoreStream chunks alike) is the
    documented 32768: the result cache's own 65536 default is gone."""
    config = load_config({})
    assert config.limits.max_chunks == 32768
    assert StreamSettings.from_config(config).limits.max_chunks == 32768
    assert _readme_settings()["INFERCACHE_MAX_CHUNKS"][1] == "`32768`"
    assert "max_chunks" not in _defaults_of(ResultCache.__init__)


def _defaults_of(fn: Any) -> set[str]:
    return {n for n, p in inspect.signature(fn).parameters.items() if p.default is not p.empty}


def test_only_config_reads_the_environment() -> None:
    """No sidecar module other than the command-line entry points reads os.environ."""
    offenders = []
    for path in sorted((ROOT / "sidecar").rglob("*.py")):
        if path.parent.name == "cli":
            continue  # entry points: `serve` hands os.environ to load_config, once
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_component_keyword_defaults_are_the_declared_ones() -> None:
    """Components built without the composition root (tests, benches, embedders) default to
    the declared settings, not to a second copy of their values."""
    d = Config()
    redis_timeouts = (d.redis.lookup_timeout_ms / 1000, d.redis.write_timeout_ms / 1000)
    warm = _keyword_defaults(RedisWarmTier.__init__)
    assert (warm["read_timeout_s"], warm["write_timeout_s"]) == redis_timeouts
    control = _keyword_defaults(RedisControlStore.__init__)
    assert (control["lookup_timeout_s"], control["timeout_s"]) == redis_timeouts
    assert warm["key_prefix"] == control["key_prefix"] == d.redis.key_prefix
    assert RedisKeys().prefix == d.redis.key_prefix
    freshness_bound_s = _keyword_defaults(Freshness.__init__)["bound_s"]
    assert freshness_bound_s == d.invalidation.freshness_bound_ms / 1000
    keys_per_s = _keyword_defaults(Reclaimer.__init__)["keys_per_s"]
    assert keys_per_s == d.invalidation.reclaim_keys_per_s
    max_versions = _keyword_defaults(CacheStats.__init__)["max_versions"]
    assert max_versions == d.telemetry.metrics_max_model_versions


def _keyword_defaults(fn: Any) -> dict[str, Any]:
    return {
        n: p.default
        for n, p in inspect.signature(fn).parameters.items()
        if p.default is not p.empty
    }


def test_secrets_stay_out_of_the_repr() -> None:
    """A Config that ends up in a log or a traceback shows no admin token or lease secret."""
    token, secret = "tok-" + "x" * 20, "lease-" + "y" * 20
    config = load_config(
        {"INFERCACHE_ADMIN_TOKENS": f"deploy={token}", "INFERCACHE_LEASE_SECRET": secret}
    )
    assert config.admin.tokens == {"deploy": token}
    assert config.lease.secret == secret
    assert token not in repr(config)
    assert secret not in repr(config)
    assert "ttl_s=60" in repr(config.lease)


def test_kv_event_endpoints_are_zmq_endpoints_and_replay_needs_the_publisher() -> None:
    """Issue 28: the sidecar's KV event publisher is off by default, takes tcp:// or ipc://
    endpoints, and a replay endpoint alone (nothing to replay) is refused."""
    assert (Config().kv.events_endpoint, Config().kv.events_replay_endpoint) == ("", "")
    c = load_config({"INFERCACHE_KV_EVENTS_ENDPOINT": "tcp://*:5560"})
    assert c.kv.events_endpoint == "tcp://*:5560"
    c = load_config(
        {},
        {
            "kv_events_endpoint": "ipc:///tmp/ev",
            "kv_events_replay_endpoint": "tcp://127.0.0.1:5561",
        },
    )
    assert c.kv.events_replay_endpoint == "tcp://127.0.0.1:5561"
    for bad in ("localhost:5560", "tcp://*:99999", "tcp://host", "http://h:1"):
        with pytest.raises(ConfigError, match="INFERCACHE_KV_EVENTS_ENDPOINT"):
            load_config({"INFERCACHE_KV_EVENTS_ENDPOINT": bad})
    with pytest.raises(ConfigError, match="REPLAY_ENDPOINT needs"):
        load_config({"INFERCACHE_KV_EVENTS_REPLAY_ENDPOINT": "tcp://*:5561"})

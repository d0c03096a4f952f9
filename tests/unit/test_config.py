"""Configuration: defaults, INFERCACHE_* parsing, flag precedence, loud errors, docs in sync."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from sidecar.cli.main import build_parser
from sidecar.config import SETTINGS, Config, ConfigError, load_config, parse_bytes
from sidecar.fingerprint import default_cache_file

ROOT = Path(__file__).resolve().parents[2]
BY_NAME = {s.name: s for s in SETTINGS}


def test_settings_match_the_config_fields() -> None:
    """SETTINGS declares exactly the Config fields, in the same order (plus the collected
    OTEL_* variables, which are OpenTelemetry's, not settings of ours)."""
    fields = [f.name for f in dataclasses.fields(Config)]
    assert fields[-1] == "otel_env"
    assert [s.name for s in SETTINGS] == fields[:-1]


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
        assert getattr(config, s.name) == s.parse(s.default), s.name
    assert config.fingerprint_cache_file == str(default_cache_file({}))
    assert load_config({"XDG_CACHE_HOME": "/xdg"}).fingerprint_cache_file == (
        "/xdg/infercache/fingerprints.json"
    )
    assert config.listen == ("127.0.0.1:50051",)
    assert config.redis_url is None
    assert config.redis_key_prefix == "ic:v1:"
    assert config.lookup_timeout_ms == 50
    assert config.write_timeout_ms == 500
    assert config.hot_max_bytes == 256 * 1024**2
    assert config.hot_max_entries == 100_000
    assert config.embedded_max_bytes == 1024**3
    assert config.max_payload_bytes == 4 * 1024**2
    assert config.max_input_bytes == 8 * 1024**2
    assert config.max_batch == 1024
    assert (config.default_ttl_s, config.max_ttl_s) == (3600, 86400)
    assert config.tenant_max_ttl_s == {}
    assert config.grace_period_s == 10
    assert config.log_level == "info"
    assert config.uvloop is True


def test_config_is_frozen() -> None:
    """A Config cannot be changed after it is read."""
    config = load_config({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_batch = 1  # type: ignore[misc]


def test_environment_is_parsed() -> None:
    """INFERCACHE_* values are parsed into typed fields."""
    config = load_config(
        {
            "INFERCACHE_LISTEN": "127.0.0.1:7000, unix:/tmp/ic.sock,[::1]:7001",
            "INFERCACHE_REDIS_URL": "redis://10.0.0.5:6380/2",
            "INFERCACHE_REDIS_KEY_PREFIX": "blue:",
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
    assert config.listen == ("127.0.0.1:7000", "unix:/tmp/ic.sock", "[::1]:7001")
    assert config.redis_url == "redis://10.0.0.5:6380/2"
    assert config.redis_key_prefix == "blue:"
    assert config.lookup_timeout_ms == 20
    assert config.hot_max_bytes == 64 * 1024**2
    assert config.hot_max_entries == 0
    assert config.embedded_max_bytes == 2 * 10**9
    assert config.max_payload_bytes == 1048576
    assert config.max_batch == 16
    assert (config.default_ttl_s, config.max_ttl_s) == (60, 600)
    assert config.tenant_max_ttl_s == {"acme": 30, "beta": 90}
    assert config.log_level == "warning"
    assert config.uvloop is False


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
    assert config.max_batch == 7
    assert config.log_level == "debug"


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
    "redis_url",  # validated as a whole in load_config (see test below)
    "redis_key_prefix",
    "admin_tokens_file",
    "lease_secret",
    "model_path",
    "fingerprint_cache_file",
    "policy_file",  # a path; its content is validated when the server loads it
}


def test_every_setting_rejects_garbage_naming_its_variable() -> None:
    """Every setting that is not free text refuses garbage with an error naming its variable."""
    garbage = "%%not a valid value%%"
    for s in SETTINGS:
        if s.name in FREE_TEXT_SETTINGS:
            continue
        with pytest.raises(ConfigError, match=re.escape(s.env)):
            load_config({s.env: garbage})


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

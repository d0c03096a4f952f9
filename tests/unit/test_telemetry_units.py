"""Pure parts of telemetry: version-label cap, counters, telemetry config rules, log
processors, the stats rendering."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request

import pytest
import structlog
from rich.console import Console

from sidecar.api.admin_codec import stats_to_pb
from sidecar.api.observe import TenantLabel
from sidecar.cli.stats_view import stats_dict, stats_table
from sidecar.config import ConfigError
from sidecar.observability.logs import configure_logging, drop_prompt_fields
from sidecar.observability.stats import OTHER_VERSION, CacheStats, DurationHistogram
from sidecar.observability.telemetry import configure_telemetry
from sidecar.observability.usage import TierUsage


def test_versions_past_the_cap_are_counted_as_other() -> None:
    """The first max_versions admitted model versions get a label each; later ones, and
    versions never admitted, share _other."""
    stats = CacheStats(max_versions=2)
    for v in ("a", "b", "c"):
        stats.admit(v)
    for v in ("a", "b", "c", "d", "a"):
        stats.count_lookup(v, "miss")
    assert stats.total("lookups", version="a") == 2
    assert stats.total("lookups", version="b") == 1
    assert stats.total("lookups", version=OTHER_VERSION) == 2
    assert stats.versions() == sorted(["a", "b", OTHER_VERSION])


def test_snapshot_sums_versions_into_dotted_names() -> None:
    """GetStats' flat counters sum over versions."""
    stats = CacheStats()
    stats.count_lookup("a", "hit", "hot")
    stats.count_lookup("b", "hit", "hot")
    stats.count_store("a", "refused", "stale_lease")
    stats.count_downstream("b", "rejected", "toxicity")
    snap = stats.snapshot()
    assert snap["lookups.hit.hot"] == 2
    assert snap["stores.refused.stale_lease"] == 1
    assert snap["downstream.rejected.toxicity"] == 1


def test_duration_histogram_buckets() -> None:
    """An observation lands in the first bucket whose bound is >= it; the rest in +Inf."""
    h = DurationHistogram()
    h.observe(0.0001)
    h.observe(0.0003)
    h.observe(100.0)
    assert h.buckets[0] == 1
    assert h.buckets[2] == 1
    assert h.buckets[-1] == 1
    assert h.count == 3


def test_stats_message_and_rendering() -> None:
    """Counters become per-version messages; --json and the table show them."""
    stats = CacheStats()
    stats.admit("fp-a")
    stats.count_lookup("fp-a", "hit", "warm")
    stats.count_lookup("fp-a", "miss")
    stats.count_bypass("fp-a", "side_effects")
    stats.count_hit_saving("fp-a", "warm", 1500, 3, 4)
    resp = stats_to_pb(stats, [TierUsage("hot", 2048, 2), TierUsage("redis", -1, 10)])
    (v,) = resp.versions
    assert dict(v.lookups) == {"hit.warm": 1, "miss": 1}
    assert v.saved_latency_ms == 1500
    d = stats_dict(resp)
    assert d["versions"]["fp-a"]["bypasses"] == {"side_effects": 1}
    assert d["versions"]["fp-a"]["saved_completion_tokens"] == 4
    json.dumps(d)
    out = io.StringIO()
    Console(file=out, width=160).print(stats_table(resp, "pod-1"))
    text = out.getvalue()
    assert "fp-a" in text
    assert "50.0%" in text
    assert "side_effects" in text


def test_tenant_label_is_a_stable_hash_unless_in_clear() -> None:
    """Hashed tenants are 16 hex characters, equal for equal tenants, never the name."""
    hashed = TenantLabel(in_clear=False)
    assert hashed("acme") == hashed("acme")
    assert hashed("acme") != hashed("other")
    assert "acme" not in hashed("acme")
    assert TenantLabel(in_clear=True)("acme") == "acme"


def test_no_exporter_configured_means_no_tracing() -> None:
    """Without OTEL_TRACES_EXPORTER or an OTLP endpoint the sidecar does not trace."""
    setup = configure_telemetry({}, metrics_listen="", tenants_in_clear=False)
    try:
        assert not setup.telemetry.tracing
        assert setup.metrics_port is None
    finally:
        setup.shutdown()


def test_endpoint_turns_tracing_on_and_sdk_disabled_turns_it_off() -> None:
    """An OTLP endpoint enables traces; OTEL_SDK_DISABLED=true wins."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_METRICS_EXPORTER": "none"}
    setup = configure_telemetry(env, metrics_listen="", tenants_in_clear=False)
    try:
        assert setup.telemetry.tracing
    finally:
        setup.shutdown()
    off = configure_telemetry(
        env | {"OTEL_SDK_DISABLED": "true"}, metrics_listen="", tenants_in_clear=False
    )
    assert not off.telemetry.tracing
    off.shutdown()


@pytest.mark.parametrize(
    "env",
    [
        {"OTEL_TRACES_EXPORTER": "zipkin"},
        {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"},
    ],
)
def test_unsupported_exporter_settings_stop_the_start(env: dict[str, str]) -> None:
    """An exporter or protocol the sidecar cannot honour is a configuration error."""
    with pytest.raises(ConfigError, match="OTEL_"):
        configure_telemetry(env, metrics_listen="", tenants_in_clear=False)


def test_metrics_endpoint_serves_and_stops() -> None:
    """/metrics on a kernel-picked port answers, and shutdown releases it."""
    setup = configure_telemetry({}, metrics_listen="127.0.0.1:0", tenants_in_clear=False)
    port = setup.metrics_port
    assert port
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            assert resp.status == 200
    finally:
        setup.shutdown()
    with pytest.raises(urllib.error.URLError, match="refused"):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_drop_prompt_fields() -> None:
    """Fields named like prompt or answer text, and bytes values, are removed."""
    event = {"event": "x", "text": "secret", "Prompt": "p", "digest": "ab", "blob": b"\x00"}
    assert drop_prompt_fields(None, "info", event) == {"event": "x", "digest": "ab"}


def test_stdlib_logging_is_rendered_as_json_without_prompt_fields() -> None:
    """A library logging through `logging` (e.g. an OTLP exporter) gets a JSON line too."""
    import logging

    out = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    configure_logging("info", "json", stream=out)
    try:
        logging.getLogger("opentelemetry.exporter").warning(
            "export failed", extra={"prompt": "secret words"}
        )
    finally:
        structlog.reset_defaults()
        root.handlers, level = saved
        root.setLevel(level)
    event = json.loads(out.getvalue().strip())
    assert event["event"] == "export failed"
    assert event["level"] == "warning"
    assert event["logger"] == "opentelemetry.exporter"
    assert "secret words" not in out.getvalue()


@pytest.mark.parametrize(("fmt", "is_json"), [("json", True), ("console", False)])
def test_log_formats(fmt: str, is_json: bool) -> None:
    """json renders JSON lines; console renders key=value text."""
    import logging

    out = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    configure_logging("info", fmt, stream=out)
    try:
        structlog.get_logger("t").info("hello", answer="dropped", n=1)
    finally:
        structlog.reset_defaults()
        root.handlers, level = saved
        root.setLevel(level)
    line = out.getvalue().strip()
    if is_json:
        assert json.loads(line)["n"] == 1
    else:
        assert "hello" in line
        assert "n=1" in line
    assert "dropped" not in line

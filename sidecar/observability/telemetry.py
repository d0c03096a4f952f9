"""OpenTelemetry set-up at the edge: tracer and meter providers, exporters, /metrics.

Only the entry point (server start) calls `configure_telemetry`; everything else
receives a `Telemetry` value holding the providers (API types), so tests pass
their own providers (in-memory exporters) instead of touching globals.

What is configured, from the standard OTEL_* variables (the SDK and exporters
read the rest themselves: OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
OTEL_TRACES_SAMPLER(_ARG), OTEL_EXPORTER_OTLP_*, OTEL_METRIC_EXPORT_INTERVAL):

- OTEL_SDK_DISABLED=true: no traces, no OTLP metrics (/metrics still serves).
- Traces are exported when OTEL_TRACES_EXPORTER names exporters (otlp, console),
  or, when it is unset, when an OTLP endpoint variable is set. Unlike the spec's
  default of "otlp", an unconfigured sidecar does not trace: every RPC traced costs
  about a sixth of a hot hit's server time (docs/benchmarks.md) and would be sent
  to a collector that is not there.
- Metrics go to OTLP under the same rule (OTEL_METRICS_EXPORTER), and are always
  scrapeable at INFERCACHE_METRICS_LISTEN (/metrics) unless that is empty.
- OTEL_EXPORTER_OTLP_PROTOCOL (or the per-signal variable): http/protobuf (the
  spec's default) or grpc; both encode spans with observability/otlp.py's faster
  encoder, and their batch processor takes the spans as records, built off the event
  loop (span_records.py). The exporters are the optional extra `otlp`.
- On stop the exporters get FLUSH_BUDGET_S to send what is pending; then their
  retries are cut short, so that a collector that is not there does not hold the
  process past its grace period (the SDK alone retries for up to 10 s per signal).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from opentelemetry import metrics, trace
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.trace import NoOpTracerProvider

from sidecar import __version__
from sidecar.config import ConfigError

if TYPE_CHECKING:
    from sidecar.observability.spans import SpanRecorder

log = structlog.get_logger("infercache.telemetry")

SERVICE_NAME = "infercache"
INSTRUMENTATION_SCOPE = "infercache"
FLUSH_BUDGET_S = 0.5
"""How long stopping waits for the exporters' last flush before cutting their retries."""
_CUT_WAIT_S = 0.2
"""How long it then waits for the providers to notice (an export already on the wire)."""


@dataclass(frozen=True, slots=True)
class Telemetry:
    """What server code receives: the providers, and how tenants appear in spans.

    `tracing` is False when the tracer provider records nothing: the api layer then
    skips span work altogether (one boolean test per RPC).
    """

    tracer_provider: trace.TracerProvider = field(default_factory=NoOpTracerProvider)
    meter_provider: metrics.MeterProvider = field(default_factory=NoOpMeterProvider)
    tenants_in_clear: bool = False
    tracing: bool = False

    @property
    def tracer(self) -> trace.Tracer:
        """The sidecar's tracer."""
        return self.tracer_provider.get_tracer(INSTRUMENTATION_SCOPE, __version__)

    def span_recorder(self) -> SpanRecorder | None:
        """What records the sidecar's spans; None when the SDK is disabled (a no-op tracer).

        Raises TypeError for a provider that is neither the SDK's nor a no-op one: spans are
        built for the SDK's span processors (observability/spans.py).
        """
        from opentelemetry.sdk.trace import Tracer as SdkTracer
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        from sidecar.observability.spans import SpanRecorder

        tracer = self.tracer
        if isinstance(tracer, trace.NoOpTracer):
            return None
        if not isinstance(tracer, SdkTracer):
            raise TypeError(f"tracing needs the OpenTelemetry SDK's TracerProvider, got {tracer!r}")
        return SpanRecorder(tracer, InstrumentationScope(INSTRUMENTATION_SCOPE, __version__))

    @property
    def meter(self) -> metrics.Meter:
        """The sidecar's meter."""
        return self.meter_provider.get_meter(INSTRUMENTATION_SCOPE, __version__)


@dataclass(slots=True)
class TelemetrySetup:
    """What configure_telemetry built: the Telemetry value and what must be shut down."""

    telemetry: Telemetry
    metrics_port: int | None = None
    """The bound port of /metrics (None when disabled)."""
    registry: Any = None
    """The prometheus_client CollectorRegistry behind /metrics (None when disabled)."""
    _closers: list[Callable[[], None]] = field(default_factory=list)
    _exporters: list[Any] = field(default_factory=list)
    """The OTLP/console exporters, whose shutdown() cuts their export retries short."""

    def shutdown(self, budget_s: float = FLUSH_BUDGET_S) -> None:
        """Flush exporters and stop the /metrics server, within about `budget_s`; idempotent.

        The providers shut down on a daemon thread: past the budget the exporters are
        shut down under them (their retry back-off ends at once) and, should an export
        still hang, the thread is left behind; it never holds the process's exit."""
        closers, self._closers = self._closers, []
        if not closers:
            return
        done = threading.Event()

        def close_all() -> None:
            try:
                while closers:
                    closers.pop()()
            finally:
                done.set()

        threading.Thread(target=close_all, name="telemetry-shutdown", daemon=True).start()
        if done.wait(budget_s):
            return
        for exporter in self._exporters:
            exporter.shutdown()
        if not done.wait(_CUT_WAIT_S):
            log.warning("telemetry_flush_abandoned", budget_s=budget_s)
            return
        log.warning("telemetry_flush_cut_short", budget_s=budget_s)


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() == "true"


def _exporters(env: Mapping[str, str], signal: str) -> list[str]:
    """The exporters named for a signal ("traces"/"metrics"), per the rule in the docstring."""
    named = env.get(f"OTEL_{signal.upper()}_EXPORTER")
    if named is None:
        endpoint_vars = (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT",
        )
        return ["otlp"] if any(env.get(v) for v in endpoint_vars) else []
    out = [x.strip().lower() for x in named.split(",") if x.strip()]
    # "prometheus" is served by INFERCACHE_METRICS_LISTEN; "none" means none.
    out = [x for x in out if x not in ("none", "prometheus")]
    allowed = ("otlp", "console")
    bad = [x for x in out if x not in allowed]
    if bad:
        raise ConfigError(
            f"OTEL_{signal.upper()}_EXPORTER: unsupported exporter(s) {bad}; "
            "use otlp, console or none"
        )
    return out


def _protocol(env: Mapping[str, str], signal: str) -> str:
    proto = env.get(
        f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL",
        env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
    ).strip()
    if proto not in ("grpc", "http/protobuf"):
        raise ConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL: expected grpc or http/protobuf, got {proto!r}"
        )
    return proto


def _otlp_missing(exc: ImportError) -> ConfigError:
    return ConfigError(
        f"OTLP export is configured but its exporter is not installed ({exc.name}): "
        "pip install 'infercache[otlp]'"
    )


def _span_exporter(kind: str, env: Mapping[str, str]) -> Any:
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    try:
        if _protocol(env, "traces") == "grpc":
            # The SDK's exporter with an encoder ~5x faster (observability/otlp.py).
            from sidecar.observability.otlp import GrpcSpanExporter

            return GrpcSpanExporter()
        # The SDK's http exporter, its export() encoding with the same encoder.
        from sidecar.observability.otlp_http import HttpSpanExporter
    except ImportError as exc:
        raise _otlp_missing(exc) from exc
    return HttpSpanExporter()


def _metric_exporter(kind: str, env: Mapping[str, str]) -> Any:
    if kind == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    try:
        if _protocol(env, "metrics") == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # type: ignore[assignment]
                OTLPMetricExporter,
            )
    except ImportError as exc:
        raise _otlp_missing(exc) from exc
    return OTLPMetricExporter()


def _split_hostport(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def configure_telemetry(
    otel_env: Mapping[str, str],
    *,
    metrics_listen: str,
    tenants_in_clear: bool,
) -> TelemetrySetup:
    """Build the SDK providers and exporters; start /metrics on `metrics_listen` (if set).

    Raises ConfigError for an unsupported exporter or protocol and OSError when the
    metrics address cannot be bound.
    """
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from sidecar.observability.span_records import RecordBatchProcessor

    disabled = _flag(otel_env, "OTEL_SDK_DISABLED")
    trace_kinds = [] if disabled else _exporters(otel_env, "traces")
    metric_kinds = [] if disabled else _exporters(otel_env, "metrics")
    resource = Resource.create({"service.name": SERVICE_NAME, "service.version": __version__})
    setup = TelemetrySetup(Telemetry(tenants_in_clear=tenants_in_clear))

    tracer_provider: trace.TracerProvider = NoOpTracerProvider()
    if trace_kinds:
        sdk_tracer = TracerProvider(resource=resource)  # sampler from OTEL_TRACES_SAMPLER
        for kind in trace_kinds:
            exporter = _span_exporter(kind, otel_env)
            setup._exporters.append(exporter)
            # OTLP's exporters take spans as records (observability/span_records.py).
            batch = RecordBatchProcessor if kind == "otlp" else BatchSpanProcessor
            sdk_tracer.add_span_processor(batch(exporter))
        setup._closers.append(sdk_tracer.shutdown)
        tracer_provider = sdk_tracer

    metric_exporters = [_metric_exporter(kind, otel_env) for kind in metric_kinds]
    setup._exporters.extend(metric_exporters)
    readers: list[MetricReader] = [PeriodicExportingMetricReader(e) for e in metric_exporters]
    registry = None
    if metrics_listen:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry

        # A registry of our own: several sidecars in one process (tests) never share one.
        registry = CollectorRegistry(auto_describe=True)
        readers.append(PrometheusMetricReader(registry=registry, scope_info_enabled=False))
    meter_provider: metrics.MeterProvider = NoOpMeterProvider()
    if readers:
        sdk_meter = MeterProvider(metric_readers=readers, resource=resource)
        setup._closers.append(sdk_meter.shutdown)
        meter_provider = sdk_meter
    setup.telemetry = Telemetry(
        tracer_provider, meter_provider, tenants_in_clear, tracing=bool(trace_kinds)
    )
    if registry is not None:
        setup.registry = registry
        setup.metrics_port = _serve_metrics(setup, registry, metrics_listen)
    return setup


def _serve_metrics(setup: TelemetrySetup, registry: Any, listen: str) -> int:
    """Serve the registry at http://listen/metrics from a daemon thread (not the event loop)."""
    from prometheus_client import start_http_server

    host, port = _split_hostport(listen)
    try:
        httpd, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise OSError(
            f"INFERCACHE_METRICS_LISTEN: cannot serve metrics on {listen}: {exc}"
        ) from exc

    def close() -> None:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=2)

    setup._closers.append(close)
    bound: int = httpd.server_port
    return bound

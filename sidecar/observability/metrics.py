"""Metric instruments over the plain-Python counters of sidecar/observability/stats.py.

Every instrument is observable: its callback copies counters when a reader
collects (a Prometheus scrape, an OTLP export), so serving a request costs no
OpenTelemetry call (a synchronous SDK instrument costs ~5-20 us per call with
attributes, a tenth of a hot hit). Callbacks may run on the /metrics thread;
they only copy dicts, which the GIL makes atomic.

RPC durations are a Prometheus histogram served by `RpcDurationCollector` from
the same registry as the OpenTelemetry reader (the OpenTelemetry API has no
observable histogram); OTLP metric export does not carry them, spans do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from itertools import accumulate
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from sidecar.observability.stats import DURATION_BOUNDS_S, CacheStats, RpcStats
from sidecar.observability.usage import TierUsage

PREFIX = "infercache."


UsageSource = Callable[[], Iterable[TierUsage]]


def _family(
    counter: Callable[[], list[tuple[Any, int]]], names: tuple[str, ...], scale: float = 1.0
) -> Callable[[CallbackOptions], Iterable[Observation]]:
    """A callback reporting one Counter family: key fields become attributes named `names`."""

    def callback(options: CallbackOptions) -> Iterator[Observation]:
        for key, n in counter():
            fields = key if isinstance(key, tuple) else (key,)
            attrs = {name: value or "none" for name, value in zip(names, fields, strict=True)}
            yield Observation(n * scale if scale != 1.0 else n, attrs)

    return callback


def register_metrics(meter: Meter, stats: CacheStats, usage: UsageSource) -> None:
    """Create every observable instrument on `meter`, reading `stats` and `usage` lazily."""

    def items(name: str) -> Callable[[], list[tuple[Any, int]]]:
        return lambda: list(getattr(stats, name).items())

    counters: tuple[tuple[str, str, str, tuple[str, ...], str, float], ...] = (
        ("lookups", "lookups", "Lookups by answer", ("model_version", "outcome", "tier"), "", 1.0),
        (
            "lookups.degraded",
            "degraded",
            "Lookups answered MISS because a tier failed or was too slow",
            ("model_version",),
            "",
            1.0,
        ),
        (
            "stores",
            "stores",
            "Stores by result (stored, refused, failed) and reason",
            ("model_version", "result", "reason"),
            "",
            1.0,
        ),
        (
            "entries.rejected",
            "rejected",
            "Stored values that failed verification (corrupt, foreign)",
            ("model_version", "reason"),
            "",
            1.0,
        ),
        (
            "entries.dead",
            "dead",
            "Entries found killed by a newer invalidation",
            ("model_version",),
            "",
            1.0,
        ),
        (
            "bypasses",
            "bypasses",
            "Requests the cacheability policy bypassed",
            ("model_version", "reason"),
            "",
            1.0,
        ),
        (
            "leases",
            "leases",
            "Lease and single-flight events (issued, waited, wait_hit, wait_timeout)",
            ("model_version", "event"),
            "",
            1.0,
        ),
        (
            "saved.latency",
            "saved_ms",
            "Compute latency saved by hits (the stored cost of each hit entry)",
            ("model_version", "tier"),
            "s",
            0.001,
        ),
        (
            "saved.tokens",
            "saved_tokens",
            "Tokens saved by hits (the stored cost of each hit entry)",
            ("model_version", "kind"),
            "",
            1.0,
        ),
        (
            "downstream",
            "downstream",
            "Downstream verdicts on cached answers (ReportOutcome)",
            ("model_version", "verdict", "reason"),
            "",
            1.0,
        ),
        (
            "streams",
            "streams",
            "LookupStream replays (completed, cancelled, chunks sent) and StoreStreams "
            "(committed, failed, cancelled)",
            ("model_version", "event"),
            "",
            1.0,
        ),
        (
            "invalidations",
            "invalidations",
            "Invalidations committed through this sidecar, by the selector's model version",
            ("model_version",),
            "",
            1.0,
        ),
    )
    for name, family, description, names, unit, scale in counters:
        meter.create_observable_counter(
            PREFIX + name,
            callbacks=[_family(items(family), names, scale)],
            unit=unit,
            description=description,
        )

    def warm_errors(options: CallbackOptions) -> Iterator[Observation]:
        yield Observation(stats.warm_read_failures, {"operation": "read"})
        yield Observation(stats.warm_write_failures, {"operation": "write"})

    meter.create_observable_counter(
        PREFIX + "warm.errors",
        callbacks=[warm_errors],
        description="Warm-tier operations that failed or ran past their deadline",
    )
    meter.create_observable_counter(
        PREFIX + "entries.reclaimed",
        callbacks=[lambda options: [Observation(stats.reclaimed)]],
        description="Dead entries removed by background reclaim",
    )

    def tier_bytes(options: CallbackOptions) -> Iterator[Observation]:
        for u in usage():
            if u.bytes >= 0:
                yield Observation(u.bytes, {"tier": u.name})

    def tier_entries(options: CallbackOptions) -> Iterator[Observation]:
        for u in usage():
            if u.entries >= 0:
                yield Observation(u.entries, {"tier": u.name})

    meter.create_observable_gauge(
        PREFIX + "tier.bytes", callbacks=[tier_bytes], unit="By", description="Bytes a tier holds"
    )
    meter.create_observable_gauge(
        PREFIX + "tier.entries", callbacks=[tier_entries], description="Entries a tier holds"
    )


def register_kv_metrics(meter: Meter, kv_stats: object) -> None:
    """`infercache.kv.events{event}`: every counter of the KV hot tier's stats dataclass."""
    register_event_metrics(
        meter,
        "kv",
        kv_stats,
        "KV hot tier events: lookups, hit/promoted/demoted/dropped blocks, ...",
    )


def register_event_metrics(meter: Meter, name: str, stats: object, description: str = "") -> None:
    """`infercache.<name>.events{event}`: every int counter of the dataclass `stats`
    (e.g. the identity's: changes, stale marks, re-measure failures, stale refusals)."""
    if not dataclasses.is_dataclass(stats):
        raise TypeError("stats must be a dataclass instance of counters")
    names = [f.name for f in dataclasses.fields(stats)]

    def events(options: CallbackOptions) -> Iterator[Observation]:
        for field_name in names:
            yield Observation(getattr(stats, field_name), {"event": field_name})

    meter.create_observable_counter(
        PREFIX + name + ".events",
        callbacks=[events],
        description=description or f"{name} events, by counter",
    )


class RpcDurationCollector:
    """A prometheus_client collector: `infercache_rpc_duration_seconds{rpc,code}` histogram."""

    def __init__(self, rpc_stats: RpcStats) -> None:
        self._rpc_stats = rpc_stats

    def collect(self) -> Iterator[Any]:
        """One histogram family built from RpcStats' bucket counts."""
        from prometheus_client.core import HistogramMetricFamily

        family = HistogramMetricFamily(
            "infercache_rpc_duration_seconds",
            "Server-side RPC duration by method and gRPC status code",
            labels=("rpc", "code"),
        )
        bounds = [*(repr(b) for b in DURATION_BOUNDS_S), "+Inf"]
        for (rpc, code), h in sorted(self._rpc_stats.snapshot().items()):
            cumulative = list(accumulate(h.buckets))
            family.add_metric(
                [rpc, code], list(zip(bounds, cumulative, strict=True)), sum_value=h.sum_s
            )
        yield family

    def describe(self) -> list[Any]:
        """No up-front description (collect is cheap)."""
        return []


def register_gateway_metrics(
    meter: Meter, outcomes: Callable[[], dict[str, int]], unknown_fields: Callable[[], int]
) -> None:
    """The OpenAI gateway's counters: requests by outcome, unknown body fields seen."""
    meter.create_observable_counter(
        PREFIX + "gateway.requests",
        callbacks=[lambda options: [Observation(n, {"outcome": k}) for k, n in outcomes().items()]],
        description="Gateway requests and stores by outcome (hit, miss, bypass, refresh, store_*)",
    )
    meter.create_observable_counter(
        PREFIX + "gateway.unknown_fields",
        callbacks=[lambda options: [Observation(unknown_fields())]],
        description="Request body fields the key table does not know (keyed in extra)",
    )


ScopeRows = Callable[[], Iterable[tuple[dict[str, str], float, float, float, bool]]]
"""Per verification scope: its labels, the excess estimate, lower and upper bound, and
whether it is quarantined (sidecar/verification)."""


def register_verification_metrics(
    meter: Meter, scopes: ScopeRows, checks: Callable[[], Iterable[tuple[tuple[str, ...], int]]]
) -> None:
    """Shadow verification: `infercache_verify_divergence_excess{model_version,tenant,
    prompt_version,bound}` (bound: estimate, lower, upper), `infercache_verify_quarantined`
    and `infercache_verify_checks_total{model_version,kind,result}`. The scope labels are
    bounded by INFERCACHE_VERIFY_MAX_SCOPES, the versions as for every other metric."""

    def excess(options: CallbackOptions) -> Iterator[Observation]:
        for labels, estimate, lower, upper, _ in scopes():
            yield Observation(estimate, labels | {"bound": "estimate"})
            yield Observation(lower, labels | {"bound": "lower"})
            yield Observation(upper, labels | {"bound": "upper"})

    def quarantined(options: CallbackOptions) -> Iterator[Observation]:
        for labels, *_, held in scopes():
            yield Observation(1 if held else 0, labels)

    meter.create_observable_gauge(
        PREFIX + "verify.divergence_excess",
        callbacks=[excess],
        description="Hits' divergence from fresh answers minus the engine's own (misses "
        "computed twice), per scope, with a 95% interval (fraction)",
    )
    meter.create_observable_gauge(
        PREFIX + "verify.quarantined",
        callbacks=[quarantined],
        description="1 while a scope's hits are not served (verification_failed)",
    )
    meter.create_observable_counter(
        PREFIX + "verify.checks",
        callbacks=[_family(lambda: list(checks()), ("model_version", "kind", "result"))],
        description="Shadow checks by kind (hit, baseline) and result (same, diverged, "
        "failed, unjudged, skipped_busy, skipped_rate, skipped_concurrency, untracked)",
    )

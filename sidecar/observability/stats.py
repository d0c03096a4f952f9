"""Counters the cache keeps about itself, per model version (exported by telemetry).

Everything here is plain Python mutated on the event loop: one dict update per
event, no OpenTelemetry call on the request path. The metrics layer
(sidecar/observability/metrics.py) reads copies of these counters when a scrape or an export
asks for them, and the admin GetStats RPC returns them.

Label cardinality is bounded: a model version gets its own label only once it
is admitted (the pod's own version, a store this pod accepted, or an entry a hit
or a report found: what this fleet stored), and only the first
`max_versions` admitted do; every other version, including whatever strings
callers merely look up, is counted under OTHER_VERSION. Tenants are never a
label.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field

from sidecar.config import DEFAULTS

OTHER_VERSION = "_other"
"""The model_version label of versions not admitted (or admitted past max_versions)."""
NO_VERSION = "_none"
"""The model_version label of events that belong to no version (e.g. a whole-store rule)."""

DEFAULT_MAX_VERSIONS = DEFAULTS.telemetry.metrics_max_model_versions

# Seconds; Prometheus-style upper bounds for RPC durations (a hot hit is ~0.2 ms,
# a warm hit ~1 ms, a single-flight wait up to max_wait_ms).
DURATION_BOUNDS_S: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


@dataclass(slots=True)
class DurationHistogram:
    """Cumulative-free bucket counts (one per bound, plus +Inf) with sum and count."""

    buckets: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BOUNDS_S) + 1))
    sum_s: float = 0.0
    count: int = 0

    def observe(self, seconds: float) -> None:
        """Add one observation."""
        self.buckets[bisect_left(DURATION_BOUNDS_S, seconds)] += 1
        self.sum_s += seconds
        self.count += 1

    def copy(self) -> DurationHistogram:
        """A snapshot (lists are copied, so later observations do not change it)."""
        return DurationHistogram(list(self.buckets), self.sum_s, self.count)


@dataclass(slots=True)
class RpcStats:
    """Per (rpc, grpc status code name): a duration histogram. Fed by the api layer."""

    durations: dict[tuple[str, str], DurationHistogram] = field(default_factory=dict)

    def observe(self, rpc: str, code: str, seconds: float) -> None:
        """Record one finished RPC."""
        h = self.durations.get((rpc, code))
        if h is None:
            h = self.durations[rpc, code] = DurationHistogram()
        h.observe(seconds)

    def snapshot(self) -> dict[tuple[str, str], DurationHistogram]:
        """Copies of every histogram (safe to read from another thread)."""
        return {k: h.copy() for k, h in list(self.durations.items())}


class CacheStats:
    """Monotonic counters keyed by (model_version label, ...); mutated only on the event loop.

    Families and their keys:
      lookups      (version, outcome, tier)     outcome hit/miss/bypass; tier hot/warm/"" (none)
      degraded     (version,)                   lookups answered MISS because a tier failed
      stores       (version, result, reason)    stored/""; refused/stale_lease|<bypass reason>;
                                                failed/warm_write
      rejected     (version, reason)            stored values failing verification: corrupt/foreign
      dead         (version,)                   entries found killed by an invalidation rule
      bypasses     (version, reason)            requests the cacheability policy bypassed
      leases       (version, event)             issued, waited, wait_hit, wait_timeout, wait_refused
      saved_ms     (version, tier)              stored compute latency of every hit, milliseconds
      saved_tokens (version, kind)              prompt/completion tokens of every hit
      downstream   (version, verdict, reason)   ReportOutcome verdicts (accepted/rejected)
      streams      (version, event)             LookupStream replay.completed/.cancelled/.chunks;
                                                StoreStream store.committed/.failed/.cancelled
      invalidations (version,)                  Invalidate calls committed here (selector's version)
    """

    __slots__ = (
        "_versions",
        "bypasses",
        "dead",
        "degraded",
        "downstream",
        "invalidations",
        "leases",
        "lookups",
        "max_versions",
        "reclaimed",
        "rejected",
        "saved_ms",
        "saved_tokens",
        "stores",
        "streams",
        "warm_read_failures",
        "warm_write_failures",
    )

    def __init__(self, max_versions: int = DEFAULT_MAX_VERSIONS) -> None:
        self.max_versions = max_versions
        self._versions: dict[str, str] = {}
        self.lookups: Counter[tuple[str, str, str]] = Counter()
        self.degraded: Counter[str] = Counter()
        self.stores: Counter[tuple[str, str, str]] = Counter()
        self.rejected: Counter[tuple[str, str]] = Counter()
        self.dead: Counter[str] = Counter()
        self.bypasses: Counter[tuple[str, str]] = Counter()
        self.leases: Counter[tuple[str, str]] = Counter()
        self.saved_ms: Counter[tuple[str, str]] = Counter()
        self.saved_tokens: Counter[tuple[str, str]] = Counter()
        self.downstream: Counter[tuple[str, str, str]] = Counter()
        self.streams: Counter[tuple[str, str]] = Counter()
        self.invalidations: Counter[str] = Counter()
        self.warm_read_failures = 0
        """Warm-tier reads that failed or ran past their deadline (one per round trip)."""
        self.warm_write_failures = 0
        """Warm-tier writes that failed (each is also a stores failed/warm_write)."""
        self.reclaimed = 0
        """Dead entries physically removed by the background reclaimer."""

    def version(self, model_version: str) -> str:
        """The label counting `model_version`: itself once admitted, else OTHER_VERSION.

        Never takes a label slot: a caller's lookup strings cannot crowd out the
        versions this fleet serves."""
        label = self._versions.get(model_version)
        if label is not None:
            return label
        return OTHER_VERSION if model_version else NO_VERSION

    def admit(self, model_version: str) -> str:
        """Give `model_version` its own label if a slot is free (a version this fleet
        stored: call it for a committed store or an entry found); returns its label."""
        label = self._versions.get(model_version)
        if label is None:
            if not model_version:
                return NO_VERSION
            if len(self._versions) >= self.max_versions:
                return OTHER_VERSION
            label = self._versions[model_version] = model_version
        return label

    # ---------------------------------------------------------------- recording hooks

    def count_lookup(self, model_version: str, outcome: str, tier: str = "") -> None:
        """Count one lookup answer ("hit" with tier "hot"/"warm", "miss", "bypass")."""
        self.lookups[self.version(model_version), outcome, tier] += 1

    def count_hit_saving(
        self, model_version: str, tier: str, latency_ms: int, prompt: int, completion: int
    ) -> None:
        """Add what a hit saved (the stored compute cost of its entry)."""
        v = self.version(model_version)
        self.saved_ms[v, tier] += latency_ms
        self.saved_tokens[v, "prompt"] += prompt
        self.saved_tokens[v, "completion"] += completion

    def count_store(self, model_version: str, result: str, reason: str = "") -> None:
        """Count one store ("stored", "refused" with a reason, "failed" with a reason)."""
        self.stores[self.version(model_version), result, reason] += 1

    def count_rejected(self, model_version: str, reason: str) -> None:
        """Count a stored value that failed verification ("corrupt", "foreign")."""
        self.rejected[self.version(model_version), reason] += 1

    def count_dead(self, model_version: str) -> None:
        """Count an entry found dead (a matching invalidation is newer)."""
        self.dead[self.version(model_version)] += 1

    def count_lease(self, model_version: str, event: str) -> None:
        """Count a lease event: issued, waited (a wait began), wait_hit, wait_timeout,
        wait_refused (too many waiting already)."""
        self.leases[self.version(model_version), event] += 1

    def count_bypass(self, model_version: str, reason: str) -> None:
        """Count a request the cacheability policy bypassed, by machine-readable reason."""
        self.bypasses[self.version(model_version), reason] += 1

    def count_downstream(self, model_version: str, verdict: str, reason: str) -> None:
        """Count a downstream check's verdict on a cached answer ("accepted"/"rejected");
        `reason` must come from a bounded set (DownstreamFeedback maps it)."""
        self.downstream[self.version(model_version), verdict, reason] += 1

    def count_stream(self, model_version: str, event: str, n: int = 1) -> None:
        """Count a streaming event (replay.completed, store.cancelled, ...), n times."""
        self.streams[self.version(model_version), event] += n

    def count_invalidation(self, model_version: str) -> None:
        """Count an invalidation committed by this sidecar ("" = not version-specific)."""
        self.invalidations[self.version(model_version)] += 1

    # ---------------------------------------------------------------- reading

    def versions(self) -> list[str]:
        """Every model_version label that has a count, sorted."""
        seen: set[str] = set()
        families = (
            self.lookups,
            self.stores,
            self.rejected,
            self.bypasses,
            self.downstream,
            self.streams,
        )
        for family in families:
            seen.update(k[0] for k in list(family))
        for plain in (self.dead, self.degraded, self.invalidations):
            seen.update(list(plain))
        return sorted(seen)

    def total(self, family: str, **match: str) -> int:
        """Sum of a family's counts whose key fields equal `match` (for tests and the CLI).

        Field names: version, outcome, tier, result, reason, event, kind, verdict.
        """
        counter: Counter[object] = getattr(self, family)
        names = _FIELDS[family]
        out = 0
        for key, n in list(counter.items()):
            fields = key if isinstance(key, tuple) else (key,)
            if all(fields[names.index(k)] == v for k, v in match.items()):
                out += n
        return out

    def snapshot(self) -> dict[str, int]:
        """Every counter by a flat dotted name, summed over versions (GetStats' `counters`)."""
        out: dict[str, int] = {}

        def add(name: str, n: int) -> None:
            out[name] = out.get(name, 0) + n

        for (_, outcome, tier), n in list(self.lookups.items()):
            add(f"lookups.{outcome}.{tier}" if tier else f"lookups.{outcome}", n)
        for (_, result, reason), n in list(self.stores.items()):
            add(f"stores.{result}.{reason}" if reason else f"stores.{result}", n)
        for (_, reason), n in list(self.rejected.items()):
            add(f"rejected.{reason}", n)
        for (_, reason), n in list(self.bypasses.items()):
            add(f"bypasses.{reason}", n)
        for (_, event), n in list(self.leases.items()):
            add(f"leases.{event}", n)
        for (_, verdict, reason), n in list(self.downstream.items()):
            add(f"downstream.{verdict}.{reason}" if reason else f"downstream.{verdict}", n)
        for (_, event), n in list(self.streams.items()):
            add(f"streams.{event}", n)
        for (_, kind), n in list(self.saved_tokens.items()):
            add(f"saved_tokens.{kind}", n)
        add("saved_latency_ms", sum(list(self.saved_ms.values())))
        add("degraded", sum(list(self.degraded.values())))
        add("dead", sum(list(self.dead.values())))
        add("invalidations", sum(list(self.invalidations.values())))
        add("warm_read_failures", self.warm_read_failures)
        add("warm_write_failures", self.warm_write_failures)
        add("reclaimed", self.reclaimed)
        return out


_FIELDS: dict[str, tuple[str, ...]] = {
    "lookups": ("version", "outcome", "tier"),
    "degraded": ("version",),
    "stores": ("version", "result", "reason"),
    "rejected": ("version", "reason"),
    "dead": ("version",),
    "bypasses": ("version", "reason"),
    "leases": ("version", "event"),
    "saved_ms": ("version", "tier"),
    "saved_tokens": ("version", "kind"),
    "downstream": ("version", "verdict", "reason"),
    "streams": ("version", "event"),
    "invalidations": ("version",),
}

"""LookupObservers: the CacheStats counter every ResultCache has, and a log for tests.

The counter lives here, next to the result types it reads, rather than on CacheStats:
observability/ sits below results/ in the layer order and must not import it.
"""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.observability.stats import CacheStats
from sidecar.results.types import LookupQuery, LookupResult, Outcome, TierName

# CacheStats.lookups' (outcome, tier) labels, precomputed per (outcome, tier).
_LOOKUP_LABELS: dict[tuple[Outcome, TierName | None], tuple[str, str]] = {
    (o, t): (o.value, t.value if t else "") for o in Outcome for t in (None, *TierName)
}


class LookupCounter:
    """Counts lookups into CacheStats per model version: outcome and tier, degraded
    answers, and what hits saved (their stored compute cost)."""

    __slots__ = ("stats",)

    def __init__(self, stats: CacheStats) -> None:
        self.stats = stats

    def observe(self, queries: Sequence[LookupQuery], results: Sequence[LookupResult]) -> None:
        """Count one lookup call, key by key."""
        stats = self.stats
        counts = stats.lookups
        version = stats.version
        for q, r in zip(queries, results, strict=True):
            if r.entry is not None:
                # An entry found is one this fleet stored: its version may take a label.
                v = stats.admit(q.key.model_version)
            else:
                v = version(q.key.model_version)
            outcome, tier = _LOOKUP_LABELS[r.outcome, r.tier]
            counts[v, outcome, tier] += 1
            if r.entry is not None:
                cost = r.entry.cost
                if cost.latency_ms or cost.prompt_tokens or cost.completion_tokens:
                    stats.count_hit_saving(
                        v, tier, cost.latency_ms, cost.prompt_tokens, cost.completion_tokens
                    )
            elif r.degraded:
                stats.degraded[v] += 1


class LookupLog:
    """A LookupObserver that keeps every call (the shipped fake: tests read what was looked
    up and found instead of counters). Unbounded: not for production."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[LookupQuery, ...], tuple[LookupResult, ...]]] = []

    def observe(self, queries: Sequence[LookupQuery], results: Sequence[LookupResult]) -> None:
        """Keep copies of the call's queries and results."""
        self.calls.append((tuple(queries), tuple(results)))

    def outcomes(self) -> list[Outcome]:
        """Every observed result's outcome, in call then key order."""
        return [r.outcome for _, results in self.calls for r in results]

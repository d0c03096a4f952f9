"""Pure protobuf <-> domain conversions of AdminService: selectors, audit records, stats."""

from __future__ import annotations

from collections.abc import Sequence

from infercache.v1 import admin_pb2 as PB2

from sidecar.invalidation.rules import Selector
from sidecar.invalidation.store import AuditRecord
from sidecar.observability.stats import CacheStats
from sidecar.observability.usage import TierUsage


def selector_from_pb(s: PB2.Selector) -> Selector:
    """Empty strings mean "unconstrained"."""
    return Selector(
        tenant=s.tenant or None,
        model_version=s.model_version or None,
        adapter_version=s.adapter_version or None,
        prompt_version=s.prompt_version or None,
        all=s.all,
    )


def selector_to_pb(s: Selector) -> PB2.Selector:
    """Inverse of selector_from_pb."""
    return PB2.Selector(
        tenant=s.tenant or "",
        model_version=s.model_version or "",
        adapter_version=s.adapter_version or "",
        prompt_version=s.prompt_version or "",
        all=s.all,
    )


def record_to_pb(r: AuditRecord) -> PB2.InvalidationRecord:
    """Audit record -> message."""
    return PB2.InvalidationRecord(
        id=r.id,
        time_ms=r.time_ms,
        caller=r.caller,
        selector=selector_to_pb(r.selector),
        reason=r.reason,
        epoch=r.epoch,
        estimated_entries=r.estimated_entries,
    )


def _joined(key: tuple[str, ...]) -> str:
    return ".".join(k for k in key if k)


def stats_to_pb(stats: CacheStats, tiers: Sequence[TierUsage]) -> PB2.GetStatsResponse:
    """CacheStats -> the counter parts of GetStatsResponse (totals, per version, tiers)."""
    by_version: dict[str, PB2.VersionStats] = {}

    def of(version: str) -> PB2.VersionStats:
        v = by_version.get(version)
        if v is None:
            v = by_version[version] = PB2.VersionStats(model_version=version)
        return v

    for (version, *rest), n in list(stats.lookups.items()):
        of(version).lookups[_joined(tuple(rest))] += n
    for (version, *rest), n in list(stats.stores.items()):
        of(version).stores[_joined(tuple(rest))] += n
    for (version, reason), n in list(stats.rejected.items()):
        of(version).rejected[reason] += n
    for (version, reason), n in list(stats.bypasses.items()):
        of(version).bypasses[reason] += n
    for (version, event), n in list(stats.leases.items()):
        of(version).leases[event] += n
    for (version, *rest), n in list(stats.downstream.items()):
        of(version).downstream[_joined(tuple(rest))] += n
    for version, n in list(stats.degraded.items()):
        of(version).degraded += n
    for version, n in list(stats.dead.items()):
        of(version).dead += n
    for version, n in list(stats.invalidations.items()):
        of(version).invalidations += n
    for (version, _), n in list(stats.saved_ms.items()):
        of(version).saved_latency_ms += n
    for (version, kind), n in list(stats.saved_tokens.items()):
        v = of(version)
        if kind == "prompt":
            v.saved_prompt_tokens += n
        else:
            v.saved_completion_tokens += n
    return PB2.GetStatsResponse(
        counters=stats.snapshot(),
        versions=[by_version[k] for k in sorted(by_version)],
        tiers=[PB2.TierUsage(name=t.name, bytes=t.bytes, entries=t.entries) for t in tiers],
        global_counters={
            "warm_read_failures": stats.warm_read_failures,
            "warm_write_failures": stats.warm_write_failures,
            "reclaimed": stats.reclaimed,
        },
    )

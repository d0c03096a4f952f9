"""Shadow verification's figures and events <-> admin.proto messages (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from infercache.v1 import admin_pb2 as PB2

from sidecar.errors import InvalidArgument
from sidecar.verification.audit import AuditedEvent
from sidecar.verification.ledger import Event, Ledger, Scope, ScopeReport


def scope_from_pb(scope: PB2.VerificationScope) -> Scope:
    """The scope an acknowledgement names; InvalidArgument when a part is missing."""
    for name in ("model_version", "tenant", "prompt_version"):
        if not getattr(scope, name):
            raise InvalidArgument(f"scope.{name}", "is required")
    return Scope(scope.model_version, scope.tenant, scope.prompt_version)


def _scope_pb(scope: Scope) -> PB2.VerificationScope:
    return PB2.VerificationScope(
        model_version=scope.model_version, tenant=scope.tenant, prompt_version=scope.prompt_version
    )


def event_to_pb(event: Event, member_id: str = "") -> PB2.VerificationEvent:
    """One audited event (`member_id`: the sidecar whose ledger raised it)."""
    return PB2.VerificationEvent(
        member_id=member_id,
        time_ms=event.time_ms,
        scope=_scope_pb(event.scope),
        action=event.action,
        caller=event.caller,
        reason=event.reason,
        checks=event.checks,
        diverged=event.diverged,
        baseline_checks=event.baseline_checks,
        baseline_diverged=event.baseline_diverged,
        excess=event.excess.estimate,
        excess_lower=event.excess.lower,
        excess_upper=event.excess.upper,
    )


def _report_to_pb(r: ScopeReport) -> PB2.VerificationStats:
    return PB2.VerificationStats(
        scope=_scope_pb(r.scope),
        state=r.state.value,
        checks=r.checks,
        diverged=r.diverged,
        baseline_checks=r.baseline_checks,
        baseline_diverged=r.baseline_diverged,
        excess=r.excess.estimate,
        excess_lower=r.excess.lower,
        excess_upper=r.excess.upper,
        statistic=r.statistic,
        threshold=r.threshold,
    )


def fill_stats(resp: PB2.GetStatsResponse, ledger: Ledger, events: Sequence[AuditedEvent]) -> None:
    """Add the ledger's scopes and check counts and `events` (oldest first) to a GetStats
    answer."""
    resp.verification.extend(_report_to_pb(r) for r in ledger.reports())
    resp.verification_events.extend(event_to_pb(a.event, a.member_id) for a in events)
    for (version, kind, result), n in list(ledger.counts.items()):
        resp.verification_counts[f"{version}/{kind}/{result}"] = n

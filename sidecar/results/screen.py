"""Answers a lookup gets before any tier is read: BYPASS from the cacheability
policy or from a verification quarantine, and a degraded MISS for keys relying on a
fingerprint being re-measured."""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.identity.cell import IdentityCell
from sidecar.invalidation.rules import RuleSet
from sidecar.observability.stats import CacheStats
from sidecar.policy.cacheability import NO_TRAITS, Bypass, BypassReason, Policy
from sidecar.results.types import LookupQuery, LookupResult, Outcome
from sidecar.verification.ledger import SCOPE_ADAPTER, Ledger, Scope

Decided = list[LookupResult | None]
"""Answers by position (None: not decided yet, the tiers answer)."""


def passes_screens(
    policy: Policy, ledger: Ledger | None, identity: IdentityCell, q: LookupQuery
) -> bool:
    """True when no screen here can decide `q`: every one would let it through untouched
    (no answer, no counter, no ledger change). A lookup of one key asks this to skip them;
    False only means they must be run (ResultCache.lookup_many does)."""
    return (
        q.traits is NO_TRAITS
        and policy.inert  # screen_policy's common case: only declared traits bypass
        and not identity.stale  # screen_doubt: nothing in doubt
        and (ledger is None or not ledger.quarantined)  # screen_quarantine: nothing held
    )


def screen_policy(
    policy: Policy, stats: CacheStats, queries: Sequence[LookupQuery]
) -> Decided | None:
    """BYPASS results by position, or None when the policy lets every query through."""
    if policy.inert:
        # Common case (no file, or rules only on declared traits): nothing declared,
        # nothing to decide.
        for q in queries:
            if q.traits is not NO_TRAITS:
                break
        else:
            return None
    out: Decided | None = None
    tenant_rules, defaults = policy.tenants.get, policy.defaults  # Policy.for_tenant, inlined
    for i, q in enumerate(queries):
        key, traits = q.key, q.traits
        rules = tenant_rules(key.tenant, defaults)
        if rules.inert and traits is NO_TRAITS:
            continue
        decision = rules.bypass_for(key, traits)
        if decision is None:
            continue
        if out is None:
            out = [None] * len(queries)
        out[i] = LookupResult(Outcome.BYPASS, key.digest, bypass=decision)
        stats.count_bypass(key.model_version, decision.reason.value)
    return out


def screen_doubt(
    identity: IdentityCell, queries: Sequence[LookupQuery], out: Decided | None
) -> Decided | None:
    """Add a degraded MISS (a lease without a hold) for each undecided key relying on a
    fingerprint being re-measured: its entries may be of weights no longer on disk."""
    in_doubt = identity.in_doubt
    for i, q in enumerate(queries):
        key = q.key
        if (out is None or out[i] is None) and in_doubt(key.model_version, key.adapter_version):
            out = out or [None] * len(queries)
            out[i] = LookupResult(Outcome.MISS, key.digest, degraded=True)
            identity.stats.stale_lookup_misses += 1
    return out


_QUARANTINED = Bypass(
    BypassReason.VERIFICATION_FAILED,
    "hits of this model version, tenant and prompt version diverged from fresh answers "
    "beyond the verification budget",
)


def screen_quarantine(
    ledger: Ledger,
    rules: RuleSet,
    stats: CacheStats,
    queries: Sequence[LookupQuery],
    out: Decided | None,
) -> Decided | None:
    """Add a BYPASS for each undecided key of a quarantined scope; a scope an Invalidate
    has covered since its quarantine is released instead (sidecar/verification)."""
    quarantined = ledger.quarantined
    for i, q in enumerate(queries):
        if out is not None and out[i] is not None:
            continue
        key = q.key
        scope = Scope(key.model_version, key.tenant, key.prompt_version)
        tally = quarantined.get(scope)
        if tally is None:
            continue
        dims = (key.tenant, key.model_version, SCOPE_ADAPTER, key.prompt_version)
        if rules.newest_matching(dims) > tally.since_epoch:
            ledger.invalidated(scope)
            continue
        out = out or [None] * len(queries)
        out[i] = LookupResult(Outcome.BYPASS, key.digest, bypass=_QUARANTINED)
        stats.count_bypass(key.model_version, _QUARANTINED.reason.value)
    return out

"""Which hits and misses may be re-computed, and the budget their scope is judged by:
one rule for the gateway and the gRPC data plane (docs/verification.md, "What is
verified").

Eligible: an answer meant to be reproducible (temperature 0 or a seed), of a request
that declares no side effects and no real-time dependence (sending it again would
repeat an action, or its answer is meant to change), of a tenant whose verify rate is
above 0.
"""

from __future__ import annotations

from sidecar.policy.cacheability import KeyFacts, RequestTraits, TenantPolicy
from sidecar.verification.settings import VerifySettings


def hit_rate(
    key: KeyFacts, traits: RequestTraits, policy: TenantPolicy, settings: VerifySettings
) -> float:
    """The fraction of such hits checked (the tenant's verify_rate, else the setting);
    0 when the request is not eligible."""
    if key.temperature != 0.0 and not key.seeded:
        return 0.0
    if traits.side_effects or traits.real_time:
        return 0.0
    return settings.rate if policy.verify_rate is None else policy.verify_rate


def budget(policy: TenantPolicy, settings: VerifySettings) -> float:
    """The excess divergence the tenant's scopes may show (verify_budget, else the setting)."""
    return settings.budget if policy.verify_budget is None else policy.verify_budget

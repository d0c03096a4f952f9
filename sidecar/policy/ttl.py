"""TTL bounds from the settings, and the TTL a Store gets within them and its tenant's policy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sidecar.config import TtlConfig
from sidecar.policy.cacheability import TenantPolicy


@dataclass(frozen=True, slots=True)
class TtlPolicy:
    """TTL bounds in seconds from the settings: a default, a global maximum and per-tenant
    maxima. The policy file chooses within them (see `effective`)."""

    default_s: int
    max_s: int
    tenant_max_s: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_config(cls, ttl: TtlConfig) -> TtlPolicy:
        """The bounds INFERCACHE_DEFAULT_TTL_S, _MAX_TTL_S and _TENANT_MAX_TTL_S give."""
        return cls(ttl.default_ttl_s, ttl.max_ttl_s, dict(ttl.tenant_max_ttl_s))

    def effective(self, tenant: str, requested_s: int, policy: TenantPolicy | None = None) -> int:
        """The TTL to apply: the request, else the policy's default, else the setting's
        default; clamped to the smallest of the policy's max_ttl_s, the tenant cap and the
        global maximum. Every maximum only lowers, never lifts, the others.
        """
        cap = min(self.tenant_max_s.get(tenant, self.max_s), self.max_s)
        default = self.default_s
        if policy is not None:
            if policy.max_ttl_s is not None:
                cap = min(cap, policy.max_ttl_s)
            if policy.default_ttl_s is not None:
                default = policy.default_ttl_s
        wanted = requested_s if requested_s > 0 else default
        return max(1, min(wanted, cap))

"""Cacheability policy: which requests may be cached, for how long, and how big.

A Policy is a set of defaults plus per-tenant overrides (each override replaces
only the fields it names). It is pure data and decisions: the YAML file is read
by sidecar.policy.file, reloads are driven by sidecar.policy.watch, and
ResultCache applies the decision on every lookup and store, server-side, so no
client can override it.

Without a policy file every tenant gets the built-in TenantPolicy(): everything
cacheable, TTLs from the INFERCACHE_*_TTL_S settings, and only the traits a
caller explicitly declares (side effects, private data, real-time) bypass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Protocol


class BypassReason(Enum):
    """Why a request or result is not cached (values are the stats/log labels)."""

    NOT_CACHEABLE = "not_cacheable"
    NON_DETERMINISTIC = "non_deterministic"
    SIDE_EFFECTS = "side_effects"
    PRIVATE_DATA = "private_data"
    REAL_TIME = "real_time"
    TOOLS = "tools"
    ENTRY_TOO_LARGE = "entry_too_large"
    VERIFICATION_FAILED = "verification_failed"
    """The scope's hits diverged from fresh answers beyond its budget (docs/verification.md)."""

    __hash__ = object.__hash__  # identity hash: members are singletons (see cache.Outcome)


@dataclass(frozen=True, slots=True)
class Bypass:
    """A policy decision not to cache: the reason and a sentence for humans."""

    reason: BypassReason
    detail: str


# Decisions are constants: a bypass allocates nothing on the lookup path.
_NOT_CACHEABLE = Bypass(BypassReason.NOT_CACHEABLE, "the tenant's policy says not cacheable")
_SIDE_EFFECTS = Bypass(BypassReason.SIDE_EFFECTS, "the request declares side effects")
_PRIVATE_DATA = Bypass(BypassReason.PRIVATE_DATA, "the request declares private data")
_REAL_TIME = Bypass(BypassReason.REAL_TIME, "the request declares real-time dependence")
_TOOLS = Bypass(BypassReason.TOOLS, "the request carries tool definitions")
_NON_DETERMINISTIC = Bypass(
    BypassReason.NON_DETERMINISTIC,
    "temperature > 0 (unset means 1.0) without a seed is not deterministic",
)


GATEWAY_CACHE_MODES = ("read-write", "read-only", "write-only", "off")
"""Values of a policy's gateway_cache_mode (the gateway's x-infercache-cache-mode)."""


@dataclass(frozen=True, slots=True)
class RequestTraits:
    """What a caller declares about a request that its key does not say."""

    side_effects: bool = False
    private_data: bool = False
    real_time: bool = False
    tools: bool = False


NO_TRAITS = RequestTraits()
"""Nothing declared (the common case; compared by identity on the hot path)."""


class KeyFacts(Protocol):
    """What the policy reads from a built key (sidecar.keys.CacheKey satisfies it)."""

    @property
    def tenant(self) -> str: ...

    @property
    def temperature(self) -> float:
        """Canonical temperature; an unset temperature is the default 1.0."""

    @property
    def seeded(self) -> bool:
        """True when the request carries a sampling seed."""

    @property
    def tools(self) -> bool:
        """True when the key's `extra` names a tool / function schema."""


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """The rules for one tenant. TTLs in seconds, sizes in bytes; None = the setting decides."""

    cacheable: bool = True
    """False: every lookup is BYPASS and every store BYPASSED."""
    default_ttl_s: int | None = None
    """TTL of a Store that asks for none; None = INFERCACHE_DEFAULT_TTL_S."""
    max_ttl_s: int | None = None
    """Cap on any Store's TTL; lowers (never lifts) INFERCACHE_MAX_TTL_S and the tenant cap."""
    deterministic_only: bool = False
    """Bypass sampled requests: temperature > 0 (unset = 1.0) without a seed."""
    bypass_side_effects: bool = True
    """Bypass requests that declare side effects."""
    bypass_private_data: bool = True
    """Bypass requests that declare private data."""
    bypass_real_time: bool = True
    """Bypass requests that declare real-time dependence."""
    bypass_tools: bool = False
    """Bypass requests that declare tools or whose key's `extra` names a tool schema."""
    max_entry_bytes: int | None = None
    """Larger results are BYPASSED at Store; None = INFERCACHE_MAX_PAYLOAD_BYTES only."""
    retain_inputs: bool = False
    """May this tenant's inputs be kept (e.g. recorded for prewarm)? Off unless allowed."""
    gateway_cache_mode: str | None = None
    """The OpenAI gateway's cache mode for requests that name none (GATEWAY_CACHE_MODES);
    None = read-write."""
    verify_rate: float | None = None
    """Fraction of reproducible hits re-computed and compared (docs/verification.md);
    None = INFERCACHE_VERIFY_RATE, 0 = never (a tenant whose requests must not be sent
    to the model server again)."""
    verify_budget: float | None = None
    """Excess divergence its scopes may show before their hits stop; None =
    INFERCACHE_VERIFY_BUDGET."""
    inert: bool = field(init=False, repr=False, compare=False)
    """Derived: only declared traits can bypass a request (lets the hot path skip checks)."""

    def __post_init__(self) -> None:
        inert = self.cacheable and not self.deterministic_only and not self.bypass_tools
        object.__setattr__(self, "inert", inert)

    def bypass_for(self, key: KeyFacts, traits: RequestTraits = NO_TRAITS) -> Bypass | None:
        """The first rule that bypasses this request, or None when it may be cached.

        Order: not cacheable, declared side effects, private data, real time, tools,
        non-deterministic sampling.
        """
        if not self.cacheable:
            return _NOT_CACHEABLE
        if traits is not NO_TRAITS:
            if traits.side_effects and self.bypass_side_effects:
                return _SIDE_EFFECTS
            if traits.private_data and self.bypass_private_data:
                return _PRIVATE_DATA
            if traits.real_time and self.bypass_real_time:
                return _REAL_TIME
        if self.bypass_tools and (traits.tools or key.tools):
            return _TOOLS
        if self.deterministic_only and key.temperature > 0 and not key.seeded:
            return _NON_DETERMINISTIC
        return None

    def bypass_for_entry(self, size: int) -> Bypass | None:
        """A result of `size` bytes over max_entry_bytes is not kept."""
        if self.max_entry_bytes is not None and size > self.max_entry_bytes:
            return Bypass(
                BypassReason.ENTRY_TOO_LARGE,
                f"the result is {size} bytes; the tenant's max_entry_bytes is "
                f"{self.max_entry_bytes}",
            )
        return None


@dataclass(frozen=True, slots=True)
class Policy:
    """Defaults and per-tenant policies; `source` names where it came from (for logs)."""

    defaults: TenantPolicy = field(default_factory=TenantPolicy)
    tenants: Mapping[str, TenantPolicy] = field(default_factory=lambda: MappingProxyType({}))
    source: str = "built-in"
    inert: bool = field(init=False, repr=False, compare=False)
    """Derived: every tenant's policy is inert (only declared traits can bypass)."""

    def __post_init__(self) -> None:
        inert = self.defaults.inert and all(p.inert for p in self.tenants.values())
        object.__setattr__(self, "inert", inert)

    def for_tenant(self, tenant: str) -> TenantPolicy:
        """The tenant's policy: its override when the file has one, else the defaults."""
        return self.tenants.get(tenant, self.defaults)


class PolicyHolder:
    """The policy in force; a reload swaps it whole (one attribute store, so readers
    on the event loop always see either the old or the new policy, never a mix)."""

    __slots__ = ("current",)

    def __init__(self, policy: Policy | None = None) -> None:
        self.current = policy or Policy()

    def retains_inputs(self, tenant: str) -> bool:
        """May `tenant`'s inputs be kept (recorded for prewarm)? Its policy's retain_inputs."""
        return self.current.for_tenant(tenant).retain_inputs

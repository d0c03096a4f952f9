"""What a ResultCache is built from, grouped as the values that travel together: its
tiers, its settings, who watches its work and what it admits. The composition root
(sidecar/app.py) builds each from the config; tests take the defaults they do not vary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sidecar.config import LeaseConfig
from sidecar.identity.cell import IdentityCell
from sidecar.observability.stats import CacheStats
from sidecar.policy.cacheability import PolicyHolder
from sidecar.policy.ttl import TtlPolicy
from sidecar.results.types import LookupObserver
from sidecar.tiers.base import HoldingStore, WarmTier
from sidecar.tiers.hot import HotTier


@dataclass(frozen=True, slots=True)
class CacheTiers:
    """The stores a result cache reads and writes: hot first, then warm."""

    hot: HotTier
    warm: WarmTier
    holding: HoldingStore | None = None
    """`warm` and the control store's holder keys as one store (lookups read and hold
    in one step, stores write and release in one); None keeps them separate calls."""


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """The result cache's budgets and policies, fixed when it is built."""

    ttl: TtlPolicy
    max_payload_bytes: int
    """Largest result a store accepts (INFERCACHE_MAX_PAYLOAD_BYTES)."""
    max_chunks: int
    """Most stream chunk boundaries a result may carry (INFERCACHE_MAX_CHUNKS)."""
    leases: LeaseConfig = field(default_factory=LeaseConfig)


@dataclass(frozen=True, slots=True)
class CacheWatchers:
    """Who is told what the result cache does."""

    stats: CacheStats = field(default_factory=CacheStats)
    """Counts every lookup call first, and stores, leases and bypasses."""
    observers: tuple[LookupObserver, ...] = ()
    """Each is shown every lookup call, in order, after `stats` counted it (e.g. the
    prewarm HitRecorder)."""


@dataclass(frozen=True, slots=True)
class CacheAdmission:
    """What the result cache may answer and store (besides the invalidation rules)."""

    policy: PolicyHolder = field(default_factory=PolicyHolder)
    """The tenants' cacheability policy: what it refuses is BYPASS and touches no tier."""
    identity: IdentityCell = field(default_factory=IdentityCell)
    """Whose results may be stored: stores of weights the pod does not run or is
    re-measuring are refused; lookups relying on the latter miss."""

"""ResultCaches as unit tests build them: one set of settings, in process stores.

Defaults: TTL an hour (a day at most), results of MAX_PAYLOAD bytes at most, the
configured chunk limit, no invalidation rules.
"""

from __future__ import annotations

from sidecar.backends.embedded_holding import EmbeddedHolding
from sidecar.config import LeaseConfig, LimitsConfig
from sidecar.invalidation.embedded_store import EmbeddedControlStore
from sidecar.invalidation.freshness import Freshness
from sidecar.invalidation.rules import RuleSet
from sidecar.policy.ttl import TtlPolicy
from sidecar.results.cache import ResultCache
from sidecar.results.parts import CacheAdmission, CacheSettings, CacheTiers, CacheWatchers
from sidecar.testing import Clock
from sidecar.tiers.base import WarmTier
from sidecar.tiers.embedded import EmbeddedWarmTier
from sidecar.tiers.hot import HotTier

MAX_PAYLOAD = 1024
HOUR_TTL = TtlPolicy(default_s=3600, max_s=86400)


def cache_settings(ttl: TtlPolicy = HOUR_TTL, leases: LeaseConfig | None = None) -> CacheSettings:
    """The defaults above, with `ttl` and `leases` (LeaseConfig's defaults when None)."""
    return CacheSettings(ttl, MAX_PAYLOAD, LimitsConfig().max_chunks, leases or LeaseConfig())


def unit_cache(
    warm: WarmTier,
    clock: Clock,
    *,
    ttl: TtlPolicy = HOUR_TTL,
    hot_entries: int = 1000,
    watchers: CacheWatchers | None = None,
    admission: CacheAdmission | None = None,
) -> ResultCache:
    """A cache over a new hot tier of `hot_entries` and `warm`, with its own embedded
    control store, on `clock`."""
    return ResultCache(
        CacheTiers(HotTier(10**7, hot_entries), warm),
        cache_settings(ttl),
        freshness=Freshness(EmbeddedControlStore(), RuleSet()),
        watchers=watchers,
        admission=admission,
        clock_ms=clock,
    )


def held_cache(
    clock: Clock,
    control: EmbeddedControlStore,
    holding: type[EmbeddedHolding] = EmbeddedHolding,
    leases: LeaseConfig | None = None,
) -> tuple[ResultCache, EmbeddedWarmTier]:
    """A cache whose warm tier (returned too) and `control`'s holder keys are one store
    (`holding` over the two): lookups read and hold in one step, stores write and release."""
    warm = EmbeddedWarmTier(10**7, 10**5, clock_ms=clock, epoch_source=control.epoch_now)
    cache = ResultCache(
        CacheTiers(HotTier(10**7, 1000), warm, holding(warm, control)),
        cache_settings(leases=leases),
        freshness=Freshness(control, RuleSet()),
        clock_ms=clock,
    )
    return cache, warm

"""ResultCache.lookup's direct path for one key gives what lookup_many gives that key.

Each case builds the same state twice, from scratch: one cache answers `lookup(q)`,
the other `lookup_many([q])` (the batch path). Results, counters, observers (a LookupLog
and the prewarm HitRecorder), the hot tier's contents and the warm reads must be equal,
and the cases the hot tier answers must not have reached lookup_many at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import pytest

from sidecar.entries import ComputeCost, Entry
from sidecar.invalidation.rules import Rule, Selector
from sidecar.policy.cacheability import RequestTraits
from sidecar.prewarm.hits import HitRecorder, HitStore
from sidecar.results.cache import ResultCache
from sidecar.results.observers import LookupLog
from sidecar.results.parts import CacheWatchers
from sidecar.results.types import LookupQuery, LookupResult, Outcome, TierName
from sidecar.testing import T0_MS, Clock, FlakyWarmTier
from tests.support.caches import unit_cache
from tests.support.keys import TENANT, cache_key

KEY = cache_key("direct")


def _refuse(entry: Entry) -> bool:
    return False


def _take(entry: Entry) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class World:
    """One cache and everything that watches it."""

    cache: ResultCache
    clock: Clock
    warm: FlakyWarmTier
    log: LookupLog
    recorder: HitRecorder


def _world() -> World:
    clock = Clock()
    warm = FlakyWarmTier(clock)
    log = LookupLog()
    recorder = HitRecorder(cast(HitStore, object()), lambda tenant: True, sketch_size=64)
    cache = unit_cache(warm, clock, watchers=CacheWatchers(observers=(log, recorder)))
    return World(cache, clock, warm, log, recorder)


async def _stored(w: World) -> None:
    """KEY stored the way clients store (a MISS's lease), then 2 s pass."""
    miss = await w.cache.lookup(LookupQuery(KEY))
    await w.cache.store(KEY, b"answer", lease_token=miss.lease, cost=ComputeCost(900, 10, 5))
    w.clock.advance(2)


async def _dead(w: World) -> None:
    await _stored(w)
    w.cache.rules.add(Rule(1, Selector(tenant=TENANT), T0_MS))


async def _unconfirmed(w: World) -> None:
    await _stored(w)
    # As if the refresh loop had stalled past the freshness bound: memory is not trusted.
    w.cache.freshness._confirmed_until = 0.0


async def _old(w: World) -> None:
    await _stored(w)
    w.clock.advance(60)


async def _expired(w: World) -> None:
    await _stored(w)
    w.clock.advance(3 * 3600)


async def _collision(w: World) -> None:
    other = cache_key("other")
    w.cache.hot.put(KEY.digest, Entry(other.material, b"wrong", created_at_ms=T0_MS, ttl_s=3600))


async def _nothing(w: World) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Case:
    setup: Callable[[World], Awaitable[None]]
    query: LookupQuery
    direct: bool
    """Answered without lookup_many (the hot tier decided it)."""
    traffic: bool = True


CASES: dict[str, Case] = {
    "hit": Case(_stored, LookupQuery(KEY), direct=True),
    "hit_not_traffic": Case(_stored, LookupQuery(KEY), direct=True, traffic=False),
    "hit_within_max_age": Case(_stored, LookupQuery(KEY, max_age_s=10), direct=True),
    "hit_accepted": Case(_stored, LookupQuery(KEY, accept=_take), direct=True),
    "max_age_exceeded": Case(_old, LookupQuery(KEY, max_age_s=10), direct=True),
    "accept_refusing": Case(_stored, LookupQuery(KEY, accept=_refuse), direct=True),
    "miss": Case(_nothing, LookupQuery(KEY), direct=False),
    "dead_entry": Case(_dead, LookupQuery(KEY), direct=False),
    "unconfirmed_freshness": Case(_unconfirmed, LookupQuery(KEY), direct=False),
    "expired": Case(_expired, LookupQuery(KEY), direct=False),
    "material_mismatch": Case(_collision, LookupQuery(KEY), direct=False),
    "declared_traits": Case(
        _stored, LookupQuery(KEY, traits=RequestTraits(side_effects=True)), direct=False
    ),
    "declared_but_cacheable": Case(
        _stored, LookupQuery(KEY, traits=RequestTraits(tools=True)), direct=False
    ),
}


def _comparable(r: LookupResult) -> LookupResult:
    """Lease tokens are random per cache: whether one was handed out is what must match."""
    return r._replace(lease=b"L" if r.lease else b"")


def _seen(w: World) -> dict[str, Any]:
    """Everything a lookup may have changed or told anyone."""
    return {
        "stats": w.cache.stats.snapshot(),
        "observed": [
            (queries, tuple(_comparable(r) for r in results)) for queries, results in w.log.calls
        ],
        "recorder": (w.recorder.counted, w.recorder.not_retained),
        "sketch": sorted((c.item, c.count, c.error) for c in w.recorder.sketch),
        "hot": w.cache.hot.entries(),
        "warm_reads": w.warm.reads,
    }


@pytest.mark.parametrize("name", list(CASES))
async def test_direct_path_matches_the_batch_path(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = CASES[name]
    direct, batch = _world(), _world()
    for w in (direct, batch):
        await case.setup(w)

    fell_through: list[int] = []
    many = direct.cache.lookup_many

    async def counted_many(queries: Any, *, traffic: bool = True) -> list[LookupResult]:
        fell_through.append(len(queries))
        return await many(queries, traffic=traffic)

    monkeypatch.setattr(direct.cache, "lookup_many", counted_many)
    one = await direct.cache.lookup(case.query, traffic=case.traffic)
    (many_one,) = await batch.cache.lookup_many([case.query], traffic=case.traffic)

    assert _comparable(one) == _comparable(many_one)
    assert _seen(direct) == _seen(batch)
    assert fell_through == ([] if case.direct else [1])


async def test_the_matrix_covers_each_answer() -> None:
    """The cases above are what they say: each answer the direct path must reproduce."""
    answers = {}
    for name, case in CASES.items():
        w = _world()
        await case.setup(w)
        r = await w.cache.lookup(case.query, traffic=case.traffic)
        answers[name] = (r.outcome, r.tier, bool(r.lease), r.degraded)
    hot_hit = (Outcome.HIT, TierName.HOT, False, False)
    leased_miss = (Outcome.MISS, None, True, False)
    assert answers["hit"] == answers["hit_within_max_age"] == answers["hit_accepted"] == hot_hit
    assert answers["max_age_exceeded"] == answers["accept_refusing"] == leased_miss
    assert answers["miss"] == answers["expired"] == answers["material_mismatch"] == leased_miss
    assert answers["dead_entry"] == leased_miss
    assert answers["unconfirmed_freshness"] == (Outcome.HIT, TierName.WARM, False, False)
    assert answers["declared_traits"][0] is Outcome.BYPASS
    assert answers["declared_but_cacheable"] == hot_hit

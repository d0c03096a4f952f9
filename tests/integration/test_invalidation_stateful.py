"""A Hypothesis state machine over ResultCache + Invalidator on the embedded stores, on
one real Redis and on a real Redis Cluster.

A reference model tracks, per key, the last stored payload with its epoch stamp and
expiry, every rule, and the single-flight holder. Every lookup must answer exactly what
the model predicts: never a HIT the model calls dead, expired or foreign (a payload
other than the last one stored for that exact key), and no lost entries either.

On Redis the store keeps its own clock (real time): holder keys and entries also expire
by it (PX), and rules carry its commit time. The model follows both clocks: an entry
whose Redis TTL may have run out may miss (never hit with another payload), a holder
is free once its Redis TTL ran out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import struct
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    multiple,
    rule,
    run_state_machine_as_test,
)

from sidecar.backends.redis.control import RedisControlStore
from sidecar.backends.redis.warm import RedisWarmTier
from sidecar.config import LeaseConfig, LimitsConfig
from sidecar.errors import FailedPrecondition
from sidecar.invalidation.embedded_store import EmbeddedControlStore
from sidecar.invalidation.freshness import Freshness
from sidecar.invalidation.invalidator import Invalidator
from sidecar.invalidation.reclaim import Reclaimer
from sidecar.invalidation.rules import RuleSet, Selector
from sidecar.invalidation.store import ControlStore
from sidecar.keys import CacheKey, InputKind, KeyRequest, build_key
from sidecar.observability.stats import CacheStats
from sidecar.policy.ttl import TtlPolicy
from sidecar.results.cache import ResultCache
from sidecar.results.lease_tokens import LeaseSigner
from sidecar.results.parts import CacheSettings, CacheTiers
from sidecar.results.types import LookupQuery, LookupResult, Outcome, StoreStatus, TierName
from sidecar.testing import Clock
from sidecar.tiers.base import WarmTier
from sidecar.tiers.embedded import EmbeddedWarmTier
from sidecar.tiers.hot import HotTier
from tests.support.cluster import RedisClusterProcesses
from tests.support.processes import RedisServer
from tests.support.strategies.rules import (
    ADAPTER_POOL,
    MODEL_POOL,
    PROMPT_POOL,
    TENANT_POOL,
    clock_steps_ms,
    requested_ttls_s,
    selectors,
)

T = TypeVar("T")

LEASE_TTL_S = 60
HOLD_TTL_MS = 4000
"""Single-flight holds lapse this long after their last renewal (HoldKeeper renews them
every quarter of it while their lease lives and their result may still be stored). Long
against the real time between two steps, for the holder keys Redis expires on its own
clock; the embedded store's test clock is advanced in renewal steps (advance())."""
UNLEASED_WINDOW_S = 300
DEFAULT_TTL_S, MAX_TTL_S = 60, 120
HOT_ENTRIES = 4  # small, so lookups go to the warm tier too
# Redis expires keys on its own clock: within this margin of that expiry either answer
# is right (the hot tier may still hold the entry, Redis may have dropped it). Once a
# MISS shows Redis dropped it, the hot tier may still hold it until the cache's own
# clock expires it: from then on a HIT (of exactly that payload) or a MISS is right.
REDIS_EXPIRY_MARGIN_MS = 500
_MACHINES = itertools.count()
_LEASE_BODY = struct.Struct(">B32sQQ16s")

KEYS: list[CacheKey] = [
    build_key(
        KeyRequest(
            tenant=t,
            model_version=m,
            adapter_version=a,
            prompt_version=p,
            input=text,
            input_kind=InputKind.TEXT,
        )
    )
    for t, m, a, p, text in itertools.product(
        TENANT_POOL, MODEL_POOL, ADAPTER_POOL, PROMPT_POOL, ("x", "y")
    )
]
key_indices = st.integers(min_value=0, max_value=len(KEYS) - 1)


@dataclass(frozen=True)
class Stored:
    """What the model says is stored under a key."""

    payload: bytes
    stamp: int
    expires_at_ms: int
    store_expires_at_ms: int
    """When the store itself drops it, on the store's clock (Redis PX)."""
    warm_gone: bool = False
    """A MISS showed the store dropped it (only the hot tier may still hold it)."""


@dataclass(frozen=True)
class HeldLease:
    """A lease a MISS handed out, as the model sees it."""

    key: int
    token: bytes
    epoch: int
    expires_at_ms: int
    lease_id: bytes


@dataclass(frozen=True)
class ModelRule:
    """A committed invalidation."""

    selector: Selector
    epoch: int
    time_ms: int


class InvalidationMachine(RuleBasedStateMachine):
    """Drives lookups, stores (leased, unleased, stale), invalidations, time and reclaim."""

    leases = Bundle("leases")

    def __init__(self, redis_url: str | None = None) -> None:
        """`redis_url`: run on that Redis (or cluster) under a key prefix of its own."""
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = Clock()
        self.redis = redis_url is not None
        self.warm: WarmTier
        self.control: ControlStore
        if redis_url is None:
            embedded = EmbeddedControlStore(clock_ms=self.clock)
            self.warm = EmbeddedWarmTier(
                1 << 30, 1_000_000, clock_ms=self.clock, epoch_source=embedded.epoch_now
            )
            self.control = embedded
        else:
            prefix = f"sm{os.getpid()}-{next(_MACHINES)}:"
            warm = RedisWarmTier(
                redis_url, key_prefix=prefix, read_timeout_s=10.0, write_timeout_s=10.0
            )
            self.warm = warm
            self.control = RedisControlStore(
                redis_url,
                key_prefix=prefix,
                timeout_s=10.0,
                lookup_timeout_s=10.0,
                client=warm.client,
            )
        rules = RuleSet()
        self.freshness = Freshness(self.control, rules)
        self.cache = ResultCache(
            CacheTiers(HotTier(1 << 30, HOT_ENTRIES), self.warm),
            CacheSettings(
                TtlPolicy(DEFAULT_TTL_S, MAX_TTL_S),
                max_payload_bytes=1 << 20,
                max_chunks=LimitsConfig().max_chunks,
                leases=LeaseConfig(
                    ttl_s=LEASE_TTL_S,
                    hold_ttl_ms=HOLD_TTL_MS,
                    allow_unleased_store=True,
                    unleased_window_s=UNLEASED_WINDOW_S,
                ),
            ),
            freshness=self.freshness,
            signer=LeaseSigner(os.urandom(32)),
            clock_ms=self.clock,
        )
        self.invalidator = Invalidator(self.control, self.freshness, self.warm)
        self.reclaimer = Reclaimer(
            self.warm, self.cache.hot, self.control, rules, CacheStats(), keys_per_s=10**9
        )
        # The reference model.
        self.epoch = 0
        self.model_rules: list[ModelRule] = []
        self.stored: dict[int, Stored] = {}
        self.holders: dict[int, tuple[bytes, int, int]] = {}
        """key -> (lease id, the lease's expiry, its epoch): the key is held while the
        lease lives and no rule newer than its epoch kills the key (then the keeper gives
        the hold back: nobody should wait for a result that cannot be stored)."""
        self.payloads = itertools.count()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one cache call to completion on the machine's own loop."""
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        """Finish background deletions and close the loop."""
        self.run(self.cache.drain())
        self.run(self.warm.close())
        self.loop.close()

    def store_now(self) -> int:
        """The store's clock: the test clock for the embedded stores, Redis's (real time)."""
        return int(time.time() * 1000) if self.redis else self.clock.now

    # --- the model ------------------------------------------------------------------

    def newest_rule(self, i: int) -> int:
        return max(
            (r.epoch for r in self.model_rules if r.selector.matches(KEYS[i].dims)), default=0
        )

    def expected_hit(self, i: int) -> bytes | None:
        """The payload a lookup must return, or None for a MISS."""
        entry = self.stored.get(i)
        if entry is None or entry.expires_at_ms <= self.clock.now:
            return None
        if self.newest_rule(i) > entry.stamp:
            return None
        return entry.payload

    def may_be_gone(self, i: int) -> bool:
        """The store's own clock may have expired key i's entry (Redis only)."""
        entry = self.stored.get(i)
        margin = REDIS_EXPIRY_MARGIN_MS if self.redis else 0
        return entry is not None and entry.store_expires_at_ms - margin <= self.store_now()

    def check(self, i: int, result: LookupResult) -> HeldLease | None:
        """Compare one lookup with the model; account the lease a MISS handed out."""
        want = self.expected_hit(i)
        event(f"lookup: {result.outcome.value}")
        assert not result.degraded
        entry = self.stored.get(i)
        if (
            want is not None
            and entry is not None
            and result.outcome is Outcome.MISS
            and (entry.warm_gone or self.may_be_gone(i))
        ):
            # Redis dropped it on its clock; the hot tier may still hold it on the cache's
            # (here a frozen test clock, so only its own expiry or eviction removes it):
            # kept, so that a later hot HIT must still be exactly this payload.
            event("lookup: expired by the store's clock")
            self.stored[i] = dataclasses.replace(entry, warm_gone=True)
            want = None
        if want is not None:
            assert result.outcome is Outcome.HIT, f"lost entry for key {i}"
            assert result.entry is not None
            assert result.entry.payload == want, "foreign or outdated payload"
            assert not result.lease
            if entry is not None and entry.warm_gone:
                assert result.tier is TierName.HOT, "read back from a store that dropped it"
            return None
        assert result.outcome is Outcome.MISS, f"served a dead, expired or unknown key {i}"
        assert result.lease
        _, _, epoch, expires, lease_id = _LEASE_BODY.unpack(result.lease[: _LEASE_BODY.size])
        assert epoch == self.epoch, "a lease carries the epoch current when it was issued"
        assert expires == self.clock.now + LEASE_TTL_S * 1000
        holder = self.holders.get(i)
        free = holder is None or holder[1] <= self.clock.now or self.newest_rule(i) > holder[2]
        assert result.lease_holder is free
        if free:
            self.holders[i] = (lease_id, expires, epoch)
        return HeldLease(i, result.lease, epoch, expires, lease_id)

    def expected_ttl_s(self, requested: int) -> int:
        return max(1, min(requested or DEFAULT_TTL_S, MAX_TTL_S))

    def release(self, lease: HeldLease) -> None:
        holder = self.holders.get(lease.key)
        if holder is not None and holder[0] == lease.lease_id:
            del self.holders[lease.key]

    # --- rules ------------------------------------------------------------------------

    def keep_holds(self) -> None:
        """One round of the hold keeper, as it runs every quarter hold TTL in a sidecar:
        the holds of expired or killed leases given back, the others renewed."""
        self.run(self.cache._flight.keeper.renew_once())

    @rule(target=leases, i=key_indices)
    def lookup(self, i: int) -> Any:
        """One lookup; a MISS's lease goes to the bundle for later stores."""
        self.keep_holds()
        held = self.check(i, self.run(self.cache.lookup(LookupQuery(KEYS[i]))))
        return multiple() if held is None else held

    @rule(target=leases, lease=leases)
    def lookup_again(self, lease: HeldLease) -> Any:
        """Look up a key that was looked up before (so stored entries get read back)."""
        return self.lookup(lease.key)

    @rule(target=leases, indices=st.lists(key_indices, min_size=1, max_size=6, unique=True))
    def lookup_batch(self, indices: list[int]) -> Any:
        """A batch lookup answers each key as a single lookup would."""
        self.keep_holds()
        results = self.run(self.cache.lookup_many([LookupQuery(KEYS[i]) for i in indices]))
        held = [self.check(i, r) for i, r in zip(indices, results, strict=True)]
        return multiple(*(h for h in held if h is not None))

    @rule(lease=leases, ttl=requested_ttls_s())
    def store(self, lease: HeldLease, ttl: int) -> None:
        """Store with a remembered lease, perhaps after invalidations or past its expiry."""
        payload = f"{lease.key}:{next(self.payloads)}".encode()
        now = self.clock.now
        if lease.expires_at_ms <= now:
            event("store: expired lease")
            with pytest.raises(FailedPrecondition):
                self.run(self.cache.store(KEYS[lease.key], payload, ttl, lease_token=lease.token))
            return
        result = self.run(self.cache.store(KEYS[lease.key], payload, ttl, lease_token=lease.token))
        self.release(lease)
        if self.newest_rule(lease.key) > lease.epoch:
            event("store: stale lease")
            assert result.status is StoreStatus.STALE_LEASE
            return
        assert result.status is StoreStatus.STORED
        assert result.ttl_s == self.expected_ttl_s(ttl)
        self.stored[lease.key] = Stored(
            payload, lease.epoch, now + result.ttl_s * 1000, self.store_now() + result.ttl_s * 1000
        )

    @rule(i=key_indices, ttl=requested_ttls_s())
    def store_unleased(self, i: int, ttl: int) -> None:
        """An unleased store is stamped with the epoch of unleased_window_s ago."""
        payload = f"{i}:{next(self.payloads)}".encode()
        now = self.clock.now
        cutoff = now - UNLEASED_WINDOW_S * 1000
        stamp = max((r.epoch for r in self.model_rules if r.time_ms <= cutoff), default=0)
        result = self.run(self.cache.store(KEYS[i], payload, ttl))
        if self.newest_rule(i) > stamp:
            assert result.status is StoreStatus.STALE_LEASE
            return
        assert result.status is StoreStatus.STORED
        ttl_ms = self.expected_ttl_s(ttl) * 1000
        self.stored[i] = Stored(payload, stamp, now + ttl_ms, self.store_now() + ttl_ms)

    @rule(selector=selectors())
    def invalidate(self, selector: Selector) -> None:
        """Commit a rule; it gets the next epoch and kills matching older entries."""
        record = self.run(self.invalidator.invalidate(selector, "state machine", "test"))
        self.epoch += 1
        assert record.epoch == self.epoch
        assert record.selector == selector
        # The rule's commit time is the store's clock (the test clock for the embedded one).
        if not self.redis:
            assert record.time_ms == self.clock.now
        self.model_rules.append(ModelRule(selector, self.epoch, record.time_ms))

    @rule(ms=clock_steps_ms())
    def advance(self, ms: int) -> None:
        """Move time: entries, leases and holder keys expire. The keeper renews the live
        holds meanwhile: on the embedded store's test clock, time moves in its steps."""
        if self.redis:
            self.clock.now += ms
            return
        step = HOLD_TTL_MS // 4
        while ms > 0:
            self.clock.now += min(step, ms)
            ms -= step
            self.keep_holds()

    @rule()
    def reclaim(self) -> None:
        """Background reclaim removes only what is dead (later lookups would notice)."""
        self.run(self.reclaimer.run_pass())
        self.reclaimer.reclaim_hot()


InvalidationMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None
)
TestInvalidationMachine = InvalidationMachine.TestCase


@pytest.mark.redis
@pytest.mark.timeout(300)
def test_invalidation_machine_on_redis(shared_redis: RedisServer | RedisClusterProcesses) -> None:
    """The same machine on one real Redis and on a real Redis Cluster: lookups, batches,
    leased and unleased stores, invalidations and reclaim answer as the model says."""
    url = shared_redis.url

    class OnRedis(InvalidationMachine):
        def __init__(self) -> None:
            super().__init__(url)

    run_state_machine_as_test(
        OnRedis,
        settings=settings(max_examples=25, stateful_step_count=30, deadline=None),
    )

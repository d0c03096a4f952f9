"""HoldKeeper (renewal of this sidecar's single-flight holds) and waiters that take only
a result they can use, on the embedded stores with a clock that moves when told."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.backends.embedded_holding import EmbeddedHolding
from sidecar.config import LeaseConfig
from sidecar.entries import Entry
from sidecar.invalidation.embedded_store import EmbeddedControlStore
from sidecar.invalidation.rules import Rule, RuleSet, Selector
from sidecar.keys import KeyDigest
from sidecar.results.cache import ResultCache
from sidecar.results.hold_keeper import HoldKeeper
from sidecar.results.lease_tokens import Lease, LeaseSigner
from sidecar.results.types import LookupQuery, Outcome
from sidecar.testing import Clock
from sidecar.tiers.base import WarmItem
from tests.support.caches import held_cache
from tests.support.keys import cache_key

TTL_MS = 800
DIMS = cache_key("any").dims  # tenant acme


@pytest.fixture
def clock() -> Clock:
    return Clock()


class Kept:
    """A HoldKeeper over an embedded control store, with what it released."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.control = EmbeddedControlStore(clock_ms=clock)
        self.rules = RuleSet()
        self.signer = LeaseSigner(b"k" * 32)
        self.released: list[Lease] = []
        self.keeper = HoldKeeper(self.control, self.rules, clock, TTL_MS, self._release)

    async def _release(self, lease: Lease) -> None:
        self.released.append(lease)
        await self.control.release_holder(lease.digest, lease.lease_id)

    def hold(self, n: int, lease_s: float = 60) -> Lease:
        """Take the hold of digest `n` (as a lookup would) and keep it."""
        digest = KeyDigest(n.to_bytes(32, "big"))
        lease, _ = self.signer.issue(digest, self.rules.epoch, self.clock() + int(lease_s * 1000))
        assert self.control.hold_now(digest, lease.lease_id, TTL_MS)
        self.keeper.keep(lease, DIMS)
        return lease

    def taken(self, lease: Lease) -> bool:
        """Does another lease find the key held?"""
        if self.control.hold_now(lease.digest, b"probe", 1):
            self.control.release_now(lease.digest, b"probe")
            return False
        return True


async def test_a_kept_hold_outlives_its_ttl_and_an_unkept_one_does_not(clock: Clock) -> None:
    kept = Kept(clock)
    mine = kept.hold(1)
    dropped = kept.hold(2)
    kept.keeper.drop(dropped)
    for _ in range(5):  # 5 x 600 ms: past the 800 ms TTL several times over
        clock.advance(0.6)
        await kept.keeper.renew_once()
    assert kept.taken(mine)
    assert not kept.taken(dropped)
    assert kept.keeper.renewals == 5
    await kept.keeper.close()


async def test_a_kept_hold_survives_a_stalled_loop_past_its_ttl(clock: Clock) -> None:
    """The loop stalls 1 s (past the 800 ms TTL) before the keeper's renewal runs: in a
    store inside the process, another caller (a waiter whose timer came first) does not
    take the key, and the late renewal keeps it. Before: the waiter took it over and
    computed the key a second time (seen at load 20 in test_gateway_flight_edges)."""
    kept = Kept(clock)
    lease = kept.hold(4)
    clock.advance(1.0)
    assert not kept.control.hold_now(lease.digest, b"a waiter", TTL_MS)
    await kept.keeper.renew_once()
    assert kept.keeper.held == 1
    assert kept.taken(lease)
    await kept.keeper.close()
    clock.advance(1.0)  # no longer kept (shut down): it lapses within the TTL
    assert not kept.taken(lease)


async def test_a_hold_lost_to_another_lease_is_forgotten_not_taken_back(clock: Clock) -> None:
    kept = Kept(clock)
    # As a shared store judges holds (by TTL alone: Redis, where other pods take keys):
    kept.control.judge_holds_by(lambda lease_id: False)
    lease = kept.hold(3)
    clock.advance(1.0)  # lapsed (say, renewals failed), and another caller took the key
    assert kept.control.hold_now(lease.digest, b"someone else", TTL_MS)
    await kept.keeper.renew_once()
    assert kept.keeper.held == 0
    assert kept.control._holders[lease.digest][0] == b"someone else"
    await kept.keeper.close()


async def test_holds_whose_result_cannot_be_stored_are_given_back(clock: Clock) -> None:
    """An expired lease (its Store would be refused) and a key an invalidation killed
    since the lease was issued (STALE_LEASE): both holds go back at the next round."""
    kept = Kept(clock)
    expiring = kept.hold(4, lease_s=0.5)
    killed = kept.hold(5)
    kept.rules.add(Rule(1, Selector(tenant="acme"), clock()))
    kept.rules.advance(1)
    clock.advance(0.6)
    await kept.keeper.renew_once()
    assert {lease.lease_id for lease in kept.released} == {expiring.lease_id, killed.lease_id}
    assert not kept.taken(expiring)
    assert not kept.taken(killed)
    assert kept.keeper.held == 0
    await kept.keeper.close()


async def test_renewal_runs_on_its_own_while_holds_are_kept(clock: Clock) -> None:
    """The keeper's task renews every quarter TTL by itself and stops with close()."""
    kept = Kept(clock)
    kept.hold(7)
    await asyncio.sleep(TTL_MS / 1000 / 4 * 3)
    assert kept.keeper.renewals >= 2
    await kept.keeper.close()
    renewals = kept.keeper.renewals
    await asyncio.sleep(TTL_MS / 1000 / 2)
    assert kept.keeper.renewals == renewals


def _cache(clock: Clock) -> ResultCache:
    control = EmbeddedControlStore(clock_ms=clock)
    return held_cache(clock, control, leases=LeaseConfig(hold_ttl_ms=TTL_MS))[0]


async def test_waiters_that_cannot_use_the_entry_wait_for_its_one_recomputation(
    clock: Clock,
) -> None:
    """An entry the callers cannot answer from is a MISS: the first recomputes it under
    the hold, the others wait for that result instead of computing their own."""
    cache = _cache(clock)
    k = cache_key("stored in a form they cannot use")
    first = await cache.lookup(LookupQuery(k, 0))
    await cache.store(k, b"old form", lease_token=first.lease)

    def accept(entry: Entry) -> bool:
        return entry.payload != b"old form"

    q = LookupQuery(k, 0, 5_000, accept=accept)
    holder = await cache.lookup(q)
    assert (holder.outcome, holder.lease_holder) == (Outcome.MISS, True)
    waiters = [asyncio.create_task(cache.lookup(q)) for _ in range(2)]
    await asyncio.sleep(0.1)
    assert not any(w.done() for w in waiters), [w.result() for w in waiters if w.done()]
    await cache.store(k, b"new form", lease_token=holder.lease)
    got = await asyncio.wait_for(asyncio.gather(*waiters), 5)
    assert [(r.outcome, r.entry.payload if r.entry else None) for r in got] == [
        (Outcome.HIT, b"new form")
    ] * 2
    await cache.drain()


async def test_max_age_waiters_wait_for_the_refresh(clock: Clock) -> None:
    """Callers whose max age the stored entry exceeds: one refreshes it, the others wait
    for that result (before, each waiter got the old entry, refused it and computed)."""
    cache = _cache(clock)
    k = cache_key("refreshed for max age")
    first = await cache.lookup(LookupQuery(k, 0))
    await cache.store(k, b"old", lease_token=first.lease)
    clock.advance(5)
    q = LookupQuery(k, max_age_s=2, wait_ms=5_000)
    holder = await cache.lookup(q)
    assert (holder.outcome, holder.lease_holder) == (Outcome.MISS, True)
    waiter = asyncio.create_task(cache.lookup(q))
    await asyncio.sleep(0.1)
    assert not waiter.done(), waiter.result()
    await cache.store(k, b"refreshed", lease_token=holder.lease)
    got = await asyncio.wait_for(waiter, 5)
    assert got.outcome is Outcome.HIT
    assert got.entry is not None
    assert got.entry.payload == b"refreshed"
    await cache.drain()


class SlowReply(EmbeddedHolding):
    """The embedded pair, but a store's reply comes 200 ms after its write and release (as
    a Redis reply may, on another connection than a concurrent hold's): meanwhile the
    hold is free and the storing sidecar's hot tier still has the entry it replaces."""

    async def put_and_release(self, item: WarmItem, lease_id: bytes) -> None:
        await super().put_and_release(item, lease_id)
        await asyncio.sleep(0.2)


async def test_a_hold_won_before_the_hot_tier_is_updated_finds_the_warm_entry(
    clock: Clock,
) -> None:
    """Between a holder's write-and-release and its hot tier's update, a waiter's watch
    wins the hold, and a new lookup takes it too: both must read the result from the warm
    tier (where it is), not take the old hot entry for "nothing there" and compute again."""
    cache = held_cache(clock, EmbeddedControlStore(clock_ms=clock), SlowReply)[0]
    k = cache_key("replaced while a waiter watches")
    first = await cache.lookup(LookupQuery(k, 0))
    await cache.store(k, b"old form", lease_token=first.lease)

    def accept(entry: Entry) -> bool:
        return entry.payload != b"old form"

    q = LookupQuery(k, 0, 5_000, accept=accept)
    holder = await cache.lookup(q)
    assert holder.lease_holder
    waiter = asyncio.create_task(cache.lookup(q))
    await asyncio.sleep(0.05)
    storing = asyncio.create_task(cache.store(k, b"new form", lease_token=holder.lease))
    await asyncio.sleep(0.1)  # written and released; the hot tier still has "old form"
    assert not storing.done()
    newcomer = await cache.lookup(q)
    got = await asyncio.wait_for(waiter, 5)
    await storing
    for r in (got, newcomer):
        assert (r.outcome, r.lease_holder) == (Outcome.HIT, False), r
        assert r.entry is not None
        assert r.entry.payload == b"new form"
    await cache.drain()

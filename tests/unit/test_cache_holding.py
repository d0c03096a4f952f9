"""ResultCache over a HoldingStore (the embedded pair here; Redis in
tests/integration/test_read_and_hold.py): a MISS's hold is taken by the read itself,
a store's release goes with its write, and the separate calls are used only where the
read could not decide (a value there but not usable)."""

from __future__ import annotations

import asyncio

from sidecar import entries
from sidecar.entries import Entry
from sidecar.invalidation.embedded_store import EmbeddedControlStore
from sidecar.keys import KeyDigest
from sidecar.results.cache import ResultCache
from sidecar.results.types import LookupQuery, Outcome, StoreStatus
from sidecar.testing import Clock
from sidecar.tiers.base import WarmItem
from sidecar.tiers.embedded import EmbeddedWarmTier
from tests.support.caches import held_cache
from tests.support.keys import cache_key


class CountingControl(EmbeddedControlStore):
    """The embedded control store, counting the separate hold and release calls."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock_ms=clock)
        self.acquires = 0
        self.releases = 0

    async def acquire_holder(self, digest: KeyDigest, lease_id: bytes, ttl_ms: int) -> bool:
        self.acquires += 1
        return await super().acquire_holder(digest, lease_id, ttl_ms)

    async def release_holder(self, digest: KeyDigest, lease_id: bytes) -> None:
        self.releases += 1
        await super().release_holder(digest, lease_id)


def _cache(clock: Clock) -> tuple[ResultCache, CountingControl, EmbeddedWarmTier]:
    control = CountingControl(clock)
    cache, warm = held_cache(clock, control)
    return cache, control, warm


def _free(control: EmbeddedControlStore, digest: KeyDigest) -> bool:
    """Nobody holds `digest` now (a probe hold is taken and given back)."""
    if not control.hold_now(digest, b"probe", 1000):
        return False
    control.release_now(digest, b"probe")
    return True


async def test_a_miss_is_held_by_its_read_and_released_by_its_store(clock: Clock) -> None:
    """The MISS holds the key without a separate hold call; a second caller is told
    someone holds it; the store releases it without a separate release call."""
    cache, control, _ = _cache(clock)
    k = cache_key("held by the read")
    first = await cache.lookup(LookupQuery(k, 0))
    assert (first.outcome, first.lease_holder) == (Outcome.MISS, True)
    second = await cache.lookup(LookupQuery(k, 0))
    assert (second.outcome, second.lease_holder) == (Outcome.MISS, False)
    assert not _free(control, k.digest)
    stored = await cache.store(k, b"answer", lease_token=first.lease)
    assert stored.status is StoreStatus.STORED
    assert _free(control, k.digest)
    assert (control.acquires, control.releases) == (0, 0)
    hit = await cache.lookup(LookupQuery(k, 0))
    assert hit.outcome is Outcome.HIT
    assert hit.entry is not None
    assert hit.entry.payload == b"answer"


async def test_a_waiter_gets_the_holders_result(clock: Clock) -> None:
    """wait_ms > 0: the caller that finds the key held waits and gets the stored HIT."""
    cache, _, _ = _cache(clock)
    k = cache_key("waited for")
    holder = await cache.lookup(LookupQuery(k, 0, 5_000))
    assert holder.lease_holder
    waiter = asyncio.create_task(cache.lookup(LookupQuery(k, 0, 5_000)))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    await cache.store(k, b"the one answer", lease_token=holder.lease)
    got = await asyncio.wait_for(waiter, 5)
    assert got.outcome is Outcome.HIT
    assert got.entry is not None
    assert got.entry.payload == b"the one answer"


async def test_an_unusable_value_falls_back_to_the_separate_hold(clock: Clock) -> None:
    """A value under the digest that is not this key's entry (other key material) is a
    MISS the read did not hold: the separate hold call takes it."""
    cache, control, warm = _cache(clock)
    k, other = cache_key("mine"), cache_key("someone else's")
    foreign = Entry(
        material=other.material, payload=b"not yours", created_at_ms=clock(), ttl_s=60, epoch=0
    )
    await warm.put_many([WarmItem(k.digest, entries.encode(foreign), 60_000)])
    miss = await cache.lookup(LookupQuery(k, 0))
    assert (miss.outcome, miss.lease_holder) == (Outcome.MISS, True)
    assert control.acquires == 1
    assert not _free(control, k.digest)


async def test_holds_of_an_untrusted_read_are_given_back(clock: Clock) -> None:
    """A read whose store epoch is behind the rules applied here (the store lost writes)
    answers a degraded MISS, which holds nothing: the holds it took are released."""
    cache, control, _ = _cache(clock)
    cache.rules.advance(5)  # the store's epoch is 0
    k = cache_key("read during a store restart")
    miss = await cache.lookup(LookupQuery(k, 0))
    assert (miss.outcome, miss.degraded, miss.lease_holder) == (Outcome.MISS, True, False)
    await cache.drain()
    assert _free(control, k.digest)

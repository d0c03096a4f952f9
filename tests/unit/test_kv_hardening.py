"""KV hot tier hardening (issue 15 item 4) on fakes: attachment liveness, a lookup's
lease across a promotion wait, slot generations, and the bounded expiry heap."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.errors import FailedPrecondition, ResourceExhausted
from sidecar.kv.pins import LeaseTable
from tests.support.kv_tier import Clock, Setup, SlowWarm

CHAIN = [b"h0", b"h1", b"h2"]


def unpinned(s: Setup) -> bool:
    index = s.tier.index
    return all(index.pins(slot) == 0 for slot in range(index.num_slots))


async def test_dead_attachments_are_reclaimed_with_their_pins() -> None:
    """Processes that never detach fill the table (RESOURCE_EXHAUSTED naming the setting,
    even for a new fingerprint) only until their ttl passes; then they are reclaimed
    with their leases' pins and a new process attaches and gets every slot."""
    s = Setup(slots=4, max_attachments=3, attachment_ttl_ms=1000)
    first = await s.attach("fp-v1")
    await s.tier.allocate(first, 2, lease_ttl_ms=600_000)
    second = await s.attach("fp-v1")
    await s.put(second, CHAIN[:1])
    await s.tier.lookup_prefix(second, "t", "", CHAIN[:1], lease_ttl_ms=600_000)
    await s.attach("fp-v1")
    for fp in ("fp-v1", "fp-v2"):
        with pytest.raises(ResourceExhausted, match="INFERCACHE_KV_MAX_ATTACHMENTS"):
            await s.attach(fp)
    s.clock.now += 1.001
    fresh = await s.attach("fp-v1")
    assert s.tier.stats.expired_attachments == 3
    assert len(s.tier.attachments) == 1
    slots, _ = await s.tier.allocate(fresh, 4)
    assert sorted(slots) == [0, 1, 2, 3]
    with pytest.raises(FailedPrecondition, match="expired"):
        await s.tier.lookup_prefix(first, "t", "", CHAIN)


async def test_any_call_or_renew_attachment_keeps_an_attachment_alive() -> None:
    """An attachment heard from within its ttl survives; one left silent is reclaimed."""
    s = Setup(attachment_ttl_ms=1000)
    renewed, busy, silent = [await s.attach("fp") for _ in range(3)]
    for _ in range(3):
        s.clock.now += 0.6
        view = await s.tier.keep_alive(renewed)
        assert view.ttl_ms == 1000
        await s.tier.lookup_prefix(busy, "t", "", CHAIN)
    assert s.tier.attachments.find(silent) is None
    assert s.tier.attachments.find(renewed) is not None
    assert s.tier.attachments.find(busy) is not None


async def test_keep_alive_of_a_superseded_or_detached_attachment_is_refused() -> None:
    """RenewAttachment says FailedPrecondition when the process must attach again."""
    s = Setup()
    old = await s.attach("fp-v1")
    await s.attach("fp-v2")
    with pytest.raises(FailedPrecondition, match="superseded"):
        await s.tier.keep_alive(old)
    gone = await s.attach("fp-v2")
    await s.tier.detach(gone)
    with pytest.raises(FailedPrecondition, match="unknown"):
        await s.tier.keep_alive(gone)


async def blocked_lookup(s: Setup, slow: SlowWarm) -> tuple[str, asyncio.Task[object]]:
    """v1's chain demoted to warm and h0 promoted back hot; a lookup of the whole chain
    (lease ttl 100 ms) that has pinned h0 and waits on the warm tier for h1, h2."""
    v1 = await s.attach("fp-v1")
    await s.put(v1, CHAIN)
    await s.attach("fp-v2")
    await s.tier.settled()
    back = await s.attach("fp-v1")
    assert len((await s.tier.lookup_prefix(back, "t", "", CHAIN[:1], lease_ttl_ms=1)).slots) == 1
    slow.gate.clear()
    slow.entered.clear()
    task: asyncio.Task[object] = asyncio.create_task(
        s.tier.lookup_prefix(back, "t", "", CHAIN, lease_ttl_ms=100)
    )
    await slow.entered.wait()
    return back, task


@pytest.mark.parametrize("meanwhile", ["lease_lapsed", "detached", "attachment_expired"])
async def test_lookup_waiting_for_a_promotion_never_pins_under_a_dead_lease(
    meanwhile: str,
) -> None:
    """When the lease (or the attachment) of a lookup dies during its promotion wait,
    the lookup pins nothing under it: it answers a live lease holding exactly its
    slots, or FailedPrecondition with nothing pinned."""
    slow = SlowWarm(open_gate=True)
    s = Setup(slots=6, warm=slow, promote_timeout_ms=10_000, attachment_ttl_ms=1000)
    aid, task = await blocked_lookup(s, slow)
    other = await s.attach("fp-v1")
    if meanwhile == "lease_lapsed":
        s.clock.now += 0.2
        # Any call sweeps: the lookup's lease expires, h0 is unpinned.
        await s.tier.lookup_prefix(other, "t", "", [b"zz"], hot_only=True)
        assert s.tier.stats.expired_leases >= 1
    elif meanwhile == "detached":
        await s.tier.detach(aid)
    else:
        for _ in range(2):  # `other` stays alive, the waiting one goes silent
            s.clock.now += 0.6
            await s.tier.keep_alive(other)  # sweeps: the silent attachment is reclaimed
        assert s.tier.attachments.find(aid) is None
    slow.gate.set()
    if meanwhile == "lease_lapsed":
        result = await task
        assert len(result.slots) == 3  # type: ignore[attr-defined]
        released = await s.tier.release(aid, result.lease.lease_id)  # type: ignore[attr-defined]
        assert released == 3
    else:
        with pytest.raises(FailedPrecondition):
            await task
    await s.tier.settled()
    assert unpinned(s)
    s.tier.index.check()


async def test_a_reused_slot_changes_generation_a_pinned_one_never() -> None:
    """Lookups answer generations; allocation bumps them, pins keep them."""
    s = Setup(slots=3)
    a = await s.attach("fp")
    await s.put(a, CHAIN[:2])
    held = await s.tier.lookup_prefix(a, "t", "", CHAIN[:1])
    early = await s.tier.lookup_prefix(a, "t", "", CHAIN[1:2])
    assert held.generations == s.tier.generations(held.slots)
    assert all(g >= 1 for g in held.generations + early.generations)
    await s.tier.release(a, early.lease.lease_id)  # type: ignore[union-attr]
    for i in range(4):  # churn through the unpinned slots
        await s.put(a, [b"x%d" % i, b"y%d" % i])
    assert s.tier.generations(held.slots) == held.generations
    assert s.tier.generations(early.slots) != early.generations


async def test_renew_lease_does_not_grow_the_expiry_heap() -> None:
    """10,000 RenewLease calls on one lease leave the heap at its bound, and churn of
    short-lived leases beside a long one does too."""
    s = Setup()
    a = await s.attach("fp")
    _, lease = await s.tier.allocate(a, 1)
    for _ in range(10_000):
        s.clock.now += 0.001
        await s.tier.renew(a, lease.lease_id, 30_000)
    # One live lease: the bound is 2 x 1 + the slack (64), whatever the renewals.
    assert len(s.tier.leases._expiry) <= 66
    for _ in range(2_000):
        _, short = await s.tier.allocate(a, 1)
        await s.tier.release(a, short.lease_id)
    assert len(s.tier.leases._expiry) <= 66


def test_lease_expiry_follows_renewals_both_ways() -> None:
    """An extended lease does not expire at its old deadline; a shortened one expires at
    its new one; a released one never comes back."""
    clock = Clock()
    table = LeaseTable(100, clock)
    longer, shorter, gone = (table.create("a", 1000) for _ in range(3))
    table.renew(longer, 5000)
    table.renew(shorter, 100)
    table.remove(gone.lease_id)
    clock.now += 0.2
    assert table.expired() == [shorter]
    clock.now += 1.0
    assert table.expired() == []
    clock.now += 4.0
    assert table.expired() == [longer]
    assert len(table) == 0
    assert table.holders() == set()

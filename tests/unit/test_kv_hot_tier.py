"""KV hot tier logic on an in-memory pool and warm store: scoping, leases, versions."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.errors import FailedPrecondition, InvalidArgument, ResourceExhausted
from sidecar.kv.layout import make_layout, version_tag
from sidecar.kv.warm import encode_block
from tests.support.kv_tier import BLOCK, LAYOUT, Setup, SlowWarm, pattern

CHAIN = [b"h0", b"h1", b"h2"]


async def test_attach_with_other_weights_than_the_pods_is_refused_before_any_pool() -> None:
    """When the pod knows its fingerprint, another one fails FailedPrecondition (counted)
    and creates no pool; the pod's own attaches."""
    s = Setup(pod_fingerprint="fp-pod")
    with pytest.raises(FailedPrecondition, match=r"fp-other.*fp-pod"):
        await s.tier.attach("fp-other", "", LAYOUT)
    assert s.pools == []
    assert s.tier.stats.foreign_attachments_refused == 1
    aid = await s.attach("fp-pod")
    assert await s.put(aid, CHAIN[:1])


async def test_attach_with_other_weights_is_accepted_when_allowed_or_pod_unknown() -> None:
    """allow_foreign (INFERCACHE_ALLOW_FOREIGN_MODEL_STORE), or a pod that knows no
    fingerprint, accepts any fingerprint; it becomes the current version as usual."""
    for s in (Setup(pod_fingerprint="fp-pod", allow_foreign=True), Setup()):
        first = await s.attach("fp-other")
        assert s.tier.attachments.current == version_tag("fp-other")
        await s.attach("fp-pod")
        with pytest.raises(FailedPrecondition, match="superseded"):
            await s.tier.allocate(first, 1)
        assert s.tier.stats.foreign_attachments_refused == 0


async def test_commit_then_lookup_returns_the_prefix_pinned() -> None:
    """Committed blocks are found in chain order up to the first miss, pinned under a lease."""
    s = Setup()
    aid = await s.attach("fp-a")
    slots = await s.put(aid, CHAIN[:2])
    r = await s.tier.lookup_prefix(aid, "t", "", CHAIN)
    assert r.slots == slots
    assert r.lease is not None
    assert not r.retry_later
    assert all(s.tier.index.pins(x) == 1 for x in slots)
    assert await s.tier.release(aid, r.lease.lease_id) == 2
    assert all(s.tier.index.pins(x) == 0 for x in slots)
    none = await s.tier.lookup_prefix(aid, "t", "", [b"zz", *CHAIN])
    assert none.slots == []
    assert none.lease is None


async def test_scope_separates_fingerprint_adapter_tenant_salt_and_layout() -> None:
    """The same client hashes under another scope dimension find nothing."""
    s = Setup(slots=8)
    aid = await s.attach("fp-a")
    await s.put(aid, CHAIN)
    other_adapter = await s.attach("fp-a", adapter="lora-1")
    other_layout = await s.attach(
        "fp-a",
        layout=make_layout(
            num_layers=2, num_kv_heads=1, head_dim=4, tokens_per_block=2, dtype="float32", tp_size=2
        ),
    )
    for who, tenant, salt in (
        (aid, "other-tenant", ""),
        (aid, "t", "salt"),
        (other_adapter, "t", ""),
        (other_layout, "t", ""),
    ):
        r = await s.tier.lookup_prefix(who, tenant, salt, CHAIN, hot_only=True)
        assert r.slots == [], (tenant, salt)
    assert len((await s.tier.lookup_prefix(aid, "t", "", CHAIN)).slots) == 3


async def test_an_attachment_of_fingerprint_a_never_receives_blocks_of_b() -> None:
    """After B attaches, A's attachment is refused and B's lookups miss A's blocks."""
    s = Setup()
    a = await s.attach("fp-a")
    await s.put(a, CHAIN)
    b = await s.attach("fp-b")
    with pytest.raises(FailedPrecondition, match="superseded"):
        await s.tier.lookup_prefix(a, "t", "", CHAIN)
    with pytest.raises(FailedPrecondition):
        await s.tier.allocate(a, 1)
    r = await s.tier.lookup_prefix(b, "t", "", CHAIN)
    assert r.slots == []


async def test_new_fingerprint_demotes_previous_blocks_to_warm() -> None:
    """v1's blocks leave the hot index at once and land in the warm store, intact."""
    s = Setup()
    a = await s.attach("fp-v1")
    slots = await s.put(a, CHAIN)
    scope_keys = [s.tier.index.key_of(x) for x in slots]
    await s.attach("fp-v2")
    assert s.tier.index.cached_blocks == 0
    await s.tier.settled()
    assert s.tier.index.free_slots == 4
    assert s.warm is not None
    v1 = version_tag("fp-v1")
    for key, h in zip(scope_keys, CHAIN, strict=True):
        assert key is not None
        assert s.warm.values[(v1, key)] == encode_block(key, pattern(h), s.warm.keys, v1)
    assert s.tier.stats.demoted_blocks == 3


async def test_rollback_promotes_warm_blocks_back_with_their_bytes() -> None:
    """v1 -> v2 -> v1: v1's lookup promotes its demoted blocks into slots with the same bytes."""
    s = Setup()
    a = await s.attach("fp-v1")
    await s.put(a, CHAIN)
    await s.attach("fp-v2")
    await s.tier.settled()
    back = await s.attach("fp-v1")
    r = await s.tier.lookup_prefix(back, "t", "", CHAIN)
    assert len(r.slots) == 3
    assert r.promoted == 3
    assert list(map(bytes, s.tier.pool.read_many(r.slots, BLOCK))) == [pattern(h) for h in CHAIN]
    hot = await s.tier.lookup_prefix(back, "t", "", CHAIN, hot_only=True)
    assert hot.slots == r.slots


async def test_third_version_drops_the_oldest_from_warm_and_hot() -> None:
    """v1, v2, v3: v2 is demoted, v1's warm values are deleted."""
    s = Setup()
    v1 = await s.attach("fp-v1")
    await s.put(v1, CHAIN)
    v2 = await s.attach("fp-v2")
    await s.put(v2, CHAIN)
    await s.tier.settled()
    await s.attach("fp-v3")
    await s.tier.settled()
    assert s.warm is not None
    versions = {v for v, _ in s.warm.values}
    assert versions == {version_tag("fp-v2")}
    assert await s.warm.versions() == [version_tag("fp-v2")]


async def test_corrupt_warm_value_is_not_promoted() -> None:
    """A warm value whose checksum fails is counted and never reaches a slot."""
    s = Setup()
    a = await s.attach("fp-v1")
    await s.put(a, CHAIN[:1])
    await s.attach("fp-v2")
    await s.tier.settled()
    assert s.warm is not None
    [(k, v)] = s.warm.values.items()
    s.warm.values[k] = v[:-1] + bytes([v[-1] ^ 1])
    back = await s.attach("fp-v1")
    r = await s.tier.lookup_prefix(back, "t", "", CHAIN[:1])
    assert r.slots == []
    assert s.tier.stats.corrupt_warm_values == 1


async def test_slow_promotion_answers_retry_later_and_finishes_in_background() -> None:
    """Past the time bound the lookup says ask again; the next lookup finds the blocks hot."""
    s = Setup(promote_timeout_ms=20)
    slow = SlowWarm()
    s.tier._warm = slow
    s.tier._mover = None
    a = await s.attach("fp-v1")
    assert s.tier._mover is not None
    s.tier._mover._warm = slow
    await s.put(a, CHAIN)
    await s.attach("fp-v2")
    await s.tier.settled()
    back = await s.attach("fp-v1")
    r = await s.tier.lookup_prefix(back, "t", "", CHAIN)
    assert r.slots == []
    assert r.retry_later
    assert r.retry_after_ms == 20
    slow.gate.set()
    for _ in range(50):
        await asyncio.sleep(0.01)
        again = await s.tier.lookup_prefix(back, "t", "", CHAIN, hot_only=True)
        if len(again.slots) == 3:
            break
    assert len(again.slots) == 3


async def test_lease_expiry_unpins_and_renewal_keeps_pins() -> None:
    """An expired lease frees its slots; a renewed one keeps them."""
    s = Setup(slots=2, lease_ttl_ms=1000)
    a = await s.attach("fp")
    slots, lease = await s.tier.allocate(a, 2)
    with pytest.raises(ResourceExhausted):
        await s.tier.allocate(a, 1)
    s.clock.now += 0.9
    await s.tier.renew(a, lease.lease_id, 1000)
    s.clock.now += 0.9
    with pytest.raises(ResourceExhausted):
        await s.tier.allocate(a, 1)
    s.clock.now += 0.2
    again, _ = await s.tier.allocate(a, 2)
    assert sorted(again) == sorted(slots)
    with pytest.raises(FailedPrecondition, match="expired"):
        await s.tier.release(a, lease.lease_id)


async def test_leased_slot_is_never_overwritten_by_promotion_or_allocation() -> None:
    """A looked-up slot stays pinned while others churn through the pool."""
    s = Setup(slots=3)
    a = await s.attach("fp")
    await s.put(a, [b"keep"])
    r = await s.tier.lookup_prefix(a, "t", "", [b"keep"])
    for i in range(5):
        await s.put(a, [b"x%d" % i, b"y%d" % i])
    assert list(map(bytes, s.tier.pool.read_many(r.slots, BLOCK))) == [pattern(b"keep")]
    assert (await s.tier.lookup_prefix(a, "t", "", [b"keep"], hot_only=True)).slots == r.slots


async def test_commit_validates_everything_before_publishing() -> None:
    """A commit naming a slot outside the lease publishes nothing."""
    s = Setup()
    a = await s.attach("fp")
    slots, lease = await s.tier.allocate(a, 2)
    with pytest.raises(InvalidArgument, match=r"blocks\[1\]"):
        await s.tier.commit(a, lease.lease_id, "t", "", [(slots[0], b"a"), (3, b"b")])
    assert s.tier.index.cached_blocks == 0
    with pytest.raises(InvalidArgument, match="block_hash"):
        await s.tier.commit(a, lease.lease_id, "t", "", [(slots[0], b"")])
    with pytest.raises(InvalidArgument, match="tenant"):
        await s.tier.commit(a, lease.lease_id, "", "", [(slots[0], b"a")])
    assert await s.tier.commit(a, lease.lease_id, "t", "", [(slots[0], b"a")]) == [False]
    with pytest.raises(InvalidArgument, match="uncommitted"):
        await s.tier.commit(a, lease.lease_id, "t", "", [(slots[0], b"a")])


async def test_duplicate_commit_reports_already_cached_and_frees_the_slot_on_release() -> None:
    """Two requests computing the same block: the second slot is freed, the first is kept."""
    s = Setup()
    a = await s.attach("fp")
    first = await s.put(a, [b"same"])
    slots, lease = await s.tier.allocate(a, 1)
    assert await s.tier.commit(a, lease.lease_id, "t", "", [(slots[0], b"same")]) == [True]
    await s.tier.release(a, lease.lease_id)
    assert (await s.tier.lookup_prefix(a, "t", "", [b"same"])).slots == first
    assert s.tier.index.free_slots == 3


async def test_limits() -> None:
    """Chains over the limit, oversize hashes, oversize layouts and unknown ids are refused."""
    s = Setup(max_chain_blocks=4)
    a = await s.attach("fp")
    with pytest.raises(InvalidArgument, match="limit is 4"):
        await s.tier.lookup_prefix(a, "t", "", [b"x"] * 5)
    with pytest.raises(InvalidArgument, match=r"block_hashes\[1\]"):
        await s.tier.lookup_prefix(a, "t", "", [b"x", b"y" * 65])
    with pytest.raises(InvalidArgument, match="count"):
        await s.tier.allocate(a, 0)
    with pytest.raises(FailedPrecondition, match="unknown KV attachment"):
        await s.tier.allocate("nope", 1)
    big = make_layout(num_layers=4, num_kv_heads=1, head_dim=4, tokens_per_block=2, dtype="float32")
    with pytest.raises(FailedPrecondition, match="SLOT_BYTES"):
        await s.tier.attach("fp", "", big)
    with pytest.raises(InvalidArgument, match="model_fingerprint"):
        await s.tier.attach("", "", LAYOUT)


async def test_detach_releases_leases() -> None:
    """Detaching frees every pin of the attachment."""
    s = Setup()
    a = await s.attach("fp")
    await s.tier.allocate(a, 3)
    assert await s.tier.detach(a) == 3
    assert s.tier.index.free_slots == 4


def test_layout_canonicalisation_and_validation() -> None:
    """tp_size 0 means 1; bad dimensions and dtypes name their field."""
    assert (
        make_layout(
            num_layers=1, num_kv_heads=1, head_dim=1, tokens_per_block=1, dtype="bfloat16"
        ).tp_size
        == 1
    )
    with pytest.raises(InvalidArgument, match=r"layout\.dtype"):
        make_layout(num_layers=1, num_kv_heads=1, head_dim=1, tokens_per_block=1, dtype="int3")
    with pytest.raises(InvalidArgument, match=r"layout\.tp_rank"):
        make_layout(
            num_layers=1,
            num_kv_heads=1,
            head_dim=1,
            tokens_per_block=1,
            dtype="float16",
            tp_size=2,
            tp_rank=2,
        )
    with pytest.raises(InvalidArgument, match=r"layout\.head_dim"):
        make_layout(num_layers=1, num_kv_heads=1, head_dim=0, tokens_per_block=1, dtype="float16")

"""The KV pool's trust boundary, pure logic (issue 25 item 5): trust domains and their
parsing, attachments bound to their tenants, block seals at hand-out, demotion and
promotion."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.errors import PermissionDenied
from sidecar.kv.domains import KEY_FILE, KvDomains, build_domains
from sidecar.kv.hot_tier import KvHotTier
from sidecar.kv.integrity import BlockSeals
from sidecar.kv.movement import KvStats
from sidecar.kv.types import parse_trust_domains
from sidecar.macs import LOCAL
from tests.support.kv_tier import LAYOUT, Setup, pattern

CHAIN = [b"h0", b"h1", b"h2"]


def test_trust_domains_parse_and_refuse_overlaps() -> None:
    assert parse_trust_domains("") == ()
    assert parse_trust_domains(" acme = acme, initech ; globex=globex ") == (
        ("acme", ("acme", "initech")),
        ("globex", ("globex",)),
    )
    for bad in ("acme", "Acme=acme", "a=", "a=x;a=y", "a=x;b=x", "a=x y"):
        with pytest.raises(ValueError, match=r"."):
            parse_trust_domains(bad)


async def test_an_attachment_is_held_to_the_tenants_it_named() -> None:
    """Lookups and commits naming another tenant are PermissionDenied (counted); one that
    named none may use any (no trust domains)."""
    s = Setup()
    bound, _ = await s.tier.attach("fp", "", LAYOUT, tenants=frozenset({"acme"}))
    await s.put(bound.attachment_id, CHAIN[:1], tenant="acme")
    with pytest.raises(PermissionDenied):
        await s.tier.lookup_prefix(bound.attachment_id, "globex", "", CHAIN)
    slots, lease = await s.tier.allocate(bound.attachment_id, 1)
    with pytest.raises(PermissionDenied):
        await s.tier.commit(bound.attachment_id, lease.lease_id, "globex", "", [(slots[0], b"x")])
    assert s.tier.stats.tenants_refused == 2
    free = await s.attach("fp")
    assert (await s.tier.lookup_prefix(free, "acme", "", CHAIN)).slots != []


def _setup_tier(stats: KvStats) -> KvHotTier:
    s = Setup(warm=False)
    s.tier.stats = stats
    s.tier.attachments._stats = stats
    return s.tier


async def test_domains_route_attachments_and_check_the_domain_key(tmp_path: Path) -> None:
    """Each domain has its directory and key file; an attach must name tenants of one
    domain and send that domain's key; each domain's blocks live in its own pool."""
    stats = KvStats()
    domains = build_domains(
        parse_trust_domains("acme=acme,initech;globex=globex"),
        str(tmp_path),
        lambda d: _setup_tier(stats),
        stats,
    )
    acme_key = (tmp_path / "acme" / KEY_FILE).read_bytes()
    globex_key = (tmp_path / "globex" / KEY_FILE).read_bytes()
    assert (tmp_path / "acme" / KEY_FILE).stat().st_mode & 0o777 == 0o400
    a, _, name = await domains.attach("fp", "", LAYOUT, tenants=["acme"], domain_key=acme_key)
    assert name == "acme"
    g, _, name = await domains.attach("fp", "", LAYOUT, tenants=["globex"], domain_key=globex_key)
    assert name == "globex"
    for tenants, key in (
        (["acme"], globex_key),  # another domain's key
        (["acme"], b""),
        ([], acme_key),  # tenants are required with domains
        (["acme", "globex"], acme_key),  # two domains
        (["nobody"], acme_key),
    ):
        with pytest.raises(PermissionDenied):
            await domains.attach("fp", "", LAYOUT, tenants=tenants, domain_key=key)
    assert stats.tenants_refused == 5
    slots, lease, gens = await domains.allocate(a.attachment_id, 1)
    assert gens == [1]
    domains.tier_of(a.attachment_id).pool.write(slots[0], pattern(b"h0"))
    await domains.commit(a.attachment_id, lease.lease_id, "acme", "", [(slots[0], b"h0")])
    assert domains.tier_of(a.attachment_id) is not domains.tier_of(g.attachment_id)
    both, _, _ = await domains.attach(
        "fp", "", LAYOUT, tenants=["acme", "initech"], domain_key=acme_key
    )
    assert (await domains.lookup_prefix(both.attachment_id, "initech", "", [b"h0"])).slots == []
    assert (await domains.lookup_prefix(a.attachment_id, "acme", "", [b"h0"])).slots == slots
    with pytest.raises(PermissionDenied):
        await domains.lookup_prefix(g.attachment_id, "acme", "", [b"h0"])
    await domains.close()
    assert not (tmp_path / "acme" / KEY_FILE).exists()


async def test_without_domains_there_is_one_pool_and_no_key() -> None:
    s = Setup()
    domains = KvDomains.single(s.tier)
    a, _, name = await domains.attach("fp", "", LAYOUT, tenants=["acme"])
    assert name == ""
    with pytest.raises(PermissionDenied):
        await domains.lookup_prefix(a.attachment_id, "globex", "", CHAIN)


async def test_an_altered_block_is_cut_from_a_hit_and_dropped() -> None:
    s = Setup(verify_hits=1.0)
    aid = await s.attach("fp")
    slots = await s.put(aid, CHAIN)
    s.tier.pool.write(slots[1], b"\xff")
    r = await s.tier.lookup_prefix(aid, "t", "", CHAIN)
    assert r.slots == slots[:1]
    assert s.tier.stats.altered_blocks == 1
    assert s.tier.index.key_of(slots[1]) is None
    assert r.lease is not None
    await s.tier.release(aid, r.lease.lease_id)
    s.tier.index.check()
    # The first block altered: no hit, no lease.
    s.tier.pool.write(slots[0], b"\xff")
    r = await s.tier.lookup_prefix(aid, "t", "", CHAIN)
    assert (r.slots, r.lease) == ([], None)
    s.tier.index.check()


async def test_hits_are_verified_on_the_sampled_fraction_only() -> None:
    s = Setup(verify_hits=0.0)
    aid = await s.attach("fp")
    slots = await s.put(aid, CHAIN)
    s.tier.pool.write(slots[1], b"\xff")
    r = await s.tier.lookup_prefix(aid, "t", "", CHAIN)
    assert r.slots == slots  # not checked at hand-out ...
    assert r.lease is not None
    await s.tier.release(aid, r.lease.lease_id)
    await s.attach("fp-v2")  # ... but always at demotion
    await s.tier.settled()
    assert s.tier.stats.altered_blocks == 1
    assert s.tier.stats.demoted_blocks == 2
    assert s.warm is not None
    assert len(s.warm.values) == 2


async def test_a_promoted_block_is_sealed_with_its_warm_tag() -> None:
    """Promotion seals without a second pass; the promoted block then passes the check,
    and altering it afterwards is caught."""
    s = Setup(verify_hits=1.0)
    aid = await s.attach("fp-v1")
    await s.put(aid, CHAIN)
    await s.attach("fp-v2")
    await s.tier.settled()
    back = await s.attach("fp-v1")
    r = await s.tier.lookup_prefix(back, "t", "", CHAIN)
    assert r.promoted == 3
    assert len(r.slots) == 3
    assert r.lease is not None
    await s.tier.release(back, r.lease.lease_id)
    again = await s.tier.lookup_prefix(back, "t", "", CHAIN)
    assert again.slots == r.slots
    assert s.tier.stats.altered_blocks == 0
    assert again.lease is not None
    await s.tier.release(back, again.lease.lease_id)
    s.tier.pool.write(r.slots[2], pattern(b"zz"))
    assert len((await s.tier.lookup_prefix(back, "t", "", CHAIN)).slots) == 2


def test_seals_sample() -> None:
    seals = BlockSeals(1, LOCAL, sample=lambda: 0.5)
    assert seals.sampled(1.0)
    assert not seals.sampled(0.0)
    assert seals.sampled(0.6)
    assert not seals.sampled(0.4)
    assert not seals.intact(0, b"x" * 32)  # never sealed

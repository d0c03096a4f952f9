"""The rule chain's signing and verification (sidecar/invalidation/chain.py), pure."""

from __future__ import annotations

import pytest

from sidecar.errors import StoreDistrusted
from sidecar.invalidation.chain import GENESIS, ChainSeal
from sidecar.invalidation.rules import Rule, Selector
from sidecar.macs import FleetKeys

A, B = b"a" * 32, b"b" * 32


def _chain(seal: ChainSeal, epochs: list[int]) -> tuple[bytes, bytes, bytes, bytes, list[bytes]]:
    """(dataset, anchor, head, counter, members) of rules at `epochs`, in that order."""
    prev, members = GENESIS, []
    for e in epochs:
        link = seal.link(Rule(e, Selector(tenant=f"t{e}"), 1000 + e), prev)
        members.append(link.member)
        prev = link.tag
    top = max(epochs, default=0)
    return (
        seal.dataset("d1"),
        seal.anchor("d1", GENESIS),
        seal.head("d1", top, prev),
        b"%d" % top,
        members,
    )


def test_a_chain_verifies_in_its_own_order_with_gaps_in_epochs() -> None:
    """Rules chain by their order, not by consecutive epochs (a recovered store
    re-publishes 7 after 9, and its counter may be above the newest)."""
    seal = ChainSeal(FleetKeys([A]))
    chain = seal.verify(*_chain(seal, [1, 2, 9, 7]))
    assert [r.epoch for r in chain.rules] == [1, 2, 9, 7]


def test_a_counter_other_than_the_heads_epoch_is_refused() -> None:
    """The counter moves only with the signed head."""
    seal = ChainSeal(FleetKeys([A]))
    dataset, anchor, head, _, members = _chain(seal, [1, 2])
    with pytest.raises(StoreDistrusted, match="epoch counter"):
        seal.verify(dataset, anchor, head, b"5", members)


def test_a_chain_of_another_fleet_or_data_set_is_refused() -> None:
    """Values signed with another secret, or a head of another data set, fail."""
    other = ChainSeal(FleetKeys([B]))
    with pytest.raises(StoreDistrusted, match="store identity"):
        ChainSeal(FleetKeys([A])).verify(*_chain(other, [1]))
    seal = ChainSeal(FleetKeys([A]))
    dataset, anchor, _, counter, members = _chain(seal, [1])
    foreign_head = seal.head("d2", 1, seal.open_link(members[0]).tag)
    with pytest.raises(StoreDistrusted, match="head fails"):
        seal.verify(dataset, anchor, foreign_head, counter, members)


def test_resealing_while_rotating_outlives_the_old_secret() -> None:
    """A chain signed with A, signed again by [B, A], verifies under B alone."""
    old = ChainSeal(FleetKeys([A]))
    rotating = ChainSeal(FleetKeys([B, A]))
    chain = rotating.verify(*_chain(old, [1, 3]))
    fresh = rotating.resealed(chain)
    assert fresh is not None
    dataset, anchor, head, members = fresh
    again = ChainSeal(FleetKeys([B])).verify(dataset, anchor, head, b"3", members)
    assert again.rules == chain.rules
    assert rotating.resealed(again) is None

"""The KV slot index: exact eviction order, pins, budget, publication."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from sidecar.kv.layout import BlockKey
from sidecar.kv.slot_index import SlotIndex, SlotsExhausted


def k(n: int) -> BlockKey:
    return BlockKey(b"k%d" % n)


def fill(index: SlotIndex, n: int) -> list[int]:
    """Allocate, publish and unpin n blocks k(0)..k(n-1); returns their slots."""
    slots = index.allocate(n)
    for i, slot in enumerate(slots):
        assert index.publish(slot, k(i))
    index.unpin_many(slots)
    return slots


def test_free_list_is_fifo_then_lru_evicts_least_recently_unpinned() -> None:
    """Allocation takes free slots in order, then evicts the least recently unpinned block."""
    index = SlotIndex(4)
    assert fill(index, 4) == [0, 1, 2, 3]
    assert index.lru_order() == [0, 1, 2, 3]
    # Touch block 0 by pinning and releasing it: it becomes most recently used.
    index.pin(0)
    index.unpin(0)
    assert index.lru_order() == [1, 2, 3, 0]
    assert index.allocate(2) == [1, 2]
    assert index.get(k(1)) is None
    assert index.get(k(2)) is None
    assert index.get(k(0)) == 0
    assert index.evictions == 2
    index.check()


def test_freed_slots_are_reused_before_any_eviction() -> None:
    """A dropped block's slot goes to the back of the free list and is used before evicting."""
    index = SlotIndex(3)
    fill(index, 3)
    assert index.drop(1) == k(1)
    assert index.allocate(1) == [1]
    assert index.evictions == 0
    index.check()


def test_pinned_slots_are_never_evicted_and_allocation_is_all_or_nothing() -> None:
    """With every slot pinned, allocation raises and takes nothing."""
    index = SlotIndex(3)
    fill(index, 3)
    for slot in range(3):
        index.pin(slot)
    with pytest.raises(SlotsExhausted):
        index.allocate(1)
    index.unpin(2)
    with pytest.raises(SlotsExhausted):
        index.allocate(2)
    assert index.available == 1
    assert index.allocate(1) == [2]
    assert [index.get(k(i)) for i in range(3)] == [0, 1, None]
    index.check()


def test_publish_refuses_a_key_cached_elsewhere_and_the_duplicate_frees_on_unpin() -> None:
    """Two slots never hold the same key; the losing slot returns to the free list."""
    index = SlotIndex(2)
    a, b = index.allocate(2)
    assert index.publish(a, k(7))
    assert not index.publish(b, k(7))
    index.unpin(b)
    assert index.free_slots == 1
    assert index.get(k(7)) == a
    index.check()


def test_dropping_a_pinned_slot_frees_it_only_on_last_unpin() -> None:
    """A pinned block that is unpublished keeps its slot until every pin is gone."""
    index = SlotIndex(2)
    fill(index, 1)
    index.pin(0)
    index.pin(0)
    index.drop(0)
    assert index.get(k(0)) is None
    index.unpin(0)
    assert index.free_slots == 1
    index.unpin(0)
    assert index.free_slots == 2
    index.check()


def test_groups_track_published_slots() -> None:
    """Slots are listed under the group they were published with until they leave."""
    index = SlotIndex(3)
    slots = index.allocate(3)
    index.publish(slots[0], k(0), "v1")
    index.publish(slots[1], k(1), "v1")
    index.publish(slots[2], k(2), "v2")
    assert index.group_slots("v1") == {slots[0], slots[1]}
    index.drop(slots[0])
    assert index.group_slots("v1") == {slots[1]}
    index.drop(slots[1])
    assert "v1" not in index.groups()


def test_misuse_is_refused() -> None:
    """Pinning a free slot, unpinning an unpinned one and publishing twice raise."""
    index = SlotIndex(2)
    with pytest.raises(ValueError, match="free"):
        index.pin(0)
    with pytest.raises(ValueError, match="not pinned"):
        index.unpin(0)
    [slot] = index.allocate(1)
    index.publish(slot, k(0))
    with pytest.raises(ValueError, match="unpublished"):
        index.publish(slot, k(1))


class IndexMachine(RuleBasedStateMachine):
    """Random operations keep every invariant and never exceed the pool."""

    def __init__(self) -> None:
        super().__init__()
        self.index = SlotIndex(5)
        self.pins: list[int] = []
        self.next = 0

    @rule(n=st.integers(1, 6))
    def allocate(self, n: int) -> None:
        try:
            slots = self.index.allocate(n)
        except SlotsExhausted:
            assert self.index.available < n
            return
        for slot in slots:
            self.next += 1
            self.index.publish(slot, k(self.next))
        self.pins.extend(slots)

    @rule(i=st.integers(0, 20))
    def unpin(self, i: int) -> None:
        if self.pins:
            self.index.unpin(self.pins.pop(i % len(self.pins)))

    @rule(key=st.integers(0, 40))
    def pin(self, key: int) -> None:
        slot = self.index.get(k(key))
        if slot is not None:
            self.index.pin(slot)
            self.pins.append(slot)

    @rule(slot=st.integers(0, 4))
    def drop(self, slot: int) -> None:
        self.index.drop(slot)

    @invariant()
    def consistent(self) -> None:
        self.index.check()
        assert self.index.cached_blocks <= self.index.num_slots


TestIndexMachine = IndexMachine.TestCase

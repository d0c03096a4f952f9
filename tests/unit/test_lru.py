"""ByteBudgetLru: exact byte accounting, least-recently-used eviction, hard caps."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given

from sidecar.tiers.lru import ByteBudgetLru
from tests.support.strategies.entries import LruOp, lru_ops


def test_bytes_are_accounted_exactly() -> None:
    """nbytes is the sum of the sizes held, through inserts, replacements, pops and clear."""
    lru: ByteBudgetLru[str, str] = ByteBudgetLru(max_bytes=1000, max_entries=10)
    lru.put("a", "A", 100)
    lru.put("b", "B", 250)
    assert lru.nbytes == 350
    lru.put("a", "A2", 40)  # replacement counts the new size only
    assert lru.nbytes == 290
    assert len(lru) == 2
    assert lru.pop("b") == "B"
    assert lru.nbytes == 40
    assert lru.pop("b") is None
    assert lru.nbytes == 40
    lru.clear()
    assert (lru.nbytes, len(lru)) == (0, 0)


def test_least_recently_used_is_evicted_first() -> None:
    """Over budget, the entry least recently put or read goes first."""
    lru: ByteBudgetLru[str, int] = ByteBudgetLru(max_bytes=30, max_entries=100)
    for k in "abc":
        lru.put(k, 0, 10)
    assert lru.get("a") == 0  # a is now the most recent; b is the oldest
    lru.put("d", 0, 10)
    assert lru.get("b") is None
    assert [k for k in "acd" if lru.get(k) is None] == []
    assert lru.evictions == 1
    assert lru.nbytes == 30


def test_one_big_insert_evicts_as_many_as_needed_in_order() -> None:
    """An insert evicts oldest entries until the new one fits, and no more."""
    lru: ByteBudgetLru[str, int] = ByteBudgetLru(max_bytes=100, max_entries=100)
    for k in "abcde":
        lru.put(k, 0, 20)
    lru.put("big", 0, 55)  # needs 55 of 100: a, b and c (60 bytes) must go
    assert [k for k in ("a", "b", "c", "d", "e", "big") if lru.get(k) is not None] == [
        "d",
        "e",
        "big",
    ]
    assert lru.nbytes == 95
    assert lru.evictions == 3


def test_replacing_refreshes_recency() -> None:
    """Re-putting a key makes it the most recently used."""
    lru: ByteBudgetLru[str, int] = ByteBudgetLru(max_bytes=20, max_entries=100)
    lru.put("a", 1, 10)
    lru.put("b", 1, 10)
    lru.put("a", 2, 10)
    lru.put("c", 1, 10)
    assert lru.get("b") is None
    assert lru.get("a") == 2


def test_entry_cap_evicts_oldest() -> None:
    """With max_entries reached, an insert evicts the least recently used entry."""
    lru: ByteBudgetLru[str, int] = ByteBudgetLru(max_bytes=10**9, max_entries=2)
    lru.put("a", 0, 1)
    lru.put("b", 0, 1)
    lru.put("c", 0, 1)
    assert len(lru) == 2
    assert lru.get("a") is None
    assert lru.nbytes == 2


def test_item_larger_than_budget_is_refused_without_evicting() -> None:
    """An item bigger than the whole budget is refused and evicts nothing else."""
    lru: ByteBudgetLru[str, int] = ByteBudgetLru(max_bytes=100, max_entries=10)
    lru.put("a", 0, 60)
    assert lru.put("huge", 0, 101) is False
    assert lru.get("huge") is None
    assert lru.get("a") == 0
    assert (lru.nbytes, lru.evictions) == (60, 0)


def test_refused_replacement_drops_the_old_value() -> None:
    """A refused oversized put of an existing key removes the old value (no stale copy)."""
    lru: ByteBudgetLru[str, str] = ByteBudgetLru(max_bytes=100, max_entries=10)
    lru.put("a", "old", 10)
    assert lru.put("a", "new", 500) is False
    assert lru.get("a") is None
    assert lru.nbytes == 0


def test_item_of_exactly_the_budget_fits() -> None:
    """An item as large as the budget is accepted and evicts everything else."""
    lru: ByteBudgetLru[str, int] = ByteBudgetLru(max_bytes=100, max_entries=10)
    lru.put("a", 0, 1)
    assert lru.put("full", 0, 100) is True
    assert lru.get("a") is None
    assert lru.nbytes == 100


def test_zero_entry_cap_stores_nothing() -> None:
    """max_entries=0 disables the map: every put is refused."""
    lru: ByteBudgetLru[str, int] = ByteBudgetLru(max_bytes=100, max_entries=0)
    assert lru.put("a", 0, 1) is False
    assert (len(lru), lru.nbytes) == (0, 0)


def test_negative_budgets_are_refused() -> None:
    """Negative byte or entry budgets raise ValueError."""
    with pytest.raises(ValueError, match="budgets"):
        ByteBudgetLru(-1, 1)
    with pytest.raises(ValueError, match="budgets"):
        ByteBudgetLru(1, -1)


@given(lru_ops())
def test_matches_a_reference_model(ops: list[LruOp]) -> None:
    """Any operation sequence leaves the same contents, order and bytes as a simple model."""
    max_bytes, max_entries = 100, 4
    lru: ByteBudgetLru[int, int] = ByteBudgetLru(max_bytes, max_entries)
    model: OrderedDict[int, tuple[int, int]] = OrderedDict()  # key -> (value, size)
    for step, (op, key, size) in enumerate(ops):
        if op == "put":
            model.pop(key, None)
            accepted = size <= max_bytes
            if accepted:
                model[key] = (step, size)
                while sum(s for _, s in model.values()) > max_bytes or len(model) > max_entries:
                    model.popitem(last=False)
            assert lru.put(key, step, size) is accepted
        elif op == "get":
            expected = model.get(key)
            if expected is not None:
                model.move_to_end(key)
            assert lru.get(key) == (None if expected is None else expected[0])
        else:
            expected = model.pop(key, None)
            assert lru.pop(key) == (None if expected is None else expected[0])
        assert lru.nbytes == sum(s for _, s in model.values())
        assert len(lru) == len(model)
    # Recency order: fill to the entry cap with zero-byte keys, then each further
    # insert must evict exactly the model's oldest remaining key.
    fresh = iter(range(1_000, 2_000))
    for _ in range(max_entries - len(model)):
        lru.put(next(fresh), -1, 0)
    for key in list(model):
        lru.put(next(fresh), -1, 0)
        assert lru.get(key) is None, f"{key} outlived a more recently used key"

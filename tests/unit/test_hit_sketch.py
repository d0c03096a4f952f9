"""The Space-Saving sketch that counts hits for prewarm: its guarantees, checked against
exact counts on generated streams."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given

from sidecar.prewarm.sketch import SpaceSaving
from tests.support.strategies.streams import hit_streams


def _run(capacity: int, stream: list[tuple[int, int]]) -> tuple[SpaceSaving[int], Counter[int]]:
    sketch: SpaceSaving[int] = SpaceSaving(capacity)
    truth: Counter[int] = Counter()
    for item, n in stream:
        sketch.add(item, n)
        truth[item] += n
    return sketch, truth


@given(hit_streams())
def test_every_item_above_n_over_k_is_kept(case: tuple[int, list[tuple[int, int]]]) -> None:
    """Any item whose true count exceeds N / capacity is in the sketch."""
    capacity, stream = case
    sketch, truth = _run(capacity, stream)
    total = sum(truth.values())
    kept = {c.item for c in sketch}
    assert {i for i, n in truth.items() if n * capacity > total} <= kept
    assert len(sketch) <= capacity
    assert sketch.total == total


@given(hit_streams())
def test_counts_bound_the_truth_within_n_over_k(case: tuple[int, list[tuple[int, int]]]) -> None:
    """For each kept item count - error <= true <= count, and error <= N / capacity;
    an untracked item's true count is at most the smallest kept count."""
    capacity, stream = case
    sketch, truth = _run(capacity, stream)
    total = sum(truth.values())
    counted = list(sketch)
    for c in counted:
        assert c.guaranteed <= truth[c.item] <= c.count
        assert c.error >= 0
        assert c.error * capacity <= total
    if len(counted) == capacity:
        smallest = min(c.count for c in counted)
        kept = {c.item for c in counted}
        assert all(n <= smallest for i, n in truth.items() if i not in kept)


@given(hit_streams())
def test_exact_while_distinct_items_fit(case: tuple[int, list[tuple[int, int]]]) -> None:
    """With at most `capacity` distinct items every count is exact (error 0)."""
    capacity, stream = case
    stream = [(item % capacity, n) for item, n in stream]
    sketch, truth = _run(capacity, stream)
    assert {c.item: (c.count, c.error) for c in sketch} == {i: (n, 0) for i, n in truth.items()}


@given(hit_streams())
def test_take_hands_out_everything_and_starts_over(
    case: tuple[int, list[tuple[int, int]]],
) -> None:
    """take() returns every kept item once and leaves an empty sketch that counts anew."""
    capacity, stream = case
    sketch, _ = _run(capacity, stream)
    before = sorted((c.item, c.count, c.error) for c in sketch)
    assert sorted((c.item, c.count, c.error) for c in sketch.take()) == before
    assert (len(sketch), sketch.total, list(sketch)) == (0, 0, [])
    sketch.add(7)
    assert [(c.item, c.count, c.error) for c in sketch] == [(7, 1, 0)]


def test_eviction_takes_a_smallest_count_and_remembers_it() -> None:
    """A newcomer in a full sketch replaces an item of the smallest count m and starts at
    m + 1 with error m."""
    sketch: SpaceSaving[str] = SpaceSaving(2)
    for item in "aab":
        sketch.add(item)
    sketch.add("c")  # replaces b (count 1)
    assert {c.item: (c.count, c.error) for c in sketch} == {"a": (2, 0), "c": (2, 1)}


def test_capacity_must_be_positive() -> None:
    """A sketch that can hold nothing is refused."""
    with pytest.raises(ValueError, match="capacity"):
        SpaceSaving(0)

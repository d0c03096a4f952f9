"""Streams of hits for the heavy-hitter sketch: skewed item draws (a few hot items, a long
tail) with a sketch capacity, and occasional re-adds of n > 1 (a failed merge's counts)."""

from __future__ import annotations

from hypothesis import strategies as st


@st.composite
def hit_streams(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]]]:
    """(capacity, [(item, n), ...]): items 0..distinct-1, mostly n = 1, skewed towards
    small ids so that some items are heavy and the sketch has to evict."""
    capacity = draw(st.integers(min_value=1, max_value=24))
    distinct = draw(st.integers(min_value=1, max_value=80))
    hot = st.integers(min_value=0, max_value=min(distinct - 1, 3))
    tail = st.integers(min_value=0, max_value=distinct - 1)
    item = st.one_of(hot, tail)
    n = st.one_of(st.just(1), st.just(1), st.just(1), st.integers(min_value=2, max_value=9))
    stream = draw(st.lists(st.tuples(item, n), min_size=0, max_size=400))
    return capacity, stream

"""Space-Saving heavy-hitter counts (Metwally, Agrawal, El Abbadi, 2005) in bounded memory.

At most `capacity` items are counted. A new item when the table is full takes the place
of one with the smallest count m and starts at m + 1, remembering m as its possible
overestimate. Over a stream of N additions:
  - every item whose true count exceeds N / capacity is in the table;
  - for each item in the table, `count - error <= true count <= count`, and error <=
    N / capacity;
  - untracked items have true count <= the smallest count in the table.
With at most `capacity` distinct items every count is exact (error 0).

Counts are kept in buckets by value (a "stream summary"): adding 1 moves an item to the
next bucket and eviction takes any item of the smallest bucket, so `add` is O(1) and
allocation-light; no scan, no heap. A plain-Python structure a library would not improve
on: the common libraries are either Count-Min sketches (no item list) or unbounded.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Counted(Generic[T]):
    """One tracked item: its estimated count and how much of it may be overestimate."""

    item: T
    count: int
    error: int

    @property
    def guaranteed(self) -> int:
        """Additions certainly of this item (a lower bound of its true count)."""
        return self.count - self.error


class SpaceSaving(Generic[T]):
    """Bounded heavy-hitter counter; not thread-safe (one event loop owns it).

    Until the table is full nothing can be evicted, so counts are a plain dict (one dict
    update per addition: the common case when the merge interval suits the traffic);
    the first addition that needs an eviction builds the buckets, once, and from then
    on until `take` every addition keeps them.
    """

    __slots__ = ("_buckets", "_capacity", "_counts", "_errors", "_min", "total")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self._capacity = capacity
        self._counts: dict[T, int] = {}
        self._errors: dict[T, int] = {}  # only the items that took an evicted one's place
        # count -> items with that count (a dict used as an insertion-ordered set);
        # None while the table has room (no eviction needed yet)
        self._buckets: dict[int, dict[T, None]] | None = None
        self._min = 0
        self.total = 0
        """Additions since creation or the last `take`."""

    def __len__(self) -> int:
        return len(self._counts)

    @property
    def capacity(self) -> int:
        """Most items tracked at once."""
        return self._capacity

    def add(self, item: T, n: int = 1) -> None:
        """Count `n` (>= 1) more occurrences of `item`."""
        self.total += n
        counts = self._counts
        count = counts.get(item)
        buckets = self._buckets
        if buckets is None:
            if count is not None:
                counts[item] = count + n
                return
            if len(counts) < self._capacity:
                counts[item] = n
                return
            buckets = self._build_buckets()
        if count is not None:
            self._move(buckets, item, count, count + n)
            return
        self._evict_for(buckets, item, n)

    def _build_buckets(self) -> dict[int, dict[T, None]]:
        buckets: dict[int, dict[T, None]] = {}
        for item, count in self._counts.items():
            buckets.setdefault(count, {})[item] = None
        self._buckets = buckets
        self._min = min(buckets)
        return buckets

    def _move(self, buckets: dict[int, dict[T, None]], item: T, old: int, new: int) -> None:
        bucket = buckets[old]
        del bucket[item]
        buckets.setdefault(new, {})[item] = None
        self._counts[item] = new
        if not bucket:
            del buckets[old]
            if self._min == old:
                # With n == 1 the item moved to the next smallest bucket; a jump (a
                # failed merge's counts put back) may have skipped others.
                self._min = new if new == old + 1 else min(buckets)

    def _evict_for(self, buckets: dict[int, dict[T, None]], item: T, n: int) -> None:
        """`item` takes the place of one with the smallest count m: count m + n, error m."""
        smallest = self._min
        bucket = buckets[smallest]
        victim = next(iter(bucket))
        del bucket[victim]
        del self._counts[victim]
        self._errors.pop(victim, None)
        self._errors[item] = smallest
        buckets.setdefault(smallest + n, {})[item] = None
        self._counts[item] = smallest + n
        if not bucket:
            del buckets[smallest]
            self._min = smallest + 1 if n == 1 else min(buckets)

    def __iter__(self) -> Iterator[Counted[T]]:
        """Tracked items, in no particular order."""
        errors = self._errors
        for item, count in self._counts.items():
            yield Counted(item, count, errors.get(item, 0))

    def take(self) -> list[Counted[T]]:
        """Every tracked item, then start over empty (what a merge hands to the store)."""
        out = list(self)
        self._counts, self._errors, self._buckets = {}, {}, None
        self._min = 0
        self.total = 0
        return out

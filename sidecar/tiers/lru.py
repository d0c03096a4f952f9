"""A byte-budgeted LRU map with exact accounting, used by the hot and embedded tiers."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ByteBudgetLru(Generic[K, V]):
    """LRU map bounded by total bytes and entry count; sizes are given by the caller.

    Not thread-safe: it lives on the event loop, where every call is atomic.
    """

    def __init__(self, max_bytes: int, max_entries: int) -> None:
        if max_bytes < 0 or max_entries < 0:
            raise ValueError("budgets must be >= 0")
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def nbytes(self) -> int:
        """Sum of the sizes of the values held."""
        return self._bytes

    def get(self, key: K) -> V | None:
        """The value, marked most recently used; None if absent."""
        item = self._items.get(key)
        if item is None:
            return None
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: K, value: V, size: int) -> bool:
        """Insert or replace; evicts least recently used items. False if it can never fit."""
        if size > self.max_bytes or self.max_entries == 0:
            self.pop(key)
            return False
        self.pop(key)
        self._items[key] = (value, size)
        self._bytes += size
        while self._bytes > self.max_bytes or len(self._items) > self.max_entries:
            _, (_, old_size) = self._items.popitem(last=False)
            self._bytes -= old_size
            self.evictions += 1
        return True

    def pop(self, key: K) -> V | None:
        """Remove and return the value, or None."""
        item = self._items.pop(key, None)
        if item is None:
            return None
        self._bytes -= item[1]
        return item[0]

    def peek(self, key: K) -> V | None:
        """The value without touching recency."""
        item = self._items.get(key)
        return None if item is None else item[0]

    def snapshot_keys(self) -> list[K]:
        """A snapshot of the keys, oldest first."""
        return list(self._items)

    def clear(self) -> None:
        """Drop everything."""
        self._items.clear()
        self._bytes = 0

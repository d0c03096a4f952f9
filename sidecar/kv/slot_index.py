"""Which block lives in which slot: free list, LRU, pins and hash -> slot, all O(1).

Plain Python, no torch and no I/O: the pool's bytes are addressed by slot number
elsewhere. A slot is in exactly one of these states:

    free       in the free list (FIFO), no key, no pins
    cached     published under a key, unpinned: in the LRU (eviction candidate)
    pinned     pins > 0: never evicted or reused; may or may not hold a key
               (an allocated slot holds none until it is published)

A pinned slot whose key was dropped goes back to the free list when its last pin
goes. The pool size is fixed, so the budget can never be exceeded; allocation
takes free slots first, then evicts least recently unpinned cached slots, and
fails as a whole (SlotsExhausted) when fewer than `count` slots are available.
Every allocation bumps the slot's generation (kv/generations.py), the fence a reader
checks after copying a slot it no longer pins. An optional observer (kv/block_events.py)
hears of every key published and every key forgotten (dropped or evicted): the one
place both happen, so a KV event publisher misses none.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable, Sequence
from itertools import islice

from sidecar.errors import ResourceExhausted
from sidecar.kv.block_events import BlockEvents
from sidecar.kv.generations import MemoryGenerations, SlotGenerations
from sidecar.kv.layout import BlockKey


class SlotsExhausted(ResourceExhausted):
    """Not enough free or evictable slots: every other slot is pinned."""


class SlotIndex:
    """Slot bookkeeping for a pool of `num_slots` slots."""

    def __init__(
        self,
        num_slots: int,
        generations: SlotGenerations | None = None,
        observer: BlockEvents | None = None,
    ) -> None:
        if num_slots <= 0:
            raise ValueError("num_slots must be positive")
        self.num_slots = num_slots
        self.generations = generations if generations is not None else MemoryGenerations(num_slots)
        self._free: deque[int] = deque(range(num_slots))
        self._lru: OrderedDict[int, None] = OrderedDict()
        self._pins = [0] * num_slots
        self._key: list[BlockKey | None] = [None] * num_slots
        self._group: list[Hashable] = [None] * num_slots
        self._slot_of: dict[BlockKey, int] = {}
        self._groups: dict[Hashable, set[int]] = {}
        self.evictions = 0
        self.observer = observer

    # -- queries ---------------------------------------------------------------

    def get(self, key: BlockKey) -> int | None:
        """The slot holding key, or None."""
        return self._slot_of.get(key)

    def walk(self, prefix: bytes, hashes: Sequence[bytes], start: int) -> list[int]:
        """Slots of prefix + hashes[start], prefix + hashes[start + 1], ... up to the first miss."""
        get = self._slot_of.get
        out: list[int] = []
        for h in islice(hashes, start, None):
            slot = get(prefix + h)  # type: ignore[call-overload]
            if slot is None:
                break
            out.append(slot)
        return out

    def key_of(self, slot: int) -> BlockKey | None:
        """The key a slot is published under (None when free or only allocated)."""
        return self._key[slot]

    def generation(self, slot: int) -> int:
        """How many times the slot was allocated (changes before its bytes may)."""
        return self.generations.get(slot)

    def pins(self, slot: int) -> int:
        """How many pins hold the slot."""
        return self._pins[slot]

    @property
    def free_slots(self) -> int:
        """Slots in the free list."""
        return len(self._free)

    @property
    def available(self) -> int:
        """Slots an allocation could take now (free plus evictable)."""
        return len(self._free) + len(self._lru)

    @property
    def cached_blocks(self) -> int:
        """Published blocks."""
        return len(self._slot_of)

    def lru_order(self) -> list[int]:
        """Evictable slots, least recently used first (for tests and stats)."""
        return list(self._lru)

    def groups(self) -> list[Hashable]:
        """Groups that have published slots."""
        return list(self._groups)

    def group_slots(self, group: Hashable) -> set[int]:
        """Slots published under a group (a copy)."""
        return set(self._groups.get(group, ()))

    # -- pins ------------------------------------------------------------------

    def pin(self, slot: int) -> None:
        """Add a pin; a cached slot leaves the LRU."""
        if self._pins[slot] == 0:
            if self._key[slot] is None:
                raise ValueError(f"slot {slot} is free; allocate it instead of pinning it")
            del self._lru[slot]
        self._pins[slot] += 1

    def pin_many(self, slots: Iterable[int]) -> None:
        """pin each slot (the hot path of a prefix lookup)."""
        pins, lru, keys = self._pins, self._lru, self._key
        for slot in slots:
            if pins[slot] == 0:
                if keys[slot] is None:
                    raise ValueError(f"slot {slot} is free; allocate it instead of pinning it")
                del lru[slot]
            pins[slot] += 1

    def unpin(self, slot: int) -> None:
        """Drop a pin; at zero the slot becomes most recently used, or free without a key."""
        pins = self._pins[slot]
        if pins <= 0:
            raise ValueError(f"slot {slot} is not pinned")
        self._pins[slot] = pins - 1
        if pins == 1:
            if self._key[slot] is None:
                self._free.append(slot)
            else:
                self._lru[slot] = None

    def unpin_many(self, slots: Iterable[int]) -> None:
        """unpin each slot."""
        for slot in slots:
            self.unpin(slot)

    # -- allocation and publication -------------------------------------------

    def allocate(self, count: int) -> list[int]:
        """Take `count` slots (free first, then LRU evictions), each pinned once, no key,
        its generation bumped."""
        if count > len(self._free) + len(self._lru):
            raise SlotsExhausted(
                f"{count} KV slots wanted, {self.available} of {self.num_slots} are free or "
                "evictable (the rest are pinned by leases)"
            )
        out: list[int] = []
        free, lru, pins, bump = self._free, self._lru, self._pins, self.generations.bump
        for _ in range(count):
            if free:
                slot = free.popleft()
            else:
                slot, _ = lru.popitem(last=False)
                self._forget(slot)
                self.evictions += 1
            pins[slot] = 1
            bump(slot)
            out.append(slot)
        return out

    def publish(self, slot: int, key: BlockKey, group: Hashable = None) -> bool:
        """Publish a pinned, keyless slot under key; False if key is already cached elsewhere."""
        if self._pins[slot] == 0 or self._key[slot] is not None:
            raise ValueError(f"slot {slot} is not an allocated, unpublished slot")
        if key in self._slot_of:
            return False
        self._slot_of[key] = slot
        self._key[slot] = key
        self._group[slot] = group
        self._groups.setdefault(group, set()).add(slot)
        if self.observer is not None:
            self.observer.pool_stored(key, group)
        return True

    def drop(self, slot: int) -> BlockKey | None:
        """Unpublish a slot: unpinned it is free at once, pinned it frees on its last unpin."""
        key = self._key[slot]
        if key is None:
            return None
        self._forget(slot)
        if self._pins[slot] == 0:
            del self._lru[slot]
            self._free.append(slot)
        return key

    def _forget(self, slot: int) -> None:
        key = self._key[slot]
        if key is None:
            return
        del self._slot_of[key]
        self._key[slot] = None
        group = self._group[slot]
        members = self._groups[group]
        members.discard(slot)
        if not members:
            del self._groups[group]
        self._group[slot] = None
        if self.observer is not None:
            self.observer.pool_removed(key)

    def check(self) -> None:
        """Assert the invariants (tests call this after every step)."""
        free = set(self._free)
        lru = set(self._lru)
        assert len(free) == len(self._free), "a slot is twice in the free list"
        assert not free & lru, "a slot is both free and in the LRU"
        for slot in range(self.num_slots):
            pinned, key = self._pins[slot] > 0, self._key[slot]
            assert self._pins[slot] >= 0
            if pinned:
                assert slot not in free, f"pinned slot {slot} is free"
                assert slot not in lru, f"pinned slot {slot} is evictable"
            elif key is None:
                assert slot in free, f"slot {slot} is lost (no key, no pin, not free)"
            else:
                assert slot in lru, f"cached slot {slot} is not in the LRU"
            if key is not None:
                assert self._slot_of[key] == slot
        assert len(self._slot_of) == sum(k is not None for k in self._key)

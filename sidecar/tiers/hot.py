"""The hot tier: verified, decoded entries in this process, LRU within a byte budget."""

from __future__ import annotations

from sidecar.entries import Entry
from sidecar.keys import KeyDigest
from sidecar.tiers.lru import ByteBudgetLru

# Python object overhead per entry (dict slot, tuple, dataclass, bytes headers);
# counted so that many tiny entries cannot blow far past the budget.
ENTRY_OVERHEAD_BYTES = 256


class HotTier:
    """Holds Entry objects so a hot hit skips decoding and checksumming."""

    def __init__(self, max_bytes: int, max_entries: int) -> None:
        self._lru: ByteBudgetLru[KeyDigest, Entry] = ByteBudgetLru(max_bytes, max_entries)
        self._off = max_entries <= 0 or max_bytes <= 0
        """Switched off (INFERCACHE_HOT_MAX_ENTRIES=0): nothing is ever kept."""

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def nbytes(self) -> int:
        """Accounted bytes held."""
        return self._lru.nbytes

    @property
    def evictions(self) -> int:
        """Entries evicted to stay within budget."""
        return self._lru.evictions

    def get(self, digest: KeyDigest, now_ms: int) -> Entry | None:
        """A live entry, or None; expired entries are dropped on sight."""
        entry = self._lru.get(digest)
        if entry is not None and entry.expires_at_ms <= now_ms:
            self._lru.pop(digest)
            return None
        return entry

    def put(self, digest: KeyDigest, entry: Entry) -> bool:
        """Insert; False when the entry is larger than the whole budget."""
        if self._off:
            return False  # every warm hit would otherwise size an entry for nothing
        return self._lru.put(digest, entry, entry.nbytes + ENTRY_OVERHEAD_BYTES)

    def entries(self) -> list[tuple[KeyDigest, Entry]]:
        """A snapshot of what is held, oldest first."""
        return [(d, e) for d in self._lru.snapshot_keys() if (e := self._lru.peek(d)) is not None]

    def discard(self, digest: KeyDigest) -> None:
        """Remove if present."""
        self._lru.pop(digest)

"""HotTier: verified entries in memory, budgeted by encoded size, expired on sight."""

from __future__ import annotations

from sidecar.entries import Entry
from sidecar.keys import KeyDigest
from sidecar.tiers.hot import ENTRY_OVERHEAD_BYTES, HotTier


def digest(n: int) -> KeyDigest:
    return KeyDigest(n.to_bytes(32, "big"))


def entry(payload: bytes = b"x" * 100, created_at_ms: int = 1_000, ttl_s: int = 10) -> Entry:
    return Entry(material=b"m", payload=payload, created_at_ms=created_at_ms, ttl_s=ttl_s)


def test_accounts_encoded_size_plus_overhead() -> None:
    """Each entry costs its encoded size plus the fixed per-entry overhead."""
    hot = HotTier(max_bytes=10**6, max_entries=100)
    e1, e2 = entry(b"a" * 10), entry(b"b" * 1000)
    hot.put(digest(1), e1)
    hot.put(digest(2), e2)
    assert hot.nbytes == e1.nbytes + e2.nbytes + 2 * ENTRY_OVERHEAD_BYTES
    hot.discard(digest(1))
    assert hot.nbytes == e2.nbytes + ENTRY_OVERHEAD_BYTES


def test_live_entry_is_returned() -> None:
    """get returns the entry before its expiry."""
    hot = HotTier(max_bytes=10**6, max_entries=100)
    e = entry(created_at_ms=1_000, ttl_s=10)
    hot.put(digest(1), e)
    assert hot.get(digest(1), now_ms=10_999) is e


def test_expired_entry_is_dropped_on_get() -> None:
    """At its expiry instant an entry is gone, and its bytes are released."""
    hot = HotTier(max_bytes=10**6, max_entries=100)
    hot.put(digest(1), entry(created_at_ms=1_000, ttl_s=10))
    assert hot.get(digest(1), now_ms=11_000) is None
    assert (len(hot), hot.nbytes) == (0, 0)


def test_lru_eviction_within_byte_budget() -> None:
    """Past the byte budget the least recently read entry is evicted."""
    e = entry()
    per = e.nbytes + ENTRY_OVERHEAD_BYTES
    hot = HotTier(max_bytes=2 * per, max_entries=100)
    hot.put(digest(1), e)
    hot.put(digest(2), e)
    assert hot.get(digest(1), 0) is e
    hot.put(digest(3), e)
    assert hot.get(digest(2), 0) is None
    assert hot.get(digest(1), 0) is e
    assert hot.evictions == 1


def test_entry_larger_than_budget_is_refused() -> None:
    """put returns False for an entry that can never fit, and keeps nothing."""
    e = entry(b"z" * 1000)
    hot = HotTier(max_bytes=e.nbytes + ENTRY_OVERHEAD_BYTES - 1, max_entries=100)
    assert hot.put(digest(1), e) is False
    assert len(hot) == 0


def test_zero_entries_disables_the_hot_tier() -> None:
    """hot_max_entries=0 keeps nothing."""
    hot = HotTier(max_bytes=10**6, max_entries=0)
    assert hot.put(digest(1), entry()) is False
    assert hot.get(digest(1), 0) is None

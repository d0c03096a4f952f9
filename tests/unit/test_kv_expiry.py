"""The KV tier's expiry queue and shared slot generations (pure pieces of the
hardening in tests/unit/test_kv_hardening.py)."""

from __future__ import annotations

from pathlib import Path

from sidecar.kv.expiry import COMPACT_SLACK, ExpiryQueue
from sidecar.kv.generations import SharedGenerations
from sidecar.kv.pins import LeaseTable
from tests.support.kv_tier import Clock


def test_expiry_queue_bound_holds_under_any_renewal_pattern() -> None:
    """Alternating earlier and later deadlines, discards and re-adds keep the heap
    below 2 x live + slack, and due() returns each name at its true deadline."""
    queue = ExpiryQueue()
    deadlines: dict[str, float] = {}
    for step in range(5_000):
        name = f"n{step % 50}"
        deadlines[name] = 100.0 + (step % 7) - (step % 3)
        queue.schedule(name, deadlines[name])
        if step % 11 == 0:
            queue.discard(name)
            del deadlines[name]
        assert len(queue) <= 2 * len(deadlines) + COMPACT_SLACK
    due = queue.due(100.0, deadlines.get)
    assert sorted(due) == sorted(n for n, d in deadlines.items() if d <= 100.0)
    rest = queue.due(1e9, deadlines.get)
    assert sorted(due + rest) == sorted(deadlines)


def test_shared_generations_are_a_file_of_native_uint64(tmp_path: Path) -> None:
    """What model processes map: slot i's generation at byte 8 * i."""
    gens = SharedGenerations(4, str(tmp_path))
    try:
        gens.bump(2)
        gens.bump(2)
        gens.bump(3)
        export = gens.export()
        assert export.size_bytes == 32
        with open(export.path, "rb") as f:
            raw = f.read()
        values = [int.from_bytes(raw[i : i + 8], "little") for i in range(0, 32, 8)]
        assert values == [0, 0, 2, 1] == [gens.get(i) for i in range(4)]
    finally:
        gens.close()


def test_lease_table_reports_its_heap_size() -> None:
    """expiry_entries is the heap's size: one entry for a lease renewed 1,000 times."""
    clock = Clock()
    table = LeaseTable(10, clock)
    record = table.create("a", 1000)
    for _ in range(1_000):
        clock.now += 0.01
        table.renew(record, 1000)
    assert table.expiry_entries == 1

"""The sidecar's KV event builder (sidecar/events/builder.py) and recorder: pure logic.

What a router indexes must be exactly what the pool and warm tier hold, under the hash
the connector publishes for the same block (router_hash.event_hash of the stored key).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from infercache_client.vllm.chain import ChainScope, request_chain
from infercache_client.vllm.router_hash import event_hash, request_scope, router_block_hashes

from sidecar.events.builder import (
    POOL,
    WARM,
    Cleared,
    Event,
    EventBuilder,
    Removed,
    Stored,
    batch_wire,
)
from sidecar.events.recorder import EventRecorder, PublisherStats
from sidecar.kv.layout import BlockKey
from sidecar.kv.slot_index import SlotIndex


def key(n: int, prefix: bytes = b"p" * 32) -> BlockKey:
    return BlockKey(prefix + bytes([n]) * 32)


def base(model: str) -> tuple[tuple[str, str], ...]:
    """extra_keys of a block whose request scope was never named: schema and weights."""
    return (("schema", "infercache.kv.event.v1"), ("model", model))


def test_runs_of_one_kind_become_one_event_in_order() -> None:
    b = EventBuilder()
    b.version("v1", "fp-1", 16)
    b.pool_stored(key(1), "v1")
    b.pool_stored(key(2), "v1")
    b.pool_removed(key(1))
    b.pool_stored(key(3), "v1")
    events = b.take()
    assert events == [
        Stored((key(1), key(2)), POOL, 16, (base("fp-1"),) * 2),
        Removed((key(1),), POOL),
        Stored((key(3),), POOL, 16, (base("fp-1"),)),
    ]
    assert b.take() == [], "take gives each change once"


def test_a_weight_change_removes_the_old_identity_and_a_drop_removes_what_was_demoted() -> None:
    b = EventBuilder()
    b.version("v1", "fp-1", 16)
    b.pool_stored(key(1), "v1")
    b.pool_stored(key(2), "v1")
    b.take()
    # v2 attaches: v1's blocks leave the pool and are demoted (one of them altered: not written).
    b.version("v2", "fp-2", 16)
    b.pool_removed(key(1))
    b.pool_removed(key(2))
    b.warm_stored([key(1)], "v1", 100.0)
    events = b.take()
    assert [type(e) for e in events] == [Removed, Stored]
    assert events[0] == Removed((key(1), key(2)), POOL)
    stored = events[1]
    assert isinstance(stored, Stored)
    assert (stored.keys, stored.tier, dict(stored.extras[0])["model"]) == (
        (key(1),),
        WARM,
        "fp-1",
    )
    # Rollback to v1: promotion stores it in the pool again; a later drop of v1's warm
    # values removes exactly the blocks this sidecar demoted.
    b.pool_stored(key(1), "v1")
    b.warm_dropped("v1")
    b.warm_dropped("v1")  # nothing left: no event
    b.warm_dropped("v9")  # never demoted here: nothing to remove
    assert b.take() == [
        Stored((key(1),), POOL, 16, (base("fp-1"),)),
        Removed((key(1),), WARM),
    ]


def test_wire_is_vllms_layout_and_the_hash_is_the_connectors() -> None:
    scope_id = "ab" * 32
    prefix = request_scope(scope_id, "acme", "salt-1")
    tokens = list(range(40))
    # The connector's chain hashes of those tokens, as the sidecar stores them.
    published = router_block_hashes(
        tokens, 16, scope_id=scope_id, tenant="acme", cache_salt="salt-1"
    )
    chain = request_chain(tokens, 16, ChainScope(cache_salt="salt-1"), 1 << 31)
    keys = tuple(BlockKey(prefix + h) for h in chain)
    stored = Stored(keys, WARM, 16, ((("schema", "s"), ("model", "fp")),) * 2)
    wire = stored.wire()
    assert list(wire) == [
        "type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
        "medium", "lora_name", "extra_keys", "locality", "ownership",
    ]  # fmt: skip
    assert wire["type"] == "BlockStored"
    assert wire["block_hashes"] == published == [event_hash(k) for k in keys]
    assert (wire["medium"], wire["ownership"], wire["locality"]) == (
        "STORAGE",
        "infercache-warm",
        "REMOTE",
    )
    assert (wire["token_ids"], wire["parent_block_hash"], wire["block_size"]) == ([], None, 16)
    assert wire["extra_keys"] == [[["schema", "s"], ["model", "fp"]]] * 2
    removed = Removed(keys[:1], POOL).wire()
    assert list(removed) == ["type", "block_hashes", "medium", "locality", "ownership"]
    assert removed["block_hashes"] == published[:1]
    assert (removed["medium"], removed["ownership"], removed["locality"]) == (
        "CPU",
        "infercache-pool",
        "LOCAL",
    )
    batch = batch_wire(12.5, [stored, Cleared()])
    assert (batch[0], batch[2]) == (12.5, 0)
    assert batch[1][1] == {"type": "AllBlocksCleared"}


def test_the_slot_index_reports_publications_evictions_and_drops() -> None:
    b = EventBuilder()
    index = SlotIndex(2, observer=b)
    slots = index.allocate(2)
    assert index.publish(slots[0], key(1), "v1")
    assert index.publish(slots[1], key(2), "v1")
    index.unpin_many(slots)
    (evicting,) = index.allocate(1)  # the pool is full: key(1), least recently used, goes
    index.publish(evicting, key(3), "v1")
    index.drop(slots[1])
    events = b.take()
    assert events == [
        Stored((key(1), key(2)), POOL, 0, (base(""),) * 2),
        Removed((key(1),), POOL),
        Stored((key(3),), POOL, 0, (base(""),)),
        Removed((key(2),), POOL),
    ]


class ListPublisher:
    def __init__(self) -> None:
        self.batches: list[tuple[float, list[Event]]] = []
        self.stats = PublisherStats()

    def publish(self, ts: float, events: Sequence[Event]) -> bool:
        self.batches.append((ts, list(events)))
        return True

    def close(self, timeout_s: float = 1.0) -> None:
        pass


async def test_the_recorder_sends_one_batch_per_event_loop_turn() -> None:
    publisher = ListPublisher()
    recorder = EventRecorder(publisher, clock=lambda: 7.0)
    recorder.version("v1", "fp-1", 4)
    recorder.pool_stored(key(1), "v1")
    recorder.pool_stored(key(2), "v1")
    recorder.warm_stored([key(3)], "v1", 60_000)
    assert publisher.batches == [], "nothing is sent within the turn"
    await asyncio.sleep(0)
    assert len(publisher.batches) == 1
    ts, events = publisher.batches[0]
    assert (ts, [type(e) for e in events]) == (7.0, [Stored, Stored])
    recorder.warm_dropped("v1")
    await asyncio.sleep(0)
    assert publisher.batches[1][1] == [Removed((key(3),), WARM)]


def test_a_named_request_scope_gives_its_blocks_the_connectors_extra_keys() -> None:
    from infercache_client.vllm.event_schema import layout_label
    from infercache_client.vllm.router_hash import tenant_salt_digest

    from sidecar.kv.layout import KvLayout

    scope = bytes(range(32))
    prefix = request_scope(scope, "acme", "salt-1")
    other = request_scope(scope, "acme", "salt-2")
    layout = KvLayout(28, 8, 128, 16, "bfloat16")
    b = EventBuilder()
    b.version("v1", "fp-1", 16)
    b.scope(prefix, scope, layout, "acme", "salt-1")
    b.scope(prefix, bytes(32), layout, "evil", "")  # the first naming of a prefix is kept
    b.pool_stored(key(1, prefix), "v1")
    b.pool_stored(key(2, other), "v1")  # never named: schema and weights only
    (stored,) = b.take()
    assert isinstance(stored, Stored)
    named = dict(stored.extras[0])
    assert named == {
        "schema": "infercache.kv.event.v1",
        "model": "fp-1",
        "layout": "28x8x128/16/bfloat16",
        "scope": scope.hex(),
        "tenant_salt": tenant_salt_digest("acme", "salt-1"),
    }
    assert named["layout"] == layout_label(28, 8, 128, 16, "bfloat16")
    assert named["tenant_salt"] != tenant_salt_digest("acme", "salt-2")
    assert stored.extras[1] == base("fp-1")
    assert stored.wire()["extra_keys"][0] == [list(p) for p in stored.extras[0]]


def test_demoted_blocks_are_removed_when_their_ttl_passes_unless_written_again() -> None:
    b = EventBuilder()
    b.version("v1", "fp-1", 16)
    b.warm_stored([key(1), key(2)], "v1", 10.0)
    b.warm_stored([key(3)], "v1", 12.0)
    b.take()
    assert b.next_expiry() == 10.0
    b.warm_stored([key(2)], "v1", 20.0)  # demoted again: kept until 20
    b.take()
    b.expire(9.9)
    assert b.take() == []
    b.expire(12.0)
    assert b.take() == [Removed((key(1), key(3)), WARM)]
    b.warm_dropped("v1")  # key(2) is still there: the drop removes it, the timer then not
    assert b.take() == [Removed((key(2),), WARM)]
    b.expire(30.0)
    assert b.take() == []
    assert b.next_expiry() is None


def test_a_new_publisher_starts_with_all_blocks_cleared_and_forgets_the_warm_tier() -> None:
    b = EventBuilder()
    b.version("v1", "fp-1", 16)
    b.warm_stored([key(1)], "v1", 10.0)
    b.cleared()
    assert [type(e) for e in b.take()] == [Stored, Cleared]
    b.warm_dropped("v1")
    b.expire(11.0)
    assert b.take() == [], "nothing is removed twice after a clear"


async def test_the_recorder_publishes_a_warm_blocks_expiry_on_time() -> None:
    publisher = ListPublisher()
    recorder = EventRecorder(publisher, clock=lambda: 7.0)
    recorder.version("v1", "fp-1", 4)
    recorder.warm_stored([key(1)], "v1", 50)
    await asyncio.sleep(0)
    assert [type(e) for e in publisher.batches[0][1]] == [Stored]
    recorder.warm_stored([key(2)], "v1", 20)  # due earlier: the timer moves forward
    await asyncio.sleep(0.03)
    removed = [e for _, events in publisher.batches for e in events if isinstance(e, Removed)]
    assert removed == [Removed((key(2),), WARM)]
    await asyncio.sleep(0.05)
    removed = [e for _, events in publisher.batches for e in events if isinstance(e, Removed)]
    assert removed == [Removed((key(2),), WARM), Removed((key(1),), WARM)]


def test_demoting_the_same_blocks_again_and_again_keeps_the_expiry_heap_bounded() -> None:
    from sidecar.events.builder import COMPACT_SLACK

    b = EventBuilder()
    keys = [key(n) for n in range(50)]
    for round_ in range(200):  # a version demoted and rolled back 200 times within its ttl
        b.warm_stored(keys, "v1", 1000.0 + round_)
        b.take()
        assert len(b._expiry) <= 2 * len(keys) + COMPACT_SLACK
    b.warm_stored([key(99)], "v2", 5.0)
    b.warm_dropped("v1")
    b.take()
    b.expire(2000.0)
    assert b.take() == [Removed((key(99),), WARM)], "only what is still demoted expires"
    assert b.next_expiry() is None

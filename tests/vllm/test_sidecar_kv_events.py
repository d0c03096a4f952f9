"""The sidecar's own KV event stream (INFERCACHE_KV_EVENTS_ENDPOINT), read with vLLM's own
`KVEventBatch` decoder, as a KV-aware router reads vLLM's.

- Its bytes are the ones vLLM's encoder makes for the same events (the schema, exactly).
- With real engines on one pod: the blocks a v1 engine saved appear in the sidecar's
  stream under the very hashes the connector published in vLLM's stream; after an
  in-place weight change the v2 engine's blocks appear under the new identity and v1's
  are removed from the pool (and stored in the warm tier); after a rollback v1's blocks
  are stored in the pool again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from infercache_client.vllm.chain import ChainScope, request_chain
from infercache_client.vllm.router_hash import event_hashes, request_scope
from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch

from sidecar.events.builder import POOL, WARM, Cleared, Event, Removed, Stored, batch_wire
from sidecar.kv.layout import BlockKey
from tests.support.kv_events import EventSubscriber
from tests.support.processes import RedisServer, free_port
from tests.support.vllm_engine import BLOCK_SIZE, EngineProcess
from tests.support.vllm_model import PROMPTS, Models, replace_weights
from tests.support.vllm_sidecar import SidecarServer

SCOPE = "cd" * 32
SAVED_BLOCKS = len(PROMPTS["a"]) // BLOCK_SIZE
LOADABLE = (len(PROMPTS["a"]) - 1) // BLOCK_SIZE * BLOCK_SIZE
EXTRA = (
    ("schema", "infercache.kv.event.v1"),
    ("model", "fp-1"),
    ("layout", "2x4x8/16/float32"),
    ("scope", SCOPE),
    ("tenant_salt", "ab" * 32),
)


def test_the_sidecars_batches_are_vllms_bytes_for_the_same_events() -> None:
    tokens = list(range(5, 5 + 3 * BLOCK_SIZE))
    chain = request_chain(tokens, BLOCK_SIZE, ChainScope(cache_salt="s"), 64)
    prefix = request_scope(SCOPE, "vllm", "s")
    keys = tuple(BlockKey(prefix + h) for h in chain)
    hashes = event_hashes(prefix, chain)
    ours: list[Event] = [
        Cleared(),
        Stored(keys, POOL, BLOCK_SIZE, (EXTRA,) * len(keys)),
        Removed(keys[:1], POOL),
        Stored(keys, WARM, 16, (EXTRA,) * len(keys)),
    ]
    raw = msgspec.msgpack.encode(batch_wire(1.5, ours))

    theirs = KVEventBatch(
        ts=1.5,
        events=[
            AllBlocksCleared(),
            BlockStored(
                block_hashes=hashes,
                parent_block_hash=None,
                token_ids=[],
                block_size=BLOCK_SIZE,
                lora_id=None,
                medium="CPU",
                lora_name=None,
                extra_keys=[EXTRA] * len(hashes),
                locality="LOCAL",
                ownership="infercache-pool",
            ),
            BlockRemoved(
                block_hashes=hashes[:1], medium="CPU", locality="LOCAL", ownership="infercache-pool"
            ),
            BlockStored(
                block_hashes=hashes,
                parent_block_hash=None,
                token_ids=[],
                block_size=16,
                lora_id=None,
                medium="STORAGE",
                lora_name=None,
                extra_keys=[EXTRA] * len(hashes),
                locality="REMOTE",
                ownership="infercache-warm",
            ),
        ],
        data_parallel_rank=0,
    )
    assert raw == msgspec.msgpack.encode(theirs), "vLLM's encoder makes the same bytes"
    decoded = msgspec.msgpack.Decoder(type=KVEventBatch).decode(raw)
    assert isinstance(decoded.events[0], AllBlocksCleared)
    assert decoded.events[1].block_hashes == hashes
    assert isinstance(decoded.events[2], BlockRemoved)
    assert decoded.events[3].medium == "STORAGE"


class PodIndex:
    """What a router's index holds for the pod, from the sidecar's stream (replayed)."""

    def __init__(self, subscriber: EventSubscriber, replay: str) -> None:
        self._sub, self._replay = subscriber, replay
        self.events: list[Any] = []
        self.where: dict[bytes, set[str]] = {}
        self.extra: dict[bytes, dict[str, str]] = {}

    def refresh(self) -> None:
        self.events = self._sub.replay(self._replay)
        self.where, self.extra = {}, {}
        assert isinstance(self.events[0], AllBlocksCleared), "a publisher starts with a clear"
        for e in self.events:
            if isinstance(e, AllBlocksCleared):
                self.where.clear()
                continue
            for i, h in enumerate(e.block_hashes):
                media = self.where.setdefault(h, set())
                if isinstance(e, BlockStored):
                    media.add(e.medium)
                    self.extra[h] = dict(tuple(p) for p in e.extra_keys[i])
                elif isinstance(e, BlockRemoved):
                    media.discard(e.medium)

    def until(self, what: Callable[[PodIndex], bool], timeout_s: float = 60) -> bool:
        """Refresh until `what` holds (a bound on delivery, not a timing assertion)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.refresh()
            if what(self) or time.monotonic() > deadline:
                return what(self)
            time.sleep(0.1)

    def holds(self, hashes: set[bytes], medium: str) -> bool:
        return all(medium in self.where.get(h, ()) for h in hashes)

    def lacks(self, hashes: set[bytes], medium: str) -> bool:
        return all(medium not in self.where.get(h, ()) for h in hashes)


@pytest.fixture
def publishing_sidecar(redis: RedisServer) -> Iterator[tuple[SidecarServer, PodIndex]]:
    redis.flushall()
    pub, replay = free_port(), free_port()
    server = SidecarServer(
        redis_url=redis.url,
        args=[
            "--kv-events-endpoint",
            f"tcp://*:{pub}",
            "--kv-events-replay-endpoint",
            f"tcp://127.0.0.1:{replay}",
        ],
    )
    server.start()
    subscriber = EventSubscriber(f"tcp://127.0.0.1:{pub}")
    yield server, PodIndex(subscriber, f"tcp://127.0.0.1:{replay}")
    subscriber.close()
    server.stop()


def _run(model: Path, sidecar: SidecarServer) -> tuple[dict[str, Any], set[bytes], dict[str, str]]:
    """A fresh engine answers prompt a: (its result, the hashes and the extra_keys of the
    blocks its connector published in vLLM's own stream)."""
    port = free_port()
    engine = EngineProcess(
        model,
        connector="infercache",
        extra={"sidecar": sidecar.target},
        kv_events=f"tcp://*:{port}",
    )
    subscriber = EventSubscriber(f"tcp://127.0.0.1:{port}", topic="kv")
    try:
        (result,) = engine.generate([PROMPTS["a"]])
        seen = subscriber.collect(lambda s: len(s.stored_hashes("CPU")) >= SAVED_BLOCKS)
    finally:
        subscriber.close()
        engine.close()
    stored = seen.stored("CPU")
    assert stored, "the connector published nothing in vLLM's stream"
    extras = {tuple(tuple(p) for p in x) for e in stored for x in e.extra_keys}
    assert len(extras) == 1, "one identity per run"
    return result, seen.stored_hashes("CPU"), dict(extras.pop())


def _sidecars(extra: dict[str, str]) -> dict[str, str]:
    """What the sidecar's stream carries of the connector's extra_keys: all but the
    adapter's entries (the adapter is in the chain hash the sidecar is given)."""
    return {k: v for k, v in extra.items() if k not in ("lora", "adapter")}


def test_weight_change_and_rollback_in_the_sidecars_stream(
    served_dir: Path, models: Models, publishing_sidecar: tuple[SidecarServer, PodIndex]
) -> None:
    sidecar, pod = publishing_sidecar
    _first, v1, v1_extra = _run(served_dir, sidecar)
    assert len(v1) == SAVED_BLOCKS
    assert pod.until(lambda p: p.holds(v1, "CPU")), (
        f"the sidecar's stream lacks the connector's hashes: {pod.events}"
    )
    assert all(pod.extra[h] == _sidecars(v1_extra) for h in v1), (pod.extra, v1_extra)

    # Fine-tune in place: same path, other weights; the v2 engine's blocks are another identity.
    replace_weights(models.v2, served_dir)
    stale, v2, v2_extra = _run(served_dir, sidecar)
    assert stale["cached"] == 0
    assert v2_extra["model"] != v1_extra["model"]
    assert v2_extra["scope"] != v1_extra["scope"]
    assert not v1 & v2
    assert pod.until(
        lambda p: p.holds(v2, "CPU") and p.lacks(v1, "CPU") and p.holds(v1, "STORAGE")
    ), f"after the weight change: {pod.events}"
    assert all(pod.extra[h] == _sidecars(v2_extra) for h in v2)
    removed = {h for e in pod.events if isinstance(e, BlockRemoved) for h in e.block_hashes}
    assert v1 <= removed, "v1's blocks were removed from the pool"

    # Roll back: v1's blocks come back from the warm tier and are stored in the pool again.
    replace_weights(models.v1, served_dir)
    back, again, again_extra = _run(served_dir, sidecar)
    assert back["cached"] == LOADABLE
    assert (again, again_extra) == (v1, v1_extra), "the same identity, the same hashes"
    assert pod.until(
        lambda p: p.holds(v1, "CPU") and p.lacks(v2, "CPU") and p.holds(v2, "STORAGE")
    ), f"after the rollback: {pod.events}"
    assert all(pod.extra[h] == _sidecars(v1_extra) for h in v1)

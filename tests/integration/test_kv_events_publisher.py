"""The sidecar's own KV event publisher, in a real sidecar process with Redis as warm tier.

A router's view: a SUB socket and the replay socket, msgpack decoded raw (this venv has
no vLLM; tests/vllm/ decodes the same stream with vLLM's own KVEventBatch decoder). A
new publisher starts with AllBlocksCleared; a weight change removes the old identity's
pool blocks and stores them in the warm tier; a rollback's promotion stores them in the
pool again; a dropped version's warm blocks are removed, and so are demoted blocks whose
warm-tier ttl passed. Every hash is the connector's (router_hash) for the same block,
every block's extra_keys the connector's scope entries.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from infercache.v1 import kv_pb2 as pb
from infercache.v1 import kv_pb2_grpc
from infercache_client.vllm.router_hash import event_hashes, request_scope, tenant_salt_digest

from tests.support.metrics import event_counters
from tests.support.processes import RedisServer, free_port
from tests.support.sidecars import SidecarProcess

pytest.importorskip("torch")
zmq = pytest.importorskip("zmq")
msgspec = pytest.importorskip("msgspec")

LAYOUT = pb.KvLayout(
    num_layers=1, num_kv_heads=1, head_dim=8, tokens_per_block=2, dtype=pb.KV_DTYPE_FLOAT16
)
TENANT = "acme"
CHAIN = [b"h1" * 16, b"h2" * 16]
END_SEQ = -1


class Router:
    """SUB on the publisher and DEALER requests to its replay socket; raw msgpack."""

    def __init__(self, endpoint: str, replay: str) -> None:
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt_string(zmq.SUBSCRIBE, "")
        self.sub.connect(endpoint)
        self.replay_endpoint = replay
        self.live: list[tuple[int, bytes]] = []

    def drain(self) -> None:
        while self.sub.poll(0):
            _topic, seq, payload = self.sub.recv_multipart()
            self.live.append((int.from_bytes(seq, "big"), payload))

    def replay(self, start: int = 0) -> list[tuple[int, bytes]]:
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.connect(self.replay_endpoint)
        out: list[tuple[int, bytes]] = []
        try:
            dealer.send_multipart((b"", start.to_bytes(8, "big")))
            while dealer.poll(10_000):
                _empty, _topic, seq, payload = dealer.recv_multipart()
                n = int.from_bytes(seq, "big", signed=True)
                if n == END_SEQ:
                    return out
                out.append((n, payload))
        finally:
            dealer.close(linger=0)
        raise AssertionError("the replay socket sent no end marker")

    def events(self) -> list[dict[str, Any]]:
        """Every event published so far, in order (from the replay buffer)."""
        batches = self.replay()
        assert [n for n, _ in batches] == list(range(len(batches))), "sequence numbers"
        out: list[dict[str, Any]] = []
        for _, payload in batches:
            ts, events, rank = msgspec.msgpack.decode(payload)
            assert isinstance(ts, float)
            assert rank == 0
            out.extend(events)
        return out

    def until(self, what: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
        """The events once `what` holds of them (a bound on delivery, not a timing check)."""
        deadline = time.monotonic() + 30
        while True:
            events = self.events()
            if what(events) or time.monotonic() > deadline:
                return events
            time.sleep(0.05)

    def close(self) -> None:
        self.sub.close(linger=0)
        self.ctx.term()


def hashes(events: list[dict[str, Any]], kind: str, medium: str) -> list[bytes]:
    return [
        h for e in events if e["type"] == kind and e["medium"] == medium for h in e["block_hashes"]
    ]


def _publishing(
    redis_server: RedisServer, tmp_path: Path, warm_ttl_s: str = "86400"
) -> Iterator[tuple[SidecarProcess, Router]]:
    pub, replay = free_port(), free_port()
    sidecar = SidecarProcess(
        redis_server.url,
        metrics=True,
        kv_pool_bytes="4KiB",
        kv_shm_dir=str(tmp_path),
        kv_promote_timeout_ms="2000",
        kv_events_endpoint=f"tcp://*:{pub}",
        kv_events_replay_endpoint=f"tcp://127.0.0.1:{replay}",
        kv_warm_ttl_s=warm_ttl_s,
    )
    router = Router(f"tcp://127.0.0.1:{pub}", f"tcp://127.0.0.1:{replay}")
    try:
        sidecar.wait_ready()
        yield sidecar, router
    finally:
        router.close()
        sidecar.stop()


@pytest.fixture
def publishing(
    redis_server: RedisServer, tmp_path: Path
) -> Iterator[tuple[SidecarProcess, Router]]:
    yield from _publishing(redis_server, tmp_path)


@pytest.fixture
def publishing_short_ttl(
    redis_server: RedisServer, tmp_path: Path
) -> Iterator[tuple[SidecarProcess, Router]]:
    yield from _publishing(redis_server, tmp_path, warm_ttl_s="1")


def extra_keys(a: pb.AttachHotTierResponse, fp: str) -> list[list[str]]:
    """What the connector's events carry for a plain request of TENANT, less its adapter."""
    return [
        ["schema", "infercache.kv.event.v1"],
        ["model", fp],
        ["layout", "1x1x8/2/float16"],
        ["scope", a.scope_id],
        ["tenant_salt", tenant_salt_digest(TENANT, "")],
    ]


async def _attach(stub: kv_pb2_grpc.KvCacheServiceStub, fp: str) -> pb.AttachHotTierResponse:
    response: pb.AttachHotTierResponse = await stub.AttachHotTier(
        pb.AttachHotTierRequest(model_fingerprint=fp, layout=LAYOUT), timeout=60
    )
    return response


async def _save(stub: kv_pb2_grpc.KvCacheServiceStub, a: pb.AttachHotTierResponse) -> None:
    alloc = await stub.AllocateBlocks(
        pb.AllocateBlocksRequest(attachment_id=a.attachment_id, count=len(CHAIN)), timeout=10
    )
    await stub.CommitBlocks(
        pb.CommitBlocksRequest(
            attachment_id=a.attachment_id,
            lease_id=alloc.lease.lease_id,
            tenant=TENANT,
            blocks=[
                pb.BlockCommit(slot_id=s, block_hash=h)
                for s, h in zip(alloc.slot_ids, CHAIN, strict=True)
            ],
        ),
        timeout=10,
    )
    await stub.Release(
        pb.ReleaseRequest(attachment_id=a.attachment_id, lease_id=alloc.lease.lease_id),
        timeout=10,
    )


async def _saved_v1(
    stub: kv_pb2_grpc.KvCacheServiceStub,
) -> tuple[pb.AttachHotTierResponse, list[bytes]]:
    """Attach fp-1 and save CHAIN: the attachment and the hashes its blocks publish under."""
    v1 = await _attach(stub, "fp-1")
    await _save(stub, v1)
    return v1, event_hashes(request_scope(v1.scope_id, TENANT, ""), CHAIN)


async def test_weight_change_and_rollback_are_published_with_the_connectors_hashes(
    publishing: tuple[SidecarProcess, Router],
) -> None:
    sidecar, router = publishing
    async with grpc.aio.insecure_channel(sidecar.target) as channel:
        stub = kv_pb2_grpc.KvCacheServiceStub(channel)
        v1, v1_hashes = await _saved_v1(stub)
        events = router.until(lambda ev: len(hashes(ev, "BlockStored", "CPU")) >= 2)
        assert hashes(events, "BlockStored", "CPU") == v1_hashes
        stored = next(e for e in events if e["type"] == "BlockStored")
        assert (stored["ownership"], stored["locality"], stored["block_size"]) == (
            "infercache-pool",
            "LOCAL",
            2,
        )
        assert stored["extra_keys"] == [extra_keys(v1, "fp-1")] * 2
        assert events[0] == {"type": "AllBlocksCleared"}, "a new publisher voids earlier ones"
        assert (stored["token_ids"], stored["parent_block_hash"]) == ([], None)

        # In-place weight change: v1's blocks leave the pool and go to the warm tier.
        v2 = await _attach(stub, "fp-2")
        v2_hashes = event_hashes(request_scope(v2.scope_id, TENANT, ""), CHAIN)
        assert not set(v1_hashes) & set(v2_hashes), "another identity, other hashes"
        events = router.until(lambda ev: len(hashes(ev, "BlockStored", "STORAGE")) >= 2)
        assert sorted(hashes(events, "BlockRemoved", "CPU")) == sorted(v1_hashes)
        assert sorted(hashes(events, "BlockStored", "STORAGE")) == sorted(v1_hashes)
        warm = next(e for e in events if e["type"] == "BlockStored" and e["medium"] == "STORAGE")
        assert (warm["ownership"], warm["locality"]) == ("infercache-warm", "REMOTE")
        assert warm["extra_keys"] == [extra_keys(v1, "fp-1")] * len(warm["block_hashes"])
        await _save(stub, v2)

        # Rollback: v2's go to the warm tier, v1's come back to the pool when looked up.
        back = await _attach(stub, "fp-1")
        assert back.scope_id == v1.scope_id
        for _ in range(50):
            hit = await stub.LookupPrefix(
                pb.LookupPrefixRequest(
                    attachment_id=back.attachment_id, tenant=TENANT, block_hashes=CHAIN
                ),
                timeout=10,
            )
            if hit.matched_blocks == len(CHAIN):
                break
        assert hit.matched_blocks == len(CHAIN)
        events = router.until(lambda ev: hashes(ev, "BlockStored", "CPU").count(v1_hashes[0]) >= 2)
        cpu_stored = hashes(events, "BlockStored", "CPU")
        assert cpu_stored == v1_hashes + v2_hashes + v1_hashes
        assert sorted(hashes(events, "BlockRemoved", "CPU")) == sorted(v1_hashes + v2_hashes)

        # A third version: v2 (neither current nor previous) is dropped from the warm tier.
        await _attach(stub, "fp-3")
        events = router.until(lambda ev: bool(hashes(ev, "BlockRemoved", "STORAGE")))
        assert sorted(hashes(events, "BlockRemoved", "STORAGE")) == sorted(v2_hashes)

    router.drain()
    live = router.replay()
    assert router.live, "the PUB socket delivered batches to a subscriber"
    assert set(router.live) <= set(live), "what the PUB sent is what the replay buffer holds"
    counters = event_counters(sidecar, "infercache_kv_event_publisher_events")
    assert counters["published"] >= len(live)
    assert (counters["dropped"], counters["send_failures"]) == (0, 0)


async def test_demoted_blocks_are_removed_when_the_warm_tier_lets_them_expire(
    publishing_short_ttl: tuple[SidecarProcess, Router],
) -> None:
    sidecar, router = publishing_short_ttl
    async with grpc.aio.insecure_channel(sidecar.target) as channel:
        stub = kv_pb2_grpc.KvCacheServiceStub(channel)
        _, v1_hashes = await _saved_v1(stub)
        await _attach(stub, "fp-2")  # v1's blocks go to the warm tier for 1 s
        events = router.until(lambda ev: len(hashes(ev, "BlockRemoved", "STORAGE")) >= 2)
        assert sorted(hashes(events, "BlockStored", "STORAGE")) == sorted(v1_hashes)
        assert sorted(hashes(events, "BlockRemoved", "STORAGE")) == sorted(v1_hashes)
        # The removal is the truth: a rollback finds nothing of v1 in the warm tier.
        back = await _attach(stub, "fp-1")
        hit = await stub.LookupPrefix(
            pb.LookupPrefixRequest(
                attachment_id=back.attachment_id, tenant=TENANT, block_hashes=CHAIN
            ),
            timeout=10,
        )
        assert (hit.matched_blocks, hit.retry_later) == (0, False)

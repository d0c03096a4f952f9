"""The client's request builders: the sync and async clients send the same messages
with the same deadlines, built once in infercache_client.builders."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from infercache.v1 import cache_pb2 as pb
from infercache_client import AsyncCacheClient, CacheClient, make_key, make_pacing, make_traits
from infercache_client import builders as build

KEY = make_key(tenant="acme", prompt_version="p1", text="hi", temperature=0.0)
TRAITS = make_traits(private_data=True)
COST = pb.ComputeCost(latency_ms=12, prompt_tokens=3, completion_tokens=4)


class Recorder:
    """A stand-in stub: every RPC records (method, request, timeout) and answers `answer`."""

    def __init__(self, awaitable: bool) -> None:
        self.calls: list[tuple[str, Any, float | None]] = []
        self._awaitable = awaitable

    def __getattr__(self, method: str) -> Callable[..., Any]:
        def call(request: Any, timeout: float | None = None) -> Any:
            self.calls.append((method, request, timeout))
            answer = pb.LookupBatchResponse() if method == "LookupBatch" else None
            if not self._awaitable:
                return answer
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            future.set_result(answer)
            return future

        return call


async def test_sync_and_async_clients_send_identical_requests() -> None:
    """Every unary data-plane method of both clients sends the same message and deadline."""
    sync, aio = CacheClient("127.0.0.1:1"), AsyncCacheClient("127.0.0.1:1")
    sync_stub, aio_stub = Recorder(awaitable=False), Recorder(awaitable=True)
    sync._stub, aio._stub = sync_stub, aio_stub
    try:
        digest = bytes(32)
        sync.lookup(KEY, max_age_seconds=5, wait_ms=250, traits=TRAITS)
        await aio.lookup(KEY, max_age_seconds=5, wait_ms=250, traits=TRAITS)
        sync.lookup_batch([KEY, KEY], traits=TRAITS)
        await aio.lookup_batch([KEY, KEY], traits=TRAITS)
        sync.store(KEY, b"answer", lease=b"L", ttl_seconds=60, cost=COST, traits=TRAITS)
        await aio.store(KEY, b"answer", lease=b"L", ttl_seconds=60, cost=COST, traits=TRAITS)
        sync.report_outcome(digest, accepted=False, reason="safety")
        await aio.report_outcome(digest, accepted=False, reason="safety")
        sync.server_info()
        await aio.server_info()
    finally:
        sync.close()
        await aio.close()
    assert [m for m, _, _ in sync_stub.calls] == [
        "Lookup",
        "LookupBatch",
        "Store",
        "ReportOutcome",
        "GetServerInfo",
    ]
    assert sync_stub.calls == aio_stub.calls


def test_lookup_builders() -> None:
    """A lookup carries key, freshness bound, wait and traits; its default deadline is 1 s
    plus the wait; a stream's lookup is the same message with the pacing beside it."""
    req = build.lookup_request(KEY, max_age_seconds=5, wait_ms=250, traits=TRAITS)
    assert (req.key, req.max_age_seconds, req.wait_ms, req.traits) == (KEY, 5, 250, TRAITS)
    assert build.lookup_timeout(None, 250) == 1.25
    assert build.lookup_timeout(3.0, 250) == 3.0
    pacing = make_pacing(tokens_per_second=50)
    stream = build.lookup_stream_request(
        KEY, pacing=pacing, max_age_seconds=5, wait_ms=250, traits=TRAITS
    )
    assert stream.lookup == req
    assert stream.pacing == pacing
    assert not build.lookup_request(KEY).HasField("traits")


def test_batch_and_store_builders() -> None:
    """A batch declares the same traits for every key; a store without payload is a
    StoreStream's opening message (no payload, no chunks)."""
    batch = build.lookup_batch_request([KEY, KEY], traits=TRAITS)
    assert [r.key for r in batch.requests] == [KEY, KEY]
    assert all(r.traits == TRAITS for r in batch.requests)
    chunks = [pb.ChunkBoundary(size_bytes=3, tokens=1)]
    store = build.store_request(KEY, b"abc", lease=b"L", ttl_seconds=9, cost=COST, chunks=chunks)
    assert (store.payload, store.lease, store.ttl_seconds, store.cost) == (b"abc", b"L", 9, COST)
    assert list(store.chunks) == chunks
    opening = build.store_request(KEY, lease=b"L")
    assert not opening.payload
    assert not opening.chunks


def test_report_and_stream_message_builders() -> None:
    """Verdicts map accepted/rejected; chunk text is sent as UTF-8; finish names reason and cost."""
    accepted = build.report_request(b"d" * 32, accepted=True)
    rejected = build.report_request(b"d" * 32, accepted=False, reason="format")
    assert accepted.verdict == pb.REPORT_OUTCOME_VERDICT_ACCEPTED
    assert (rejected.verdict, rejected.reason) == (pb.REPORT_OUTCOME_VERDICT_REJECTED, "format")
    chunk = build.chunk_message("héllo", tokens=2, offset_ms=7).chunk
    assert (chunk.data, chunk.tokens, chunk.offset_ms) == ("héllo".encode(), 2, 7)
    finish = build.finish_message("length", COST).finish
    assert (finish.finish_reason, finish.cost) == ("length", COST)
    assert build.channel_options(1024) == [
        ("grpc.max_receive_message_length", 1024),
        ("grpc.max_send_message_length", 1024),
    ]


def test_admin_builders() -> None:
    """An invalidation selector leaves unnamed dimensions empty (any); a prewarm names
    exactly one source, and an empty key list is still the `requests` source."""
    from infercache_client.admin import prewarm_request, selector

    s = selector(tenant="acme", adapter_version="support")
    assert (s.tenant, s.model_version, s.adapter_version, s.prompt_version, s.all) == (
        "acme",
        "",
        "support",
        "",
        False,
    )
    assert selector(all=True).all
    empty = prewarm_request(keys=[], ttl_seconds=60, concurrency=2, max_failures=1)
    assert empty.WhichOneof("source") == "requests"
    assert (empty.ttl_seconds, empty.concurrency, empty.max_failures) == (60, 2, 1)
    top = prewarm_request(from_version="fp1-a", top_k=5)
    assert top.WhichOneof("source") == "from_version"
    assert (top.from_version.model_version, top.from_version.top_k) == ("fp1-a", 5)
    with pytest.raises(ValueError, match="not both"):
        prewarm_request(keys=[KEY], from_version="fp1-a", top_k=1)
    with pytest.raises(ValueError, match="not both"):
        prewarm_request()


def test_replay_request_is_importable_as_the_readme_shows() -> None:
    """`from infercache_client import replay_request` (README, Prewarm) is the builder."""
    from infercache_client import replay_request

    assert replay_request is build.replay_request
    body = b'{"model":"m","prompt":"x"}'
    replay = replay_request("/v1/completions", body)
    assert (replay.path, replay.content_type, replay.body) == (
        "/v1/completions",
        "application/json",
        body,
    )

"""LookupStream and StoreStream over real gRPC: replay, pacing, commit-on-finish, limits."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest
from infercache.v1 import cache_pb2 as pb
from infercache.v1 import cache_pb2_grpc
from infercache_client import CACHE_MARKER, join_chunks, make_pacing

from sidecar.testing import InProcessSidecar
from tests.support.keys import key
from tests.support.sidecars import StartSidecar
from tests.support.sidecars import sidecar as harness_sidecar

pytestmark = pytest.mark.timeout(60)

ANSWER = ["Click ", "'Forgot ", "password'", " on the", " sign-in page."]


@pytest.fixture
async def sc(start_sidecar: StartSidecar) -> InProcessSidecar:
    return await start_sidecar(
        max_payload_bytes="1KiB", max_chunks="8", stream_idle_timeout_ms="400"
    )


async def stream_store(
    s: InProcessSidecar, k: pb.CacheKey, parts: list[str], *, tokens: int = 1, reason: str = "stop"
) -> pb.StoreStreamResponse:
    """Lookup for a lease (must MISS), then StoreStream `parts` and finish."""
    miss = await s.client.lookup(k)
    assert miss.outcome == pb.LOOKUP_OUTCOME_MISS
    async with s.client.store_stream(k, miss.lease) as w:
        for p in parts:
            await w.send(p, tokens=tokens)
        w.finish(reason, cost=pb.ComputeCost(latency_ms=900, completion_tokens=len(parts)))
    assert w.response is not None
    return w.response


async def replay(s: InProcessSidecar, k: pb.CacheKey, **kw: Any) -> tuple[str, Any, list[pb.Chunk]]:
    """(marker, header, chunks) of one LookupStream."""
    stream = s.client.lookup_stream(k, **kw)
    header = await stream.header()
    chunks = [c async for c in stream]
    return await stream.cache_marker(), header, chunks


async def wait_for(cond: Any, timeout_s: float = 5.0) -> None:
    """Poll a condition (bounded)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_replay_returns_exactly_the_stored_chunks_flagged_cached(
    sc: InProcessSidecar,
) -> None:
    """StoreStream then LookupStream: header first, then the same chunks in order, all cached."""
    k = key()
    stored = await stream_store(sc, k, ANSWER, tokens=2)
    assert stored.store.outcome == pb.STORE_OUTCOME_STORED
    assert (stored.chunk_count, stored.total_bytes) == (5, len("".join(ANSWER)))
    marker, header, chunks = await replay(sc, k)
    assert marker == "hit"
    assert header.lookup.outcome == pb.LOOKUP_OUTCOME_HIT
    assert header.lookup.tier == pb.TIER_HOT
    assert header.lookup.key_digest == stored.store.key_digest
    assert header.lookup.payload == b"", "the header never carries the payload"
    assert header.lookup.cost.latency_ms == 900
    assert header.model_version == "m1"
    assert header.finish_reason == "stop"
    assert (header.chunk_count, header.total_bytes) == (5, len("".join(ANSWER)))
    assert [c.data.decode() for c in chunks] == ANSWER
    assert [c.index for c in chunks] == [0, 1, 2, 3, 4]
    assert all(c.cached and c.tokens == 2 for c in chunks)
    offsets = [c.offset_ms for c in chunks]
    assert offsets == sorted(offsets)
    # The unary Lookup sees the whole answer.
    hit = await sc.client.lookup(k)
    assert hit.payload == "".join(ANSWER).encode()


async def test_miss_header_carries_the_lease_and_the_marker(sc: InProcessSidecar) -> None:
    """A MISS is a header with a usable lease and no chunks; the marker says miss."""
    k = key("never stored")
    marker, header, chunks = await replay(sc, k)
    assert marker == "miss"
    assert header.lookup.outcome == pb.LOOKUP_OUTCOME_MISS
    assert header.lookup.lease
    assert header.lookup.lease_holder
    assert len(header.lookup.key_digest) == 32
    assert chunks == []
    async with sc.client.store_stream(k, header.lookup.lease) as w:
        await w.send("computed")
    assert w.response is not None
    assert w.response.store.outcome == pb.STORE_OUTCOME_STORED


async def test_plain_store_with_chunk_boundaries_replays_them(sc: InProcessSidecar) -> None:
    """Store(payload, chunks) keeps the boundaries; LookupStream replays them."""
    k = key("plain store")
    payload, bounds = join_chunks(ANSWER, tokens=[1, 2, 1, 2, 3])
    miss = await sc.client.lookup(k)
    resp = await sc.client.store(k, payload, lease=miss.lease, chunks=bounds)
    assert resp.outcome == pb.STORE_OUTCOME_STORED
    _, header, chunks = await replay(sc, k)
    assert header.finish_reason == ""
    assert [c.data.decode() for c in chunks] == ANSWER
    assert [c.tokens for c in chunks] == [1, 2, 1, 2, 3]


async def test_plain_store_without_chunks_replays_as_one_chunk(sc: InProcessSidecar) -> None:
    """A result stored in one piece replays as one cached chunk with its completion tokens."""
    k = key("one piece")
    miss = await sc.client.lookup(k)
    await sc.client.store(
        k, b"whole answer", lease=miss.lease, cost=pb.ComputeCost(completion_tokens=3)
    )
    _, header, chunks = await replay(sc, k)
    assert header.chunk_count == 1
    assert [(c.data, c.tokens, c.cached) for c in chunks] == [(b"whole answer", 3, True)]


@pytest.mark.parametrize(
    ("sizes", "field"),
    [([3, 3], "chunks"), ([1] * 9, "chunks"), ([6, 6], "chunks")],
)
async def test_chunk_boundaries_that_do_not_fit_are_invalid(
    sc: InProcessSidecar, sizes: list[int], field: str
) -> None:
    """Boundaries that do not add up to the payload, or too many, are INVALID_ARGUMENT."""
    k = key("bad bounds")
    miss = await sc.client.lookup(k)
    bounds = [pb.ChunkBoundary(size_bytes=n) for n in sizes]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await sc.client.store(k, b"x" * 9, lease=miss.lease, chunks=bounds)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.value.details() or "").startswith(field)
    assert (await sc.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS


async def test_pacing_at_n_tokens_per_second_takes_about_the_expected_time(
    sc: InProcessSidecar,
) -> None:
    """8 one-token chunks at 20 tokens/s: the 7 gaps take about 0.35 s (wide bounds)."""
    k = key("paced")
    await stream_store(sc, k, [f"t{i} " for i in range(8)], tokens=1)
    started = time.monotonic()
    _, _, chunks = await replay(sc, k, pacing=make_pacing(tokens_per_second=20))
    elapsed = time.monotonic() - started
    assert len(chunks) == 8
    assert 0.3 <= elapsed < 3.0, elapsed


async def test_original_pacing_is_capped_by_max_delay(sc: InProcessSidecar) -> None:
    """Original gaps of 1 s each, capped at 100 ms, replay in about 0.2 s, not 2 s."""
    k = key("original timing")
    miss = await sc.client.lookup(k)
    payload, bounds = join_chunks(["a", "b", "c"])
    for b, offset in zip(bounds, [0, 1000, 2000], strict=True):
        b.offset_ms = offset
    await sc.client.store(k, payload, lease=miss.lease, chunks=bounds)
    started = time.monotonic()
    _, _, chunks = await replay(sc, k, pacing=make_pacing(original=True, max_delay_ms=100))
    elapsed = time.monotonic() - started
    assert [c.offset_ms for c in chunks] == [0, 1000, 2000]
    assert 0.18 <= elapsed < 1.5, elapsed


async def test_invalid_pacing_is_invalid_argument(sc: InProcessSidecar) -> None:
    """A non-positive rate is refused before anything is looked up."""
    stream = sc.client.lookup_stream(
        key(), pacing=pb.Pacing(mode=pb.PACING_MODE_TOKENS_PER_SECOND, tokens_per_second=0)
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stream.header()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "pacing.tokens_per_second" in (err.value.details() or "")


async def test_cancelled_replay_costs_nothing_further(sc: InProcessSidecar) -> None:
    """A client that cancels after two chunks of a slow replay stops the sidecar's work for it."""
    k = key("long answer")
    await stream_store(sc, k, [f"w{i}" for i in range(8)], tokens=1)
    stream = sc.client.lookup_stream(k, pacing=make_pacing(tokens_per_second=5))
    got = []
    async for chunk in stream:
        got.append(chunk)
        if len(got) == 2:
            stream.cancel()
            break
    stats = sc.stats
    await wait_for(lambda: stats.total("streams", event="replay.cancelled") == 1)
    sent = stats.total("streams", event="replay.chunks")
    assert sent <= 3
    await asyncio.sleep(0.5)  # more than two 200 ms gaps: a live replay would have sent more
    assert stats.total("streams", event="replay.chunks") == sent
    assert stats.total("streams", event="replay.completed") == 0


async def test_store_stream_abandoned_by_an_exception_stores_nothing(sc: InProcessSidecar) -> None:
    """An exception inside the writer block abandons the stream: nothing stored, and the
    single-flight hold is given up at once (the next lookup holds), not at lease expiry."""
    k = key("abandoned")
    miss = await sc.client.lookup(k)
    assert miss.lease_holder

    class ModelCrashed(Exception):
        pass

    async def generate() -> None:
        async with sc.client.store_stream(k, miss.lease) as w:
            await w.send("partial ")
            await w.send("answer")
            raise ModelCrashed

    with pytest.raises(ModelCrashed):
        await generate()
    # The writer waited for the sidecar's answer, so this holds without polling.
    assert sc.stats.total("streams", event="store.failed") == 1
    after = await sc.client.lookup(k)
    assert (after.outcome, after.lease_holder) == (pb.LOOKUP_OUTCOME_MISS, True)
    assert sc.stats.total("stores", result="stored") == 0


async def test_store_stream_cancelled_midway_stores_nothing(sc: InProcessSidecar) -> None:
    """A writer task cancelled mid-stream (the client going away): nothing stored."""
    k = key("cancelled")
    miss = await sc.client.lookup(k)
    sent = asyncio.Event()

    async def generate() -> None:
        async with sc.client.store_stream(k, miss.lease) as w:
            await w.send("partial ")
            sent.set()
            await asyncio.sleep(30)  # the model is still generating

    task = asyncio.create_task(generate())
    await sent.wait()
    await asyncio.sleep(0.3)  # let the sidecar read what was sent
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_for(lambda: sc.stats.total("streams", event="store.cancelled") == 1)
    assert (await sc.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS
    assert sc.stats.total("stores", result="stored") == 0


async def test_stream_without_finish_stores_nothing(sc: InProcessSidecar) -> None:
    """A stream that half-closes without a finish message is INVALID_ARGUMENT; nothing stored."""
    k = key("no finish")
    miss = await sc.client.lookup(k)
    async with grpc.aio.insecure_channel(sc.target) as ch:
        call = cache_pb2_grpc.CacheServiceStub(ch).StoreStream()
        await call.write(pb.StoreStreamRequest(open=pb.StoreRequest(key=k, lease=miss.lease)))
        await call.write(pb.StoreStreamRequest(chunk=pb.Chunk(data=b"half")))
        await call.done_writing()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "finish" in (err.value.details() or "")
    assert (await sc.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS


@pytest.mark.parametrize(
    ("parts", "pause_s", "code"),
    [
        (["x" * 600, "y" * 600], 0.0, grpc.StatusCode.INVALID_ARGUMENT),  # bytes > 1 KiB
        (["c"] * 9, 0.0, grpc.StatusCode.INVALID_ARGUMENT),  # chunks > 8
        (["a", "b"], 0.8, grpc.StatusCode.DEADLINE_EXCEEDED),  # silent > 400 ms
    ],
    ids=["bytes", "chunks", "idle"],
)
async def test_over_limit_stream_stores_nothing(
    sc: InProcessSidecar, parts: list[str], pause_s: float, code: grpc.StatusCode
) -> None:
    """Too many bytes, too many chunks or too long a silence: the right status, nothing stored."""
    k = key(f"over limit {code}")
    miss = await sc.client.lookup(k)

    async def generate() -> None:
        async with sc.client.store_stream(k, miss.lease) as w:
            for p in parts:
                await w.send(p)
                await asyncio.sleep(pause_s)

    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate()
    assert err.value.code() == code, err.value.details()
    assert "nothing was stored" in (err.value.details() or "")
    assert (await sc.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS
    assert sc.stats.total("stores", result="stored") == 0
    assert sc.stats.total("streams", version="m1", event="store.failed") == 1


async def test_a_client_still_writing_after_the_refusal_gets_the_refusal(
    sc: InProcessSidecar,
) -> None:
    """A client that keeps writing chunks after the sidecar refused its stream (200 chunks,
    the limit 8) gets the refusal's INVALID_ARGUMENT, not grpc.aio's INTERNAL "Internal
    error from Core" for a write the closed stream failed (the sidecar reads the rest
    until the client half-closes before it answers)."""

    async def write_on(k: pb.CacheKey, lease: bytes) -> None:
        async with sc.client.store_stream(k, lease) as w:
            for _ in range(200):
                await w.send("c")

    codes = []
    for i in range(10):
        k = key(f"writes on {i}")
        miss = await sc.client.lookup(k)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await write_on(k, miss.lease)
        codes.append((err.value.code(), err.value.details()))
    assert {c for c, _ in codes} == {grpc.StatusCode.INVALID_ARGUMENT}, codes
    assert sc.stats.total("stores", result="stored") == 0


async def test_bad_lease_fails_at_open_not_at_the_end(sc: InProcessSidecar) -> None:
    """A forged lease is refused as soon as the opening message arrives."""
    k = key("forged")
    async with grpc.aio.insecure_channel(sc.target) as ch:
        call = cache_pb2_grpc.CacheServiceStub(ch).StoreStream()
        await call.write(pb.StoreStreamRequest(open=pb.StoreRequest(key=k, lease=b"x" * 89)))
        # No chunk, no half-close: the sidecar answers from the opening message alone.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await asyncio.wait_for(call, 5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "lease" in (err.value.details() or "")


@pytest.mark.parametrize(
    ("first", "detail"),
    [
        (pb.StoreStreamRequest(chunk=pb.Chunk(data=b"x")), "open"),
        (pb.StoreStreamRequest(open=pb.StoreRequest(key=key(), payload=b"x")), "open.payload"),
        (pb.StoreStreamRequest(open=pb.StoreRequest(key=pb.CacheKey(text="t"))), "open.key"),
        (pb.StoreStreamRequest(), "message"),
    ],
    ids=["chunk-first", "payload-in-open", "bad-key", "empty"],
)
async def test_malformed_stream_is_invalid_argument(
    sc: InProcessSidecar, first: pb.StoreStreamRequest, detail: str
) -> None:
    """A stream that does not open properly is INVALID_ARGUMENT naming the field."""
    async with grpc.aio.insecure_channel(sc.target) as ch:
        call = cache_pb2_grpc.CacheServiceStub(ch).StoreStream()
        await call.write(first)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await asyncio.wait_for(call, 5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.value.details() or "").startswith(detail), err.value.details()


async def test_missing_finish_reason_is_invalid(sc: InProcessSidecar) -> None:
    """A finish message without a reason does not commit."""
    k = key("no reason")
    miss = await sc.client.lookup(k)

    async def generate() -> None:
        async with sc.client.store_stream(k, miss.lease) as w:
            await w.send("text")
            w.finish("")

    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (await sc.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS


async def test_lease_valid_at_open_commits_after_it_expires(start_sidecar: StartSidecar) -> None:
    """A generation longer than the lease TTL still commits: the lease is judged at open."""
    s = await start_sidecar(lease_ttl_s="1")
    k = key("long generation")
    miss = await s.client.lookup(k)
    async with s.client.store_stream(k, miss.lease) as w:
        for part in ("slow ", "model ", "output"):
            await w.send(part)
            await asyncio.sleep(0.45)
    assert w.response is not None
    assert w.response.store.outcome == pb.STORE_OUTCOME_STORED


async def test_invalidate_during_the_stream_refuses_the_commit() -> None:
    """A stream whose lease predates a matching Invalidate ends STALE_LEASE, nothing stored."""
    async with harness_sidecar() as s:
        k = key("purged midway")
        miss = await s.client.lookup(k)
        async with s.client.store_stream(k, miss.lease) as w:
            await w.send("computed before ")
            await s.invalidate(tenant="acme", reason="bad template")
            await w.send("the purge")
        assert w.response is not None
        assert w.response.store.outcome == pb.STORE_OUTCOME_STALE_LEASE
        assert (await s.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS


async def test_sync_client_streams_both_ways(sc: InProcessSidecar) -> None:
    """The blocking client's store_stream and lookup_stream do what the async ones do."""
    from infercache_client import CacheClient

    k = key("sync")

    def run() -> tuple[pb.StoreStreamResponse | None, str, list[bytes]]:
        with CacheClient(sc.target) as c:
            miss = c.lookup(k)
            with c.store_stream(k, miss.lease) as w:
                for p in ANSWER:
                    w.send(p, tokens=1)
            stream = c.lookup_stream(k)
            header = stream.header()
            assert header.lookup.outcome == pb.LOOKUP_OUTCOME_HIT
            return w.response, stream.cache_marker(), [ch.data for ch in stream]

    response, marker, chunks = await asyncio.to_thread(run)
    assert response is not None
    assert response.store.outcome == pb.STORE_OUTCOME_STORED
    assert marker == "hit"
    assert [c.decode() for c in chunks] == ANSWER


async def test_marker_is_initial_metadata_visible_without_reading_messages(
    sc: InProcessSidecar,
) -> None:
    """A proxy can read x-infercache-cache from the initial metadata alone."""
    k = key("marker")
    await stream_store(sc, k, ["a", "b"])
    async with grpc.aio.insecure_channel(sc.target) as ch:
        call = cache_pb2_grpc.CacheServiceStub(ch).LookupStream(
            pb.LookupStreamRequest(lookup=pb.LookupRequest(key=k))
        )
        metadata = dict(await call.initial_metadata())
        call.cancel()
    assert metadata[CACHE_MARKER] == "hit"


POLICY = """
defaults:
  max_entry_bytes: 64
tenants:
  billing:
    cacheable: false
"""


@pytest.fixture
async def with_policy(start_sidecar: StartSidecar, tmp_path: Any) -> InProcessSidecar:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return await start_sidecar(policy_file=str(path), policy_poll_ms="0")


async def test_lookup_stream_bypass_is_marked_and_carries_the_reason(
    with_policy: InProcessSidecar,
) -> None:
    """A request the policy bypasses: marker bypass, BYPASS header with its code, no chunks."""
    marker, header, chunks = await replay(with_policy, key(tenant="billing"))
    assert marker == "bypass"
    assert header.lookup.outcome == pb.LOOKUP_OUTCOME_BYPASS
    assert header.lookup.bypass_code == pb.BYPASS_REASON_NOT_CACHEABLE
    assert not header.lookup.lease
    assert chunks == []


async def test_store_stream_bypassed_by_policy_stores_nothing(
    with_policy: InProcessSidecar,
) -> None:
    """A StoreStream the policy bypasses (decided at its opening message) answers BYPASSED."""
    k = key("not for caching", tenant="billing")
    async with with_policy.client.store_stream(k) as w:
        for part in ANSWER:
            await w.send(part)
            await asyncio.sleep(0.01)
    assert w.response is not None
    assert w.response.store.outcome == pb.STORE_OUTCOME_BYPASSED
    assert w.response.store.bypass_code == pb.BYPASS_REASON_NOT_CACHEABLE
    assert with_policy.stats.total("stores", result="stored") == 0


async def test_store_stream_over_the_policy_entry_size_is_bypassed(
    with_policy: InProcessSidecar,
) -> None:
    """The policy's size cap is applied to the assembled stream at commit: BYPASSED, no entry."""
    k = key("too long for the policy")
    miss = await with_policy.client.lookup(k)
    async with with_policy.client.store_stream(k, miss.lease) as w:
        for _ in range(10):
            await w.send("0123456789")
    assert w.response is not None
    assert w.response.store.outcome == pb.STORE_OUTCOME_BYPASSED
    assert (await with_policy.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS

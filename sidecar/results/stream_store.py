"""StoreStream: assemble a result from chunks as the model produces it; commit on finish.

The stream is a sequence of events: one Open, Chunks, one Finish. Nothing
touches a tier before Finish: the chunks sit in this task's memory, so a
cancelled, failed, idle or over-limit stream leaves nothing anyone could see.
The commit is an ordinary ResultCache.store, so every rule a Store obeys
(policy, leases, TTL caps, size limits) applies unchanged. The lease is judged
as of the Open, so a generation longer than the lease TTL still commits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import structlog

from sidecar.entries import ChunkMeta, ComputeCost
from sidecar.errors import DeadlineExceeded, InvalidArgument, ResourceExhausted
from sidecar.keys import CacheKey
from sidecar.policy.cacheability import NO_TRAITS, RequestTraits
from sidecar.results.cache import ResultCache
from sidecar.results.chunks import check_finish_reason
from sidecar.results.types import StoreResult

log = structlog.get_logger("infercache.stream_store")


@dataclass(frozen=True, slots=True)
class StreamOpen:
    """The first event: what a Store would carry, minus the payload."""

    key: CacheKey
    ttl_s: int = 0
    cost: ComputeCost | None = None
    lease_token: bytes = b""
    traits: RequestTraits = NO_TRAITS


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """A piece of the result; offset_ms 0 = use the arrival time."""

    data: bytes
    tokens: int = 0
    offset_ms: int = 0


@dataclass(frozen=True, slots=True)
class StreamFinish:
    """The last event: generation ended for `reason`; commit."""

    reason: str
    cost: ComputeCost | None = None


StreamEvent = StreamOpen | StreamChunk | StreamFinish


@dataclass(frozen=True, slots=True)
class StreamLimits:
    """Per-stream limits: bytes, chunks, and the longest silence between events (seconds)."""

    max_bytes: int
    max_chunks: int
    idle_timeout_s: float


@dataclass(frozen=True, slots=True)
class StreamStoreResult:
    """What the commit did, with what was received."""

    store: StoreResult
    chunk_count: int
    total_bytes: int


class BufferBudget:
    """Bytes buffered by all open streams together, so many slow streams cannot
    exhaust the sidecar's memory (each one alone is bounded by max_bytes)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0

    def take(self, n: int) -> None:
        """Reserve n bytes or raise ResourceExhausted (nothing reserved then)."""
        if self.used + n > self.max_bytes:
            raise ResourceExhausted(
                f"open StoreStreams buffer {self.used} bytes; the limit is {self.max_bytes} "
                "(INFERCACHE_STREAM_BUFFER_MAX_BYTES); retry later"
            )
        self.used += n

    def give_back(self, n: int) -> None:
        """Release n reserved bytes."""
        self.used -= n


async def _next(events: AsyncIterator[StreamEvent], idle_s: float) -> StreamEvent | None:
    """The next event, None at end of stream; DeadlineExceeded after idle_s of silence."""
    try:
        async with asyncio.timeout(idle_s):
            return await anext(events)
    except StopAsyncIteration:
        return None
    except TimeoutError:
        raise DeadlineExceeded(
            f"no stream message for {idle_s * 1000:.0f} ms (INFERCACHE_STREAM_IDLE_TIMEOUT_MS); "
            "nothing was stored"
        ) from None


async def _discard_rest(
    events: AsyncIterator[StreamEvent], limits: StreamLimits, bypassed: StoreResult
) -> StreamStoreResult:
    """Read a bypassed stream to its end without keeping anything, then answer BYPASSED.

    Answering before the client has finished writing would make its next write
    race the end of the RPC (gRPC reports that as INTERNAL on the client), so the
    stream runs its course; it costs no memory, and silence still ends it.
    """
    chunks = total = 0
    while (event := await _next(events, limits.idle_timeout_s)) is not None:
        if isinstance(event, StreamFinish):
            break
        if isinstance(event, StreamChunk):
            chunks += 1
            total += len(event.data)
    return StreamStoreResult(bypassed, chunks, total)


async def store_stream(
    cache: ResultCache,
    events: AsyncIterator[StreamEvent],
    limits: StreamLimits,
    budget: BufferBudget,
) -> StreamStoreResult:
    """Consume one StoreStream's events; store the assembled result on Finish.

    A request the policy bypasses is decided at the opening message: the rest of
    the stream is read and dropped, and the answer is BYPASSED. Raises
    InvalidArgument for a malformed or over-limit stream, DeadlineExceeded for an
    idle one, ResourceExhausted when the shared buffer is full, and whatever the
    Store would raise; cancellation propagates. In all those cases nothing is
    stored and the lease's single-flight hold is released.
    """
    first = await _next(events, limits.idle_timeout_s)
    if not isinstance(first, StreamOpen):
        raise InvalidArgument("open", "the first message of a StoreStream must be `open`")
    opened_ms = cache.clock_ms()
    opened = time.monotonic()
    # Decide a policy BYPASS now (the policy is asked again at commit, with the
    # real size) and refuse a bad lease now rather than after the whole answer.
    bypassed = await cache.store_bypass(first.key, first.traits, first.lease_token, 0)
    if bypassed is not None:
        return await _discard_rest(events, limits, bypassed)
    lease, _ = cache.check_lease(first.key, first.lease_token, opened_ms)
    parts: list[bytes] = []
    chunks: list[ChunkMeta] = []
    total = 0
    committed = False
    try:
        while True:
            event = await _next(events, limits.idle_timeout_s)
            if event is None:
                raise InvalidArgument(
                    "finish", "the stream ended without a finish message; nothing was stored"
                )
            if isinstance(event, StreamOpen):
                raise InvalidArgument("open", "only the first message may be `open`")
            if isinstance(event, StreamFinish):
                reason = check_finish_reason(event.reason, required=True)
                result = await cache.store(
                    first.key,
                    b"".join(parts),
                    first.ttl_s,
                    event.cost or first.cost,
                    first.lease_token,
                    first.traits,
                    chunks=chunks,
                    finish_reason=reason,
                    started_at_ms=opened_ms,
                )
                committed = True
                return StreamStoreResult(result, len(chunks), total)
            n = len(event.data)
            if total + n > limits.max_bytes:
                raise InvalidArgument(
                    "chunk.data",
                    f"the stream exceeds {limits.max_bytes} bytes "
                    "(INFERCACHE_MAX_PAYLOAD_BYTES); nothing was stored",
                )
            if len(chunks) >= limits.max_chunks:
                raise InvalidArgument(
                    "chunk",
                    f"the stream exceeds {limits.max_chunks} chunks "
                    "(INFERCACHE_MAX_CHUNKS); nothing was stored",
                )
            offset = event.offset_ms or int((time.monotonic() - opened) * 1000)
            if chunks and offset < chunks[-1].offset_ms:
                if event.offset_ms:
                    raise InvalidArgument(
                        f"chunk[{len(chunks)}].offset_ms",
                        f"{offset} is before the previous chunk's {chunks[-1].offset_ms}",
                    )
                offset = chunks[-1].offset_ms
            budget.take(n)
            total += n
            parts.append(event.data)
            chunks.append(ChunkMeta(n, event.tokens, offset))
    finally:
        budget.give_back(total)
        if not committed:
            # Waiters on this key (single-flight) take over now instead of at lease expiry.
            await asyncio.shield(cache.release(lease))

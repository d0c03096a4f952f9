"""Streaming helpers: replay a cached answer chunk by chunk, store one while it is generated.

    stream = client.lookup_stream(key)            # AsyncCacheClient
    header = await stream.header()
    if header.lookup.outcome == pb.LOOKUP_OUTCOME_HIT:
        async for chunk in stream:
            emit(chunk.data)
    else:
        async with client.store_stream(key, header.lookup.lease) as w:
            async for text in model.generate(...):
                emit(text)
                await w.send(text)

Leaving the `store_stream` block normally commits (finish reason "stop" unless
`finish()` named another); leaving it with an exception cancels the stream and
nothing is stored. The blocking CacheClient has the same helpers without await.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import grpc
from infercache.v1 import cache_pb2 as PB2

from infercache_client.builders import chunk_message, finish_message

CACHE_MARKER = "x-infercache-cache"
"""Initial-metadata key LookupStream sets to hit, miss or bypass."""


def make_pacing(
    *, tokens_per_second: float | None = None, original: bool = False, max_delay_ms: int = 0
) -> PB2.Pacing:
    """Pacing for lookup_stream: a fixed rate, the original timing, or (neither) fastest."""
    if tokens_per_second is not None and original:
        raise ValueError("give tokens_per_second or original, not both")
    if tokens_per_second is not None:
        return PB2.Pacing(
            mode=PB2.PACING_MODE_TOKENS_PER_SECOND, tokens_per_second=tokens_per_second
        )
    if original:
        return PB2.Pacing(mode=PB2.PACING_MODE_ORIGINAL, max_delay_ms=max_delay_ms)
    return PB2.Pacing(mode=PB2.PACING_MODE_FASTEST)


def join_chunks(
    parts: Sequence[str | bytes], tokens: Sequence[int] | None = None
) -> tuple[bytes, list[PB2.ChunkBoundary]]:
    """The payload and chunk boundaries for a Store of an answer that was streamed as `parts`."""
    data = [p.encode() if isinstance(p, str) else p for p in parts]
    counts = list(tokens) if tokens is not None else [0] * len(data)
    if len(counts) != len(data):
        raise ValueError("tokens must have one count per part")
    bounds = [
        PB2.ChunkBoundary(size_bytes=len(d), tokens=t) for d, t in zip(data, counts, strict=True)
    ]
    return b"".join(data), bounds


def _marker(metadata: Any) -> str:
    for k, v in metadata or ():
        if k == CACHE_MARKER:
            return str(v)
    return ""


# How long a writer whose block raised waits for the sidecar to acknowledge the abandon.
_ABANDON_WAIT_S = 5.0


class AsyncLookupStream:
    """A LookupStream call: `await header()`, then `async for chunk in stream`."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._header: PB2.LookupStreamHeader | None = None

    async def header(self) -> PB2.LookupStreamHeader:
        """The first message: outcome, tier, age, digest, model version, lease on MISS."""
        if self._header is None:
            first: PB2.LookupStreamResponse = await self._call.read()
            if first is grpc.aio.EOF or not first.HasField("header"):
                raise RuntimeError("LookupStream did not start with a header")
            self._header = first.header
        return self._header

    async def cache_marker(self) -> str:
        """The `x-infercache-cache` initial metadata: hit, miss or bypass."""
        return _marker(await self._call.initial_metadata())

    async def __aiter__(self) -> AsyncIterator[PB2.Chunk]:
        await self.header()
        while True:
            msg = await self._call.read()
            if msg is grpc.aio.EOF:
                return
            yield msg.chunk

    def cancel(self) -> None:
        """Stop the replay; the sidecar does no further work for it."""
        self._call.cancel()


class AsyncStoreStream:
    """Writer of a StoreStream; use through `async with client.store_stream(...) as w`."""

    def __init__(self, start: Callable[[], Any], open_request: PB2.StoreRequest) -> None:
        self._start = start
        self._call: Any = None
        self._open = open_request
        self._finish: PB2.StoreStreamRequest | None = None
        self.response: PB2.StoreStreamResponse | None = None
        """Set when the block was left normally and the sidecar answered."""

    async def __aenter__(self) -> AsyncStoreStream:
        # The RPC starts here, not when the writer is made, so an unused writer holds nothing.
        self._call = self._start()
        await self._write(PB2.StoreStreamRequest(open=self._open))
        return self

    async def _write(self, msg: PB2.StoreStreamRequest) -> None:
        if self.response is not None:
            return  # the sidecar answered early (a policy BYPASS): nothing more to send
        try:
            await self._call.write(msg)
        except asyncio.InvalidStateError:
            # The sidecar already ended the stream: raises its status if it failed
            # (a limit, a bad lease); keeps its answer if it did not (BYPASSED).
            self.response = await self._call

    async def send(self, data: str | bytes, *, tokens: int = 0, offset_ms: int = 0) -> None:
        """Send the next chunk (offset_ms 0: the sidecar notes when it arrived)."""
        if self._finish is not None:
            raise RuntimeError("send() after finish()")
        await self._write(chunk_message(data, tokens, offset_ms))

    def finish(self, reason: str = "stop", *, cost: PB2.ComputeCost | None = None) -> None:
        """Name the finish reason (and cost) to commit with when the block ends."""
        self._finish = finish_message(reason, cost)

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if isinstance(exc, Exception):
            await self._abandon()
            return
        if exc_type is not None:
            self._call.cancel()  # cancelled or interrupted: nothing is stored
            return
        await self._write(self._finish or finish_message("stop", None))
        if self.response is None:
            await self._call.done_writing()
            self.response = await self._call

    async def _abandon(self) -> None:
        # The generation failed. Closing the stream without a finish message, rather
        # than cancelling it, guarantees the sidecar has read the opening message, so
        # it stores nothing *and* gives up the key's single-flight hold at once; a
        # cancel can overtake the opening message and leave the hold to lease expiry.
        try:
            if self.response is None:
                await self._call.done_writing()
                await asyncio.wait_for(self._call, _ABANDON_WAIT_S)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, TimeoutError):
            pass  # the expected "ended without a finish message"; or the sidecar is gone
        finally:
            self._call.cancel()


class LookupStream:
    """A blocking LookupStream call: `header()`, then `for chunk in stream`."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._header: PB2.LookupStreamHeader | None = None

    def header(self) -> PB2.LookupStreamHeader:
        """The first message: outcome, tier, age, digest, model version, lease on MISS."""
        if self._header is None:
            first: PB2.LookupStreamResponse | None = next(self._call, None)
            if first is None or not first.HasField("header"):
                raise RuntimeError("LookupStream did not start with a header")
            self._header = first.header
        return self._header

    def cache_marker(self) -> str:
        """The `x-infercache-cache` initial metadata: hit, miss or bypass."""
        return _marker(self._call.initial_metadata())

    def __iter__(self) -> Iterator[PB2.Chunk]:
        self.header()
        for msg in self._call:
            yield msg.chunk

    def cancel(self) -> None:
        """Stop the replay; the sidecar does no further work for it."""
        self._call.cancel()


_END = object()


class StoreStream:
    """Blocking writer of a StoreStream (`with client.store_stream(...) as w`).

    Messages go through a queue that gRPC drains on its own thread.
    """

    def __init__(
        self,
        start: Callable[[Iterator[PB2.StoreStreamRequest]], Any],
        open_request: PB2.StoreRequest,
    ) -> None:
        self._start = start
        self._open = open_request
        self._queue: queue.Queue[object] = queue.Queue()
        self._finish: PB2.StoreStreamRequest | None = None
        self._future: Any = None
        self.response: PB2.StoreStreamResponse | None = None
        """Set when the block was left normally and the sidecar answered."""

    def _requests(self) -> Iterator[PB2.StoreStreamRequest]:
        while (msg := self._queue.get()) is not _END:
            assert isinstance(msg, PB2.StoreStreamRequest)
            yield msg

    def __enter__(self) -> StoreStream:
        self._queue.put(PB2.StoreStreamRequest(open=self._open))
        self._future = self._start(self._requests())
        return self

    def send(self, data: str | bytes, *, tokens: int = 0, offset_ms: int = 0) -> None:
        """Queue the next chunk (offset_ms 0: the sidecar notes when it arrived)."""
        if self._finish is not None:
            raise RuntimeError("send() after finish()")
        self._queue.put(chunk_message(data, tokens, offset_ms))

    def finish(self, reason: str = "stop", *, cost: PB2.ComputeCost | None = None) -> None:
        """Name the finish reason (and cost) to commit with when the block ends."""
        self._finish = finish_message(reason, cost)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if isinstance(exc, Exception):
            # Half-close without a finish message (see AsyncStoreStream._abandon).
            self._queue.put(_END)
            try:
                self._future.result(timeout=_ABANDON_WAIT_S)
            except (grpc.RpcError, grpc.FutureTimeoutError):
                pass
            finally:
                self._future.cancel()
            return
        if exc_type is not None:
            self._future.cancel()  # interrupted: nothing is stored
            self._queue.put(_END)
            return
        self._queue.put(self._finish or finish_message("stop", None))
        self._queue.put(_END)
        self.response = self._future.result()

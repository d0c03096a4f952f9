"""The streaming data-plane RPCs (LookupStream, StoreStream) of CacheService.

Kept apart from cache_servicer.py for size: the servicer's methods delegate here.
Like the servicer it only translates: lookups go through ResultCache.lookup,
streamed stores through stream_store (which commits with ResultCache.store). Keys
come from the pod's KeyResolver; domain errors become statuses in RpcObserver.run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from infercache.v1 import cache_pb2 as PB2

from sidecar.api.cache_codec import (
    cost_from_pb,
    hit_record_from_pb,
    key_from_pb,
    query_from_pb,
    replay_from_pb,
    traits_from_pb,
)
from sidecar.api.decode import Undecodable
from sidecar.api.observe import Attributes, CacheDescriber, RpcObserver
from sidecar.api.rpc import rpc
from sidecar.api.status import abort_for
from sidecar.api.stream_codec import (
    chunk_to_pb,
    header_to_pb,
    pacing_from_pb,
    stream_chunk_from_pb,
    stream_finish_from_pb,
    stream_result_to_pb,
)
from sidecar.api.unknown_fields import refuse_unknown_fields
from sidecar.config import DEFAULTS, Config
from sidecar.entries import Entry
from sidecar.errors import DeadlineExceeded, InfercacheError, InvalidArgument
from sidecar.identity.resolver import KeyResolver
from sidecar.observability.logs import REQUEST_KEY
from sidecar.prewarm.hits import HitRecorder
from sidecar.prewarm.records import HitRecord
from sidecar.results.cache import ResultCache
from sidecar.results.pacing import replay
from sidecar.results.stream_store import (
    BufferBudget,
    StreamEvent,
    StreamLimits,
    StreamOpen,
    store_stream,
)
from sidecar.results.types import StoreStatus
from sidecar.shadow.data_plane import DataPlaneVerifier

log = structlog.get_logger("infercache.api")

CACHE_MARKER = "x-infercache-cache"
"""Initial-metadata key of LookupStream: hit, miss or bypass."""


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """Limits of the streaming RPCs (see the INFERCACHE_* settings of the same names)."""

    limits: StreamLimits
    buffer_max_bytes: int
    replay_max_gap_ms: int
    evict_rejected: bool
    outcome_reasons: tuple[str, ...] = DEFAULTS.stream.outcome_reasons
    replay_max_duration_ms: int = DEFAULTS.stream.replay_max_duration_ms

    @classmethod
    def from_config(cls, config: Config) -> StreamSettings:
        """Payload and chunk limits, the INFERCACHE_STREAM_* and replay/evict settings."""
        limits, stream = config.limits, config.stream
        return cls(
            StreamLimits(
                limits.max_payload_bytes, limits.max_chunks, stream.idle_timeout_ms / 1000
            ),
            buffer_max_bytes=stream.buffer_max_bytes,
            replay_max_gap_ms=stream.replay_max_gap_ms,
            evict_rejected=stream.evict_rejected,
            outcome_reasons=stream.outcome_reasons,
            replay_max_duration_ms=stream.replay_max_duration_ms,
        )


@dataclass(frozen=True, slots=True)
class _Head:
    """What the measured part of a LookupStream produced: the header and the entry to replay."""

    header: PB2.LookupStreamResponse
    entry: Entry | None
    model_version: str


class StreamRpcs:
    """Handlers of LookupStream and StoreStream for one CacheServicer."""

    def __init__(
        self,
        cache: ResultCache,
        keys: KeyResolver,
        observer: RpcObserver,
        describer: CacheDescriber,
        settings: StreamSettings,
        recorder: HitRecorder | None = None,
        verifier: DataPlaneVerifier | None = None,
    ) -> None:
        self._cache = cache
        self._recorder = recorder
        self._verifier = verifier
        self._keys = keys
        self.observer = observer
        self._describer = describer
        self._settings = settings
        self._budget = BufferBudget(settings.buffer_max_bytes)

    # ---------------------------------------------------------------- LookupStream

    async def lookup_stream(
        self, request: PB2.LookupStreamRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[PB2.LookupStreamResponse]:
        """Header (after the x-infercache-cache metadata), then a hit's chunks as paced.

        The RPC's duration and span cover the lookup; the replay's length is the
        caller's pacing choice, so it is counted (streams family), not timed.
        """
        head = await self.observer.run(
            "LookupStream", request, context, self._lookup_head, self._describe_head
        )
        yield head.header
        entry = head.entry
        if entry is None:
            return
        pacing = pacing_from_pb(request.pacing)  # validated already by _lookup_head
        settings = self._settings
        sent = 0
        truncated: DeadlineExceeded | None = None
        try:
            chunks = replay(
                entry, pacing, settings.replay_max_gap_ms, settings.replay_max_duration_ms
            )
            try:
                async for chunk in chunks:
                    yield chunk_to_pb(chunk)
                    sent += 1
            except DeadlineExceeded as exc:
                truncated = exc
        finally:
            # A caller that goes away cancels this generator at its next await:
            # nothing further is read, paced or sent.
            stats = self._cache.stats
            stats.count_stream(head.model_version, "replay.chunks", sent)
            if truncated is not None:
                done = "replay.truncated"
            elif sent == entry.chunk_count:
                done = "replay.completed"
            else:
                done = "replay.cancelled"
            stats.count_stream(head.model_version, done)
        if truncated is not None:
            # After the chunks sent: the caller sees every one of them, then the status.
            await abort_for(context, "LookupStream", truncated)

    async def _lookup_head(
        self, request: PB2.LookupStreamRequest, context: grpc.aio.ServicerContext
    ) -> _Head:
        refuse_unknown_fields(request, "", skip=("lookup",))
        pacing_from_pb(request.pacing)
        if not request.HasField("lookup"):
            raise InvalidArgument("lookup", "is required")
        try:
            query = query_from_pb(request.lookup, self._keys)
        except InvalidArgument as exc:
            raise InvalidArgument(f"lookup.{exc.field}", exc.problem) from exc
        key = query.key
        REQUEST_KEY.set(key)
        result = await self._cache.lookup(query)
        await context.send_initial_metadata(((CACHE_MARKER, result.outcome.value),))
        if self._verifier is not None:
            self._verifier.after_lookup((query,), (result,))  # a task of its own
        entry = result.entry if result.tier is not None else None
        return _Head(header_to_pb(result, key.model_version), entry, key.model_version)

    def _describe_head(self, request: PB2.LookupStreamRequest, head: _Head | None) -> Attributes:
        return self._describer.lookup(request.lookup, head.header.header.lookup if head else None)

    # ---------------------------------------------------------------- StoreStream

    @rpc()
    async def StoreStream(
        self,
        requests: AsyncIterator[PB2.StoreStreamRequest],
        context: grpc.aio.ServicerContext,
    ) -> PB2.StoreStreamResponse:
        """Buffer the stream; commit through ResultCache.store when it finishes."""
        stats = self._cache.stats
        opened: list[_Opened] = []  # the opening message, once accepted
        events = self._events(requests, opened)
        try:
            result = await store_stream(self._cache, events, self._settings.limits, self._budget)
        except InfercacheError as exc:
            stats.count_stream(_version(opened), "store.failed")
            log.info("store_stream_not_committed", error=str(exc))
            if not isinstance(exc, DeadlineExceeded):  # a silent client is not writing
                await _drain(requests)
            raise
        except asyncio.CancelledError:
            # The client cancelled, went away, or the server is stopping.
            stats.count_stream(_version(opened), "store.cancelled")
            raise
        finally:
            await events.aclose()
        stats.count_stream(_version(opened), "store.committed")
        first = opened[0]
        if (
            first.record is not None
            and self._recorder is not None
            and result.store.status is StoreStatus.STORED
        ):
            k = first.event.key
            self._recorder.attach(
                k.tenant,
                k.model_version,
                k.digest,
                first.record,
                ttl_s=result.store.ttl_s,
                private=first.event.traits.private_data,
            )
        return stream_result_to_pb(result)

    async def _events(
        self, requests: AsyncIterator[PB2.StoreStreamRequest], opened: list[_Opened]
    ) -> AsyncGenerator[StreamEvent, None]:
        """Protobuf messages as domain events; the opening one checked like a Store."""
        async for msg in requests:
            if isinstance(msg, Undecodable):  # a message whose bytes did not decode
                raise msg.error()
            refuse_unknown_fields(msg, "", skip=("open",))
            which = msg.WhichOneof("message")
            if which == "chunk":
                yield stream_chunk_from_pb(msg.chunk)
            elif which == "finish":
                yield stream_finish_from_pb(msg.finish)
            elif which == "open":
                event = self._open(msg.open)
                replay = replay_from_pb(msg.open, "open.replay")
                record = None if replay is None else hit_record_from_pb(msg.open.key, replay)
                opened.append(_Opened(event, record))
                yield event
            else:
                raise InvalidArgument("message", "is empty: set open, chunk or finish")

    def _open(self, req: PB2.StoreRequest) -> StreamOpen:
        refuse_unknown_fields(req, "open", skip=("key", "traits"))
        if req.payload or req.chunks:
            raise InvalidArgument(
                "open.payload", "must be empty: a StoreStream's result comes as chunks"
            )
        try:
            key, _ = key_from_pb(req.key, self._keys)
        except InvalidArgument as exc:
            raise InvalidArgument(f"open.{exc.field}", exc.problem) from exc
        REQUEST_KEY.set(key)
        # Checked at the opening message (ResultCache.store checks again at commit),
        # so a foreign result is refused before any of it is buffered.
        self._keys.check_store(key)
        return StreamOpen(
            key, req.ttl_seconds, cost_from_pb(req.cost), req.lease, traits_from_pb(req)
        )


DRAIN_S = 1.0


async def _drain(requests: AsyncIterator[Any]) -> None:
    """Read and drop what the client still sends until it half-closes (for at most
    DRAIN_S), before the refusal's status goes out.

    A status sent while the client is still writing closes the stream under its pending
    write; grpc.aio's client then records "Internal error from Core" (INTERNAL) for the
    failed write, and the refusal's own status, arriving just after, is lost. A client
    writing slower than this lets through sees the call done before its next write.
    """

    async def read_to_end() -> None:
        async for _ in requests:
            pass

    with contextlib.suppress(Exception):
        await asyncio.wait_for(read_to_end(), DRAIN_S)


@dataclass(frozen=True, slots=True)
class _Opened:
    """A StoreStream's accepted opening: the event and the hit record of its replay."""

    event: StreamOpen
    record: HitRecord | None


def _version(opened: list[_Opened]) -> str:
    return opened[0].event.key.model_version if opened else ""

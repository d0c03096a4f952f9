"""CacheService: translates protobuf to domain calls and domain errors to statuses."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import grpc
from infercache.v1 import cache_pb2 as PB2
from infercache.v1 import cache_pb2_grpc

from sidecar import __version__
from sidecar.api.cache_codec import (
    cost_from_pb,
    key_request_from_pb,
    lookup_batch_to_pb,
    lookup_result_to_pb,
    store_result_to_pb,
    traits_from_pb,
)
from sidecar.api.observe import CacheDescriber, RpcObserver
from sidecar.api.status import abort_for
from sidecar.api.stream_codec import chunks_from_pb
from sidecar.api.streams import CACHE_MARKER, StreamRpcs, StreamSettings
from sidecar.errors import InfercacheError, InvalidArgument
from sidecar.identity import PodIdentity
from sidecar.keys import KEY_SCHEMA_VERSION, CacheKey, KeyLimits, KeyRequest, build_key
from sidecar.observability.logs import REQUEST_KEY
from sidecar.observability.stats import RpcStats
from sidecar.observability.telemetry import Telemetry
from sidecar.results.cache import LookupQuery, ResultCache

__all__ = ["CACHE_MARKER", "CacheServicer"]

SERVICE = PB2.DESCRIPTOR.services_by_name["CacheService"].full_name

# A hot hit spends most of its Python time canonicalising the key; repeated
# requests skip that. 8192 x 4 KiB bounds the memo at ~32 MiB of key bytes.
_MEMO_MAX_KEYS = 8192
_MEMO_MAX_KEY_BYTES = 4096


class CacheServicer(cache_pb2_grpc.CacheServiceServicer):  # type: ignore[misc]
    """The data-plane service; all logic lives in ResultCache and keys."""

    def __init__(
        self,
        cache: ResultCache,
        *,
        limits: KeyLimits,
        max_batch: int,
        streams: StreamSettings,
        pod: PodIdentity | None = None,
        observer: RpcObserver | None = None,
    ) -> None:
        self._cache = cache
        self._limits = limits
        self._max_batch = max_batch
        self._pod = pod or PodIdentity()
        self._built: dict[bytes, tuple[CacheKey, KeyRequest]] = {}
        self._observe = observer or RpcObserver(SERVICE, Telemetry(), RpcStats())
        self._describe = CacheDescriber(self._key, self._observe.tenant)
        self._streams = StreamRpcs(
            cache,
            self._key_and_source,
            self.query,
            self._pod,
            self._observe,
            self._describe,
            streams,
        )

    def _key(self, key: PB2.CacheKey) -> CacheKey:
        return self._key_and_source(key)[0]

    def _key_and_source(self, key: PB2.CacheKey) -> tuple[CacheKey, KeyRequest]:
        """The validated key and the request it was built from (as sent: prewarm replays it)."""
        # build_key is a pure function of the message (limits and pod are fixed per
        # servicer), and a byte string parses to exactly one message, so equal
        # serialisations give equal keys. The plain serialisation is about half the
        # cost of the deterministic one; it can only order map entries differently
        # for equal messages, which costs a memo miss, never a wrong key.
        raw = key.SerializeToString()
        built = self._built.get(raw)
        if built is not None:
            return built
        source = req = key_request_from_pb(key)
        if self._pod.adapter_versions and req.adapter_version:
            req = dataclasses.replace(
                req, adapter_version=self._pod.resolve_adapter(req.adapter_version)
            )
        built = (build_key(req, self._limits, self._pod.model_version), source)
        # Only keys that passed validation are kept; small ones, a bounded number.
        if len(raw) <= _MEMO_MAX_KEY_BYTES:
            if len(self._built) >= _MEMO_MAX_KEYS:
                self._built.pop(next(iter(self._built)))
            self._built[raw] = built
        return built

    def query(self, request: PB2.LookupRequest) -> LookupQuery:
        """The domain query of a LookupRequest (LookupStream's embedded one too): key,
        freshness bound, wait, the request the key came from and the declared traits."""
        key, source = self._key_and_source(request.key)
        return LookupQuery(
            key, request.max_age_seconds, request.wait_ms, source, traits_from_pb(request)
        )

    async def Lookup(
        self, request: PB2.LookupRequest, context: grpc.aio.ServicerContext
    ) -> PB2.LookupResponse:
        return await self._observe.run(
            "Lookup", request, context, self._lookup, self._describe.lookup
        )

    async def _lookup(
        self, request: PB2.LookupRequest, context: grpc.aio.ServicerContext
    ) -> PB2.LookupResponse:
        try:
            query = self.query(request)
            REQUEST_KEY.set(query.key)
            result = await self._cache.lookup(query)
        except InfercacheError as exc:
            await abort_for(context, "Lookup", exc)
        return lookup_result_to_pb(result)

    async def LookupBatch(
        self, request: PB2.LookupBatchRequest, context: grpc.aio.ServicerContext
    ) -> PB2.LookupBatchResponse:
        return await self._observe.run(
            "LookupBatch", request, context, self._lookup_batch, self._describe.lookup_batch
        )

    async def _lookup_batch(
        self, request: PB2.LookupBatchRequest, context: grpc.aio.ServicerContext
    ) -> PB2.LookupBatchResponse:
        try:
            n = len(request.requests)
            if n > self._max_batch:
                raise InvalidArgument(
                    "requests", f"has {n} lookups; the limit is {self._max_batch}"
                )
            queries: list[LookupQuery] = []
            append = queries.append
            query = self.query
            for i, r in enumerate(request.requests):
                try:
                    append(query(r))
                except InvalidArgument as exc:
                    raise InvalidArgument(f"requests[{i}].{exc.field}", exc.problem) from exc
            if queries:
                REQUEST_KEY.set(queries[0].key)
            results = await self._cache.lookup_many(queries)
        except InfercacheError as exc:
            await abort_for(context, "LookupBatch", exc)
        return lookup_batch_to_pb(results)

    async def Store(
        self, request: PB2.StoreRequest, context: grpc.aio.ServicerContext
    ) -> PB2.StoreResponse:
        return await self._observe.run("Store", request, context, self._store, self._describe.store)

    async def _store(
        self, request: PB2.StoreRequest, context: grpc.aio.ServicerContext
    ) -> PB2.StoreResponse:
        try:
            key = self._key(request.key)
            REQUEST_KEY.set(key)
            self._pod.check_store(key.model_version)
            result = await self._cache.store(
                key,
                request.payload,
                request.ttl_seconds,
                cost_from_pb(request.cost),
                lease_token=request.lease,
                traits=traits_from_pb(request),
                chunks=chunks_from_pb(request.chunks),
            )
        except InfercacheError as exc:
            await abort_for(context, "Store", exc)
        return store_result_to_pb(result)

    async def LookupStream(
        self, request: PB2.LookupStreamRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[PB2.LookupStreamResponse]:
        async for message in self._streams.lookup_stream(request, context):
            yield message

    async def StoreStream(
        self,
        request_iterator: AsyncIterator[PB2.StoreStreamRequest],
        context: grpc.aio.ServicerContext,
    ) -> PB2.StoreStreamResponse:
        return await self._streams.store_stream(request_iterator, context)

    async def ReportOutcome(
        self, request: PB2.ReportOutcomeRequest, context: grpc.aio.ServicerContext
    ) -> PB2.ReportOutcomeResponse:
        return await self._streams.report_outcome(request, context)

    async def GetServerInfo(
        self, request: PB2.GetServerInfoRequest, context: grpc.aio.ServicerContext
    ) -> PB2.GetServerInfoResponse:
        return await self._observe.run("GetServerInfo", request, context, self._server_info)

    async def _server_info(
        self, request: PB2.GetServerInfoRequest, context: grpc.aio.ServicerContext
    ) -> PB2.GetServerInfoResponse:
        return PB2.GetServerInfoResponse(
            server_version=__version__,
            key_schema_version=KEY_SCHEMA_VERSION,
            model_version=self._pod.model_version,
            adapter_versions=dict(self._pod.adapter_versions),
            warm_tier=self._cache.warm.name,
        )

"""CacheService: translates protobuf to domain calls; domain errors become statuses in
RpcObserver.run (api/rpc.py), so the handlers only raise."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from infercache.v1 import cache_pb2 as PB2
from infercache.v1 import cache_pb2_grpc

from sidecar import __version__
from sidecar.api.cache_codec import (
    cost_from_pb,
    hit_record_from_pb,
    key_from_pb,
    lookup_batch_to_pb,
    lookup_result_to_pb,
    replay_from_pb,
    store_result_to_pb,
    traits_from_pb,
)
from sidecar.api.observe import Attributes, CacheDescriber, RpcObserver
from sidecar.api.query_memo import QueryMemo
from sidecar.api.rpc import rpc
from sidecar.api.stream_codec import chunks_from_pb, verdict_from_pb
from sidecar.api.streams import CACHE_MARKER, StreamRpcs, StreamSettings
from sidecar.api.unknown_fields import refuse_unknown_fields
from sidecar.errors import InvalidArgument
from sidecar.identity.pod import PodIdentity
from sidecar.identity.resolver import KeyResolver
from sidecar.keys import KEY_SCHEMA_VERSION, CacheKey, KeyLimits
from sidecar.observability.logs import REQUEST_KEY
from sidecar.observability.stats import RpcStats
from sidecar.observability.telemetry import Telemetry
from sidecar.prewarm.hits import HitRecorder
from sidecar.results.cache import ResultCache
from sidecar.results.feedback import DownstreamFeedback
from sidecar.results.types import LookupQuery, StoreStatus
from sidecar.shadow.data_plane import DataPlaneVerifier

__all__ = ["CACHE_MARKER", "CacheServicer"]

SERVICE = PB2.DESCRIPTOR.services_by_name["CacheService"].full_name


def server_info_pb(pod: PodIdentity, warm_tier: str) -> PB2.GetServerInfoResponse:
    """GetServerInfo's answer (also carried by the admin plane's GetStats)."""
    return PB2.GetServerInfoResponse(
        server_version=__version__,
        key_schema_version=KEY_SCHEMA_VERSION,
        model_version=pod.model_version,
        adapter_versions=dict(pod.adapter_versions),
        warm_tier=warm_tier,
    )


class CacheServicer(cache_pb2_grpc.CacheServiceServicer):  # type: ignore[misc]
    """The data-plane service; all logic lives in ResultCache and keys."""

    def __init__(
        self,
        cache: ResultCache,
        *,
        max_batch: int,
        streams: StreamSettings,
        keys: KeyResolver | None = None,
        observer: RpcObserver | None = None,
        recorder: HitRecorder | None = None,
        verifier: DataPlaneVerifier | None = None,
    ) -> None:
        """`recorder` keeps the model-server requests Stores attach (None: not kept);
        `verifier` samples hits into shadow checks (None: INFERCACHE_VERIFY_DATA_PLANE off)."""
        self._cache = cache
        self._verifier = verifier
        self._keys = keys or KeyResolver(PodIdentity(), KeyLimits())
        self._queries = QueryMemo(self._keys)
        self._max_batch = max_batch
        self._recorder = recorder
        self.observer = observer or RpcObserver(SERVICE, Telemetry(), RpcStats())
        self._describer = CacheDescriber(self._key, self.observer.tenant)
        self._feedback = DownstreamFeedback(
            cache, evict_rejected=streams.evict_rejected, reasons=streams.outcome_reasons
        )
        self._streams = StreamRpcs(
            cache,
            self._keys,
            self.observer,
            self._describer,
            streams,
            recorder,
            verifier,
        )

    def _key(self, key: PB2.CacheKey) -> CacheKey:
        return key_from_pb(key, self._keys)[0]

    def _describe_lookup(
        self, request: PB2.LookupRequest, response: PB2.LookupResponse | None
    ) -> Attributes:
        return self._describer.lookup(request, response)

    def _describe_batch(
        self, request: PB2.LookupBatchRequest, response: PB2.LookupBatchResponse | None
    ) -> Attributes:
        return self._describer.lookup_batch(request, response)

    def _describe_store(
        self, request: PB2.StoreRequest, response: PB2.StoreResponse | None
    ) -> Attributes:
        return self._describer.store(request, response)

    def _describe_report(self, request: PB2.ReportOutcomeRequest, response: Any) -> Attributes:
        attrs: Attributes = {
            "infercache.key_digest": request.key_digest[:8].hex(),
            "infercache.verdict": PB2.ReportOutcomeVerdict.Name(request.verdict).lower()
            if request.verdict in PB2.ReportOutcomeVerdict.values()
            else "unknown",
        }
        if isinstance(response, PB2.ReportOutcomeResponse):
            attrs["infercache.model_version"] = response.model_version
            attrs["infercache.evicted"] = response.evicted
        return attrs

    @rpc(describe=_describe_lookup)
    async def Lookup(
        self, request: PB2.LookupRequest, context: grpc.aio.ServicerContext
    ) -> PB2.LookupResponse:
        """One key: HIT, MISS (with a lease) or BYPASS."""
        query = self._queries.query(request)
        REQUEST_KEY.set(query.key)
        result = await self._cache.lookup(query)
        if self._verifier is not None:
            self._verifier.after_lookup((query,), (result,))  # checks run after the answer
        return lookup_result_to_pb(result)

    @rpc(describe=_describe_batch)
    async def LookupBatch(
        self, request: PB2.LookupBatchRequest, context: grpc.aio.ServicerContext
    ) -> PB2.LookupBatchResponse:
        """Many keys with one warm-tier round trip; answers in the request's order."""
        refuse_unknown_fields(request, "", skip=("requests",))
        n = len(request.requests)
        if n > self._max_batch:
            raise InvalidArgument("requests", f"has {n} lookups; the limit is {self._max_batch}")
        queries: list[LookupQuery] = []
        append = queries.append
        query = self._queries.query
        for i, r in enumerate(request.requests):
            try:
                append(query(r))
            except InvalidArgument as exc:
                raise InvalidArgument(f"requests[{i}].{exc.field}", exc.problem) from exc
        if queries:
            REQUEST_KEY.set(queries[0].key)
        results = await self._cache.lookup_many(queries)
        if self._verifier is not None:
            self._verifier.after_lookup(queries, results)
        return lookup_batch_to_pb(results)

    @rpc(describe=_describe_store)
    async def Store(
        self, request: PB2.StoreRequest, context: grpc.aio.ServicerContext
    ) -> PB2.StoreResponse:
        """Store a result under the MISS's lease (ResultCache.store checks the pod's model)."""
        refuse_unknown_fields(request, "", skip=("key", "traits"))
        key = self._key(request.key)
        REQUEST_KEY.set(key)
        replay = replay_from_pb(request)  # refused before anything is stored
        traits = traits_from_pb(request)
        result = await self._cache.store(
            key,
            request.payload,
            request.ttl_seconds,
            cost_from_pb(request.cost),
            lease_token=request.lease,
            traits=traits,
            chunks=chunks_from_pb(request.chunks),
        )
        if (
            replay is not None
            and self._recorder is not None
            and (result.status is StoreStatus.STORED)
        ):
            self._recorder.attach(
                key.tenant,
                key.model_version,
                key.digest,
                hit_record_from_pb(request.key, replay),
                ttl_s=result.ttl_s,
                private=traits.private_data,
            )
        if (
            replay is not None
            and self._verifier is not None
            and result.status is StoreStatus.STORED
        ):
            self._verifier.after_store(key, traits, replay, request.payload)
        return store_result_to_pb(result)

    async def LookupStream(
        self, request: PB2.LookupStreamRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[PB2.LookupStreamResponse]:
        """Header, then a hit's chunks as paced (streams.py)."""
        async for message in self._streams.lookup_stream(request, context):
            yield message

    async def StoreStream(
        self,
        request_iterator: AsyncIterator[PB2.StoreStreamRequest],
        context: grpc.aio.ServicerContext,
    ) -> PB2.StoreStreamResponse:
        """A result streamed in, committed when it finishes (streams.py)."""
        return await self._streams.StoreStream(request_iterator, context)

    @rpc(describe=_describe_report)
    async def ReportOutcome(
        self, request: PB2.ReportOutcomeRequest, context: grpc.aio.ServicerContext
    ) -> PB2.ReportOutcomeResponse:
        """Count a downstream verdict on the entry named by its key digest."""
        result = await self._feedback.report(
            request.key_digest, verdict_from_pb(request.verdict), request.reason
        )
        return PB2.ReportOutcomeResponse(evicted=result.evicted, model_version=result.model_version)

    @rpc()
    async def GetServerInfo(
        self, request: PB2.GetServerInfoRequest, context: grpc.aio.ServicerContext
    ) -> PB2.GetServerInfoResponse:
        """The sidecar's version, key schema, pod fingerprints and warm tier."""
        return server_info_pb(self._keys.pod, self._cache.warm.name)

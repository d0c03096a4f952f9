"""KvCacheService: translates protobuf to KvHotTier calls and domain errors to statuses."""

from __future__ import annotations

import grpc
from infercache.v1 import kv_pb2 as PB2
from infercache.v1 import kv_pb2_grpc

from sidecar.api.kv_codec import attach_to_pb, layout_from_pb, lease_to_pb, prefix_to_pb
from sidecar.api.observe import Attributes, RpcObserver
from sidecar.api.status import abort_for
from sidecar.errors import InfercacheError
from sidecar.kv.hot_tier import KvHotTier
from sidecar.observability.stats import RpcStats
from sidecar.observability.telemetry import Telemetry

SERVICE = PB2.DESCRIPTOR.services_by_name["KvCacheService"].full_name


class KvServicer(kv_pb2_grpc.KvCacheServiceServicer):  # type: ignore[misc]
    """The KV hot tier's RPCs; KV bytes never pass through here, only slot ids."""

    def __init__(self, tier: KvHotTier, observer: RpcObserver | None = None) -> None:
        self._tier = tier
        self._observe = observer or RpcObserver(SERVICE, Telemetry(), RpcStats())

    def _lookup_attributes(
        self, request: PB2.LookupPrefixRequest, response: PB2.LookupPrefixResponse | None
    ) -> Attributes:
        attrs: Attributes = {
            "infercache.tenant": self._observe.tenant(request.tenant),
            "infercache.kv.chain_blocks": len(request.block_hashes),
        }
        if response is not None:
            attrs["infercache.kv.matched_blocks"] = response.matched_blocks
            attrs["infercache.kv.promoted_blocks"] = response.promoted_blocks
            attrs["infercache.kv.retry_later"] = response.retry_later
        return attrs

    async def _attach(
        self, request: PB2.AttachHotTierRequest, context: grpc.aio.ServicerContext
    ) -> PB2.AttachHotTierResponse:
        try:
            attachment, pool = await self._tier.attach(
                request.model_fingerprint,
                request.adapter_fingerprint,
                layout_from_pb(request.layout),
                gpu_uuid=request.gpu_uuid,
                process_name=request.process_name,
            )
        except InfercacheError as exc:
            await abort_for(context, "AttachHotTier", exc)
        s = self._tier.settings
        return attach_to_pb(
            attachment,
            pool,
            max_chain_blocks=s.max_chain_blocks,
            default_lease_ms=s.default_lease_ms,
            max_lease_ms=s.max_lease_ms,
        )

    async def _detach(
        self, request: PB2.DetachHotTierRequest, context: grpc.aio.ServicerContext
    ) -> PB2.DetachHotTierResponse:
        try:
            released = await self._tier.detach(request.attachment_id)
        except InfercacheError as exc:
            await abort_for(context, "DetachHotTier", exc)
        return PB2.DetachHotTierResponse(released_slots=released)

    async def _lookup_prefix(
        self, request: PB2.LookupPrefixRequest, context: grpc.aio.ServicerContext
    ) -> PB2.LookupPrefixResponse:
        try:
            result = await self._tier.lookup_prefix(
                request.attachment_id,
                request.tenant,
                request.cache_salt,
                request.block_hashes,
                lease_ttl_ms=request.lease_ttl_ms,
                hot_only=request.hot_only,
            )
        except InfercacheError as exc:
            await abort_for(context, "LookupPrefix", exc)
        return prefix_to_pb(result)

    async def _allocate(
        self, request: PB2.AllocateBlocksRequest, context: grpc.aio.ServicerContext
    ) -> PB2.AllocateBlocksResponse:
        try:
            slots, lease = await self._tier.allocate(
                request.attachment_id,
                request.count,
                lease_id=request.lease_id,
                lease_ttl_ms=request.lease_ttl_ms,
            )
        except InfercacheError as exc:
            await abort_for(context, "AllocateBlocks", exc)
        return PB2.AllocateBlocksResponse(slot_ids=slots, lease=lease_to_pb(lease))

    async def _commit(
        self, request: PB2.CommitBlocksRequest, context: grpc.aio.ServicerContext
    ) -> PB2.CommitBlocksResponse:
        try:
            already = await self._tier.commit(
                request.attachment_id,
                request.lease_id,
                request.tenant,
                request.cache_salt,
                [(b.slot_id, b.block_hash) for b in request.blocks],
            )
        except InfercacheError as exc:
            await abort_for(context, "CommitBlocks", exc)
        return PB2.CommitBlocksResponse(
            committed_blocks=already.count(False), already_cached=already
        )

    async def _release(
        self, request: PB2.ReleaseRequest, context: grpc.aio.ServicerContext
    ) -> PB2.ReleaseResponse:
        try:
            released = await self._tier.release(request.attachment_id, request.lease_id)
        except InfercacheError as exc:
            await abort_for(context, "Release", exc)
        return PB2.ReleaseResponse(released_slots=released)

    async def _renew(
        self, request: PB2.RenewLeaseRequest, context: grpc.aio.ServicerContext
    ) -> PB2.RenewLeaseResponse:
        try:
            lease = await self._tier.renew(
                request.attachment_id, request.lease_id, request.lease_ttl_ms
            )
        except InfercacheError as exc:
            await abort_for(context, "RenewLease", exc)
        return PB2.RenewLeaseResponse(lease=lease_to_pb(lease))

    async def AttachHotTier(
        self, request: PB2.AttachHotTierRequest, context: grpc.aio.ServicerContext
    ) -> PB2.AttachHotTierResponse:
        return await self._observe.run("AttachHotTier", request, context, self._attach)

    async def DetachHotTier(
        self, request: PB2.DetachHotTierRequest, context: grpc.aio.ServicerContext
    ) -> PB2.DetachHotTierResponse:
        return await self._observe.run("DetachHotTier", request, context, self._detach)

    async def LookupPrefix(
        self, request: PB2.LookupPrefixRequest, context: grpc.aio.ServicerContext
    ) -> PB2.LookupPrefixResponse:
        return await self._observe.run(
            "LookupPrefix", request, context, self._lookup_prefix, self._lookup_attributes
        )

    async def AllocateBlocks(
        self, request: PB2.AllocateBlocksRequest, context: grpc.aio.ServicerContext
    ) -> PB2.AllocateBlocksResponse:
        return await self._observe.run("AllocateBlocks", request, context, self._allocate)

    async def CommitBlocks(
        self, request: PB2.CommitBlocksRequest, context: grpc.aio.ServicerContext
    ) -> PB2.CommitBlocksResponse:
        return await self._observe.run("CommitBlocks", request, context, self._commit)

    async def Release(
        self, request: PB2.ReleaseRequest, context: grpc.aio.ServicerContext
    ) -> PB2.ReleaseResponse:
        return await self._observe.run("Release", request, context, self._release)

    async def RenewLease(
        self, request: PB2.RenewLeaseRequest, context: grpc.aio.ServicerContext
    ) -> PB2.RenewLeaseResponse:
        return await self._observe.run("RenewLease", request, context, self._renew)

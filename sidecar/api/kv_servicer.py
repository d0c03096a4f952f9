"""KvCacheService: translates protobuf to KvHotTier calls; domain errors become statuses
in RpcObserver.run (api/rpc.py), so the handlers only raise."""

from __future__ import annotations

import grpc
from infercache.v1 import kv_pb2 as PB2
from infercache.v1 import kv_pb2_grpc

from sidecar.api.kv_codec import (
    attach_to_pb,
    attachment_to_pb,
    layout_from_pb,
    lease_to_pb,
    prefix_to_pb,
)
from sidecar.api.observe import Attributes, RpcObserver
from sidecar.api.rpc import rpc
from sidecar.kv.domains import KvDomains
from sidecar.kv.hot_tier import KvHotTier
from sidecar.observability.stats import RpcStats
from sidecar.observability.telemetry import Telemetry

SERVICE = PB2.DESCRIPTOR.services_by_name["KvCacheService"].full_name


class KvServicer(kv_pb2_grpc.KvCacheServiceServicer):  # type: ignore[misc]
    """The KV hot tier's RPCs; KV bytes never pass through here, only slot ids."""

    def __init__(self, tier: KvDomains | KvHotTier, observer: RpcObserver | None = None) -> None:
        """`tier`: the trust domains' tiers, or one tier of every tenant."""
        self._tier = KvDomains.single(tier) if isinstance(tier, KvHotTier) else tier
        self.observer = observer or RpcObserver(SERVICE, Telemetry(), RpcStats())

    def _lookup_attributes(
        self, request: PB2.LookupPrefixRequest, response: PB2.LookupPrefixResponse | None
    ) -> Attributes:
        attrs: Attributes = {
            "infercache.tenant": self.observer.tenant(request.tenant),
            "infercache.kv.chain_blocks": len(request.block_hashes),
        }
        if response is not None:
            attrs["infercache.kv.matched_blocks"] = response.matched_blocks
            attrs["infercache.kv.promoted_blocks"] = response.promoted_blocks
            attrs["infercache.kv.retry_later"] = response.retry_later
        return attrs

    @rpc()
    async def AttachHotTier(
        self, request: PB2.AttachHotTierRequest, context: grpc.aio.ServicerContext
    ) -> PB2.AttachHotTierResponse:
        """Attach a model process: its layout, the pool it maps, the lease bounds; bound to
        the tenants it names (PERMISSION_DENIED outside its trust domain)."""
        attachment, pool, domain = await self._tier.attach(
            request.model_fingerprint,
            request.adapter_fingerprint,
            layout_from_pb(request.layout),
            tenants=request.tenants,
            domain_key=request.domain_key,
            gpu_uuid=request.gpu_uuid,
            process_name=request.process_name,
        )
        s = self._tier.settings
        return attach_to_pb(
            attachment,
            pool,
            max_chain_blocks=s.max_chain_blocks,
            default_lease_ms=s.default_lease_ms,
            max_lease_ms=s.max_lease_ms,
            attachment_ttl_ms=s.attachment_ttl_ms,
            trust_domain=domain,
        )

    @rpc()
    async def DetachHotTier(
        self, request: PB2.DetachHotTierRequest, context: grpc.aio.ServicerContext
    ) -> PB2.DetachHotTierResponse:
        """Detach: every slot the attachment held is released."""
        released = await self._tier.detach(request.attachment_id)
        return PB2.DetachHotTierResponse(released_slots=released)

    @rpc(describe=_lookup_attributes)
    async def LookupPrefix(
        self, request: PB2.LookupPrefixRequest, context: grpc.aio.ServicerContext
    ) -> PB2.LookupPrefixResponse:
        """The longest cached prefix of a block chain, pinned under a lease."""
        result = await self._tier.lookup_prefix(
            request.attachment_id,
            request.tenant,
            request.cache_salt,
            request.block_hashes,
            lease_ttl_ms=request.lease_ttl_ms,
            hot_only=request.hot_only,
        )
        return prefix_to_pb(result)

    @rpc()
    async def AllocateBlocks(
        self, request: PB2.AllocateBlocksRequest, context: grpc.aio.ServicerContext
    ) -> PB2.AllocateBlocksResponse:
        """Free slots for new blocks, held under a lease."""
        slots, lease, generations = await self._tier.allocate(
            request.attachment_id,
            request.count,
            lease_id=request.lease_id,
            lease_ttl_ms=request.lease_ttl_ms,
        )
        return PB2.AllocateBlocksResponse(
            slot_ids=slots, lease=lease_to_pb(lease), slot_generations=generations
        )

    @rpc()
    async def CommitBlocks(
        self, request: PB2.CommitBlocksRequest, context: grpc.aio.ServicerContext
    ) -> PB2.CommitBlocksResponse:
        """Publish written slots under their block hashes."""
        already = await self._tier.commit(
            request.attachment_id,
            request.lease_id,
            request.tenant,
            request.cache_salt,
            [(b.slot_id, b.block_hash) for b in request.blocks],
        )
        return PB2.CommitBlocksResponse(
            committed_blocks=already.count(False), already_cached=already
        )

    @rpc()
    async def Release(
        self, request: PB2.ReleaseRequest, context: grpc.aio.ServicerContext
    ) -> PB2.ReleaseResponse:
        """Give up a lease's pins and allocations."""
        released = await self._tier.release(request.attachment_id, request.lease_id)
        return PB2.ReleaseResponse(released_slots=released)

    @rpc()
    async def RenewLease(
        self, request: PB2.RenewLeaseRequest, context: grpc.aio.ServicerContext
    ) -> PB2.RenewLeaseResponse:
        """Extend a lease."""
        lease = await self._tier.renew(
            request.attachment_id, request.lease_id, request.lease_ttl_ms
        )
        return PB2.RenewLeaseResponse(lease=lease_to_pb(lease))

    @rpc()
    async def RenewAttachment(
        self, request: PB2.RenewAttachmentRequest, context: grpc.aio.ServicerContext
    ) -> PB2.RenewAttachmentResponse:
        """The model process is alive: keep its attachment (and so its leases)."""
        return attachment_to_pb(await self._tier.keep_alive(request.attachment_id))

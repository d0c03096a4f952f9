"""Pure protobuf <-> domain conversions for KvCacheService (no I/O, no grpc)."""

from __future__ import annotations

from infercache.v1 import kv_pb2 as PB2

from sidecar.errors import InvalidArgument
from sidecar.kv.layout import KvLayout, make_layout
from sidecar.kv.pool import CudaIpcExport, SharedMemoryExport
from sidecar.kv.types import Attachment, AttachmentView, LeaseView, PoolInfo, PrefixResult

_DTYPE_FROM_PB = {
    PB2.KV_DTYPE_FLOAT32: "float32",
    PB2.KV_DTYPE_FLOAT16: "float16",
    PB2.KV_DTYPE_BFLOAT16: "bfloat16",
    PB2.KV_DTYPE_FLOAT8_E4M3FN: "float8_e4m3fn",
    PB2.KV_DTYPE_FLOAT8_E5M2: "float8_e5m2",
}
_DTYPE_TO_PB = {v: k for k, v in _DTYPE_FROM_PB.items()}
_SLOT_LAYOUT_FROM_PB = {
    PB2.KV_SLOT_LAYOUT_UNSPECIFIED: "",
    PB2.KV_SLOT_LAYOUT_LAYER_KV_TOKEN_HEAD_DIM: "layer_kv_token_head_dim",
}
_SLOT_LAYOUT_TO_PB = {"layer_kv_token_head_dim": PB2.KV_SLOT_LAYOUT_LAYER_KV_TOKEN_HEAD_DIM}


def layout_from_pb(msg: PB2.KvLayout) -> KvLayout:
    """Validated domain layout; unknown enum values are INVALID_ARGUMENT."""
    if msg.dtype not in _DTYPE_FROM_PB:
        raise InvalidArgument("layout.dtype", "is required (a KvDtype value)")
    if msg.slot_layout not in _SLOT_LAYOUT_FROM_PB:
        raise InvalidArgument("layout.slot_layout", f"unknown value {msg.slot_layout}")
    return make_layout(
        num_layers=msg.num_layers,
        num_kv_heads=msg.num_kv_heads,
        head_dim=msg.head_dim,
        tokens_per_block=msg.tokens_per_block,
        dtype=_DTYPE_FROM_PB[msg.dtype],
        tp_size=msg.tp_size,
        tp_rank=msg.tp_rank,
        kv_scales_id=msg.kv_scales_id,
        rope_config=msg.rope_config,
        slot_layout=_SLOT_LAYOUT_FROM_PB[msg.slot_layout],
        extra=dict(msg.extra),
    )


def layout_to_pb(layout: KvLayout) -> PB2.KvLayout:
    """The canonical layout as a message."""
    return PB2.KvLayout(
        num_layers=layout.num_layers,
        num_kv_heads=layout.num_kv_heads,
        head_dim=layout.head_dim,
        tokens_per_block=layout.tokens_per_block,
        dtype=_DTYPE_TO_PB[layout.dtype],
        tp_size=layout.tp_size,
        tp_rank=layout.tp_rank,
        kv_scales_id=layout.kv_scales_id,
        rope_config=layout.rope_config,
        slot_layout=_SLOT_LAYOUT_TO_PB[layout.slot_layout],
        extra=dict(layout.extra),
    )


def attach_to_pb(
    attachment: Attachment,
    pool: PoolInfo,
    *,
    max_chain_blocks: int,
    default_lease_ms: int,
    max_lease_ms: int,
    attachment_ttl_ms: int,
    trust_domain: str = "",
) -> PB2.AttachHotTierResponse:
    """The attachment id, the pool handle and the canonical layout."""
    layout = attachment.layout
    handle = PB2.PoolHandle(
        pool_id=pool.pool_id,
        num_slots=pool.num_slots,
        slot_bytes=pool.slot_bytes,
        block_bytes=layout.block_bytes,
        dtype=_DTYPE_TO_PB[layout.dtype],
        slot_shape=list(layout.slot_shape),
    )
    loc = pool.location
    if isinstance(loc, SharedMemoryExport):
        handle.shared_memory.CopyFrom(
            PB2.SharedMemoryPool(path=loc.path, size_bytes=loc.size_bytes)
        )
    elif isinstance(loc, CudaIpcExport):
        handle.cuda_ipc.CopyFrom(
            PB2.CudaIpcPool(
                gpu_uuid=loc.gpu_uuid,
                ipc_handle=loc.ipc_handle,
                storage_size_bytes=loc.storage_size_bytes,
                storage_offset_bytes=loc.storage_offset_bytes,
                ref_counter_handle=loc.ref_counter_handle,
                ref_counter_offset=loc.ref_counter_offset,
                event_handle=loc.event_handle,
                event_sync_required=loc.event_sync_required,
            )
        )
    if pool.generations is not None:
        handle.generations.CopyFrom(
            PB2.SlotGenerations(path=pool.generations.path, size_bytes=pool.generations.size_bytes)
        )
    return PB2.AttachHotTierResponse(
        attachment_id=attachment.attachment_id,
        pool=handle,
        layout=layout_to_pb(layout),
        scope_id=attachment.scope.hex(),
        max_chain_blocks=max_chain_blocks,
        default_lease_ttl_ms=default_lease_ms,
        max_lease_ttl_ms=max_lease_ms,
        attachment_ttl_ms=attachment_ttl_ms,
        trust_domain=trust_domain,
    )


def lease_to_pb(lease: LeaseView | None) -> PB2.Lease:
    """A lease message (empty when there is none)."""
    if lease is None:
        return PB2.Lease()
    return PB2.Lease(
        lease_id=lease.lease_id, expires_at_unix_ms=lease.expires_at_unix_ms, ttl_ms=lease.ttl_ms
    )


def prefix_to_pb(result: PrefixResult) -> PB2.LookupPrefixResponse:
    """Slot ids and lease of a prefix lookup."""
    return PB2.LookupPrefixResponse(
        matched_blocks=len(result.slots),
        slot_ids=result.slots,
        lease=lease_to_pb(result.lease),
        retry_later=result.retry_later,
        retry_after_ms=result.retry_after_ms,
        promoted_blocks=result.promoted,
        slot_generations=result.generations,
    )


def attachment_to_pb(view: AttachmentView) -> PB2.RenewAttachmentResponse:
    """An attachment's new expiry."""
    return PB2.RenewAttachmentResponse(
        expires_at_unix_ms=view.expires_at_unix_ms, attachment_ttl_ms=view.ttl_ms
    )

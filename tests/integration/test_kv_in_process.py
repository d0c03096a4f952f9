"""KV hot tier in an in-process sidecar: observed RPCs, and no warm tier without Redis."""

from __future__ import annotations

import grpc
import pytest
from infercache.v1 import kv_pb2 as pb
from infercache.v1 import kv_pb2_grpc

from tests.support.sidecars import StartSidecar

pytest.importorskip("torch")

LAYOUT = pb.KvLayout(
    num_layers=1, num_kv_heads=1, head_dim=8, tokens_per_block=2, dtype=pb.KV_DTYPE_FLOAT16
)


async def test_kv_rpcs_are_timed_and_versions_drop_without_redis(
    start_sidecar: StartSidecar,
) -> None:
    """Every KV RPC lands in the RPC duration stats; with no Redis an old version is dropped."""
    sidecar = await start_sidecar(kv_pool_bytes="4KiB")
    async with grpc.aio.insecure_channel(sidecar.target) as channel:
        stub = kv_pb2_grpc.KvCacheServiceStub(channel)
        a = await stub.AttachHotTier(
            pb.AttachHotTierRequest(model_fingerprint="fp-1", layout=LAYOUT), timeout=60
        )
        assert a.pool.WhichOneof("location") == "shared_memory"
        assert list(a.pool.slot_shape) == [1, 2, 2, 1, 8]
        alloc = await stub.AllocateBlocks(
            pb.AllocateBlocksRequest(attachment_id=a.attachment_id, count=1), timeout=10
        )
        await stub.CommitBlocks(
            pb.CommitBlocksRequest(
                attachment_id=a.attachment_id,
                lease_id=alloc.lease.lease_id,
                tenant="acme",
                blocks=[pb.BlockCommit(slot_id=alloc.slot_ids[0], block_hash=b"h")],
            ),
            timeout=10,
        )
        await stub.Release(
            pb.ReleaseRequest(attachment_id=a.attachment_id, lease_id=alloc.lease.lease_id),
            timeout=10,
        )
        b = await stub.AttachHotTier(
            pb.AttachHotTierRequest(model_fingerprint="fp-2", layout=LAYOUT), timeout=10
        )
        back = await stub.AttachHotTier(
            pb.AttachHotTierRequest(model_fingerprint="fp-1", layout=LAYOUT), timeout=10
        )
        miss = await stub.LookupPrefix(
            pb.LookupPrefixRequest(
                attachment_id=back.attachment_id, tenant="acme", block_hashes=[b"h"]
            ),
            timeout=10,
        )
        assert miss.matched_blocks == 0  # no warm tier: fp-1's block was dropped
        assert not miss.retry_later
        await stub.DetachHotTier(pb.DetachHotTierRequest(attachment_id=b.attachment_id))
    kv = sidecar.running.kv
    assert kv is not None
    assert kv.stats.dropped_blocks == 1
    timed = {rpc for rpc, _ in sidecar.running.rpc_stats.snapshot()}
    assert {"AttachHotTier", "AllocateBlocks", "CommitBlocks", "Release", "LookupPrefix"} <= timed
    assert "DetachHotTier" in timed

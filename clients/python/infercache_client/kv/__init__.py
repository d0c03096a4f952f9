"""KV hot-tier helper: attach to the sidecar's slot pool and map it as torch tensors.

Needs the `kv` extra (torch); `import infercache_client` alone never imports torch, nor
does importing a torch-free submodule (hashing, leases): the names below are imported
on first access (the sidecar's KV event builder hashes chains without torch).

    with KvCacheClient("127.0.0.1:50051") as client:
        tier = client.attach(model_fingerprint=fp, layout=kv_layout(...), device="cpu")
        hashes = chain_hashes(token_ids, tier.layout.tokens_per_block)
        hit = tier.lookup_prefix("acme", hashes)
        past = tier.pool.read_prefix(hit.slot_ids)   # per layer (K, V)
        ...
        tier.release(hit.lease.lease_id)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOMES = {
    "Allocation": "client",
    "CommitResult": "client",
    "HotTier": "client",
    "KvCacheClient": "client",
    "Lease": "client",
    "PrefixMatch": "client",
    "VerifiedRead": "client",
    "chain_hashes": "hashing",
    "LeaseRenewer": "leases",
    "KvPool": "pool",
    "PoolUnavailable": "pool",
    "device_uuid": "pool",
    "kv_layout": "pool",
    "map_pool": "pool",
    "torch_dtype": "pool",
}

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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)

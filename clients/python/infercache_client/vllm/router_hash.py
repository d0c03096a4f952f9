"""The block hash infercache publishes in KV events, as a router computes it (docs/kv-events.md).

A published hash names one block in one scope: SHA-256 over a domain tag and the
sidecar's own block key, which is the request scope (weights, adapter, KV layout,
tenant, cache salt: sidecar/kv/layout.py) followed by the connector's chain hash of
the block (chain.py: token ids, seeded by the LoRA adapter and the cache salt):

    published_i = SHA-256("infercache.kv.event.v1\\0" || request_scope || chain_i)
    request_scope = SHA-256("infercache.kv.tenant.v1\\0" || scope || lp(tenant) || lp(cache_salt))

`scope` is the 32-byte version scope the sidecar reports at attach (`scope_id`, hex;
events carry it in `extra_keys`), lp(x) is x's UTF-8 length as 4 bytes big-endian then x.
Equal published hashes therefore mean equal token prefixes under equal weights,
adapter, layout, tenant and salt; no two scopes share one. The connector and the
sidecar's publisher both derive published hashes from block keys with `event_hash`,
so what a router computes here is what they publish. Pure: no vLLM, no torch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from infercache_client.vllm.chain import ChainScope, request_chain

EVENT_DOMAIN = b"infercache.kv.event.v1\0"
_TENANT_DOMAIN = b"infercache.kv.tenant.v1\0"
_SALT_DIGEST_DOMAIN = b"infercache.kv.event.tenant-salt.v1\0"
SCOPE_BYTES = 32
UNBOUNDED = 1 << 31
"""No chain limit: a router hashes every full block (blocks past the sidecar's
max_chain_blocks are never stored, so their hashes are never published)."""


def _field(text: str) -> bytes:
    raw = text.encode()
    return len(raw).to_bytes(4, "big") + raw


def _scope_bytes(scope_id: str | bytes) -> bytes:
    scope = bytes.fromhex(scope_id) if isinstance(scope_id, str) else bytes(scope_id)
    if len(scope) != SCOPE_BYTES:
        raise ValueError(f"a version scope is {SCOPE_BYTES} bytes, not {len(scope)}")
    return scope


def request_scope(scope_id: str | bytes, tenant: str, cache_salt: str) -> bytes:
    """The sidecar's scope prefix of a tenant's, salt's blocks under a version scope."""
    h = hashlib.sha256(_TENANT_DOMAIN)
    h.update(_scope_bytes(scope_id))
    h.update(_field(tenant))
    h.update(_field(cache_salt))
    return h.digest()


def event_hash(block_key: bytes) -> bytes:
    """The published hash of the block stored under `block_key` (request scope + chain hash)."""
    return hashlib.sha256(EVENT_DOMAIN + block_key).digest()


def event_hashes(prefix: bytes, chain: Sequence[bytes]) -> list[bytes]:
    """Published hashes of a chain's blocks under one request scope `prefix`."""
    return [event_hash(prefix + h) for h in chain]


def tenant_salt_digest(tenant: str, cache_salt: str) -> str:
    """What events carry instead of the tenant and salt (hex): equal for equal pairs,
    and neither in clear (docs/security.md: a guessable salt can still be guessed)."""
    return hashlib.sha256(_SALT_DIGEST_DOMAIN + _field(tenant) + _field(cache_salt)).hexdigest()


def router_block_hashes(
    token_ids: Sequence[int],
    block_size: int,
    *,
    scope_id: str | bytes,
    tenant: str,
    cache_salt: str = "",
    lora_name: str = "",
    lora_fingerprint: str = "",
) -> list[bytes]:
    """The published hashes of every full block of a request's prompt, as the connector
    of an engine attached with `scope_id` for `tenant` publishes them.

    `cache_salt` is the request's (vLLM's `cache_salt`, "" without one); `lora_name` and
    `lora_fingerprint` the adapter's name and files' fingerprint (events carry both),
    "" for the base model.
    """
    if bool(lora_name) != bool(lora_fingerprint):
        raise ValueError("a LoRA request needs both the adapter's name and its fingerprint")
    chain = request_chain(
        token_ids, block_size, ChainScope(lora_name, lora_fingerprint, cache_salt), UNBOUNDED
    )
    return event_hashes(request_scope(scope_id, tenant, cache_salt), chain)

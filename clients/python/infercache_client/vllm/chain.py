"""The connector's own block hashes: chained over token ids, seeded by adapter and salt.

vLLM's block hashes are salted per process (unless PYTHONHASHSEED is fixed), so they
cannot name a block across engines. These hashes are SHA-256 chains over the token
ids (infercache_client.kv.chain_hashes) whose seed covers everything the tokens do
not say: the LoRA adapter (name and fingerprint of its files) and the request's
cache_salt. The sidecar scopes each hash again by model fingerprint, KV layout,
tenant and salt, so even a seed collision could never cross those.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from infercache_client.kv.hashing import chain_hashes

_DOMAIN = b"infercache-vllm-chain-v1"


@dataclass(frozen=True, slots=True)
class ChainScope:
    """What seeds a request's chain besides its tokens."""

    lora_name: str = ""
    lora_fingerprint: str = ""
    cache_salt: str = ""

    def seed(self) -> bytes:
        """Length-prefixed fields, so no two scopes share a seed."""
        h = hashlib.sha256(_DOMAIN)
        for part in (self.lora_name, self.lora_fingerprint, self.cache_salt):
            raw = part.encode()
            h.update(len(raw).to_bytes(4, "little") + raw)
        return h.digest()


def request_chain(
    token_ids: Sequence[int], block_size: int, scope: ChainScope, max_blocks: int
) -> list[bytes]:
    """Hashes of the first `max_blocks` full blocks of `token_ids` under `scope`."""
    usable = min(len(token_ids) // block_size, max_blocks)
    if usable <= 0:
        return []
    return chain_hashes(token_ids[: usable * block_size], block_size, parent=scope.seed())

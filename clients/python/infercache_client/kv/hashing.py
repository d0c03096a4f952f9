"""Chained block hashes of a token sequence (no torch, no sidecar round trip)."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence


def chain_hashes(
    token_ids: Sequence[int], tokens_per_block: int, *, parent: bytes = b""
) -> list[bytes]:
    """SHA-256 hash of every full block of `token_ids`, each chained on the one before.

    Block i's hash covers tokens [0, (i + 1) * tokens_per_block), so equal hashes mean
    equal prefixes. A trailing partial block gets no hash (only full blocks are cached).
    `parent` seeds the chain (e.g. a hash over a multimodal input that precedes the text).
    The sidecar adds the model version, adapter, layout and tenant to the key itself.
    """
    if tokens_per_block <= 0:
        raise ValueError("tokens_per_block must be > 0")
    pack = struct.Struct(f"<{tokens_per_block}q").pack
    hashes: list[bytes] = []
    prev = parent
    for start in range(0, len(token_ids) - tokens_per_block + 1, tokens_per_block):
        block = token_ids[start : start + tokens_per_block]
        prev = hashlib.sha256(prev + pack(*block)).digest()
        hashes.append(prev)
    return hashes
